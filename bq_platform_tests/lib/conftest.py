"""Fixtures for the adapter tests: the GCS and BigQuery emulators (see ``emulators.py``), and
the shim that gives bqemulator BigQuery's documented behaviour where it lacks it."""

from collections.abc import Iterator

import pytest

from bq_platform_tests.bigquery_shim import BigQueryShim
from bq_platform_tests.emulators import (  # noqa: F401 - re-exported pytest fixtures
    BigQueryEmulator,
    bq_dataset,
    bq_emulator,
    gcs_bucket,
    gcs_emulator,
)
from bq_platform_tests.http_recording import RecordingSession


@pytest.fixture
def shim(bq_emulator: BigQueryEmulator) -> Iterator[BigQueryShim]:  # noqa: F811 - the fixture
    """:class:`BigQueryShim` in front of the module's bqemulator (partition decorators, 409 on
    a reused job ID, ``tabledata.list`` of a partition, ...); the rest goes to the emulator."""
    made = BigQueryShim(bq_emulator.endpoint, bq_emulator.project)
    yield made
    made.close()


@pytest.fixture
def session(shim: BigQueryShim) -> RecordingSession:
    """A recording HTTP session through :func:`shim`, for ``bq_emulator.client(session)``."""
    return shim.session()
