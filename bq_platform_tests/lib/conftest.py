"""Fixtures for the adapter tests: the GCS and BigQuery emulators (see ``emulators.py``)."""

from bq_platform_tests.emulators import (  # noqa: F401 - re-exported pytest fixtures
    bq_dataset,
    bq_emulator,
    gcs_bucket,
    gcs_emulator,
)
