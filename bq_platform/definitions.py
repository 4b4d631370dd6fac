"""Entry point of the code location (``workspace.yaml``, ``dagster dev``, ``bq-platform run``).

Everything under ``bq_platform/defs/`` is discovered by ``dg.load_from_defs_folder``; the
resources of the environment (``BQ_PLATFORM_ENV``) are bound in ``defs/resources.py``.
"""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    """All definitions of the project."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
