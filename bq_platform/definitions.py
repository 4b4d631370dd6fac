"""Entry point of the code location: everything under ``bq_platform/defs/``, whose
``resources.py`` binds the environment's resources.
"""

from pathlib import Path

import dagster as dg


@dg.definitions
def defs() -> dg.Definitions:
    """All definitions of the project."""
    return dg.load_from_defs_folder(path_within_project=Path(__file__).parent)
