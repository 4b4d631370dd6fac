"""Tests of ``scripts/``: its modules import each other by name, so it goes on ``sys.path``."""

import sys

from bq_platform_tests.conftest import REPO_ROOT

SCRIPTS = str(REPO_ROOT / "scripts")
if SCRIPTS not in sys.path:
    sys.path.insert(0, SCRIPTS)
