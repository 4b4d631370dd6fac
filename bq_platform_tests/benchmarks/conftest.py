"""Tests of ``benchmarks/``: its modules import each other by name, so it goes on ``sys.path``."""

import sys

from bq_platform_tests.conftest import REPO_ROOT

BENCHMARKS = str(REPO_ROOT / "benchmarks")
if BENCHMARKS not in sys.path:
    sys.path.insert(0, BENCHMARKS)
