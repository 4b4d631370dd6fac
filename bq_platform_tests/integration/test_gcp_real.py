"""The GCS and BigQuery adapters against a real Google Cloud project: a whole day, end to end.

Skipped unless these are set (see docs/production.md):

- ``GOOGLE_APPLICATION_CREDENTIALS``: a service-account key file (or set
  ``BQ_PLATFORM_GCP_USE_ADC=1`` to use other Application Default Credentials);
- ``BQ_PLATFORM_GCP_PROJECT``: the project that runs the jobs;
- ``BQ_PLATFORM_BUCKET``: a bucket the credentials may write to;
- optional ``BQ_PLATFORM_BQ_LOCATION`` (default ``US``; the bucket must be readable from it).

Everything is created under a unique name (a dataset ``bqp_it_<hex>`` and the object prefix
``bq_platform_it/<hex>/``) and deleted afterwards. Run with ``pytest -m gcp``; it takes a few
minutes (24 load jobs, 1 copy job) and costs nothing measurable (kilobytes).

What the emulators cannot show is checked here for real: ``gs://`` paths with ``key=value``
folders (the real layout), the ``table$YYYYMMDD`` copy, the 409 on a reused job ID, a failed
``WRITE_TRUNCATE`` leaving the table intact, ``require_partition_filter`` and stage-table
expiration read back, and the copy's ``copiedRows``.
"""

import datetime as dt
import os
import uuid
from collections.abc import Iterator

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.job_ids import day_fingerprint, job_id, job_labels, sha256_json
from bq_platform.lib.publish.idempotent_jobs import run_idempotent_job
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.storage.gcs import GCSObjectStore, gcs_client
from bq_platform.lib.warehouse.base import (
    CopyJob,
    JobConflictError,
    JobFailedError,
    LoadJob,
)
from bq_platform.lib.warehouse.bigquery.client import bigquery_client
from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
from bq_platform.lib.warehouse.schema import pageviews_spec, stage_spec
from bq_platform_tests.lib.warehouse.bigquery.test_warehouse import pageview_parquet

_HAVE_CREDENTIALS = bool(
    os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or os.environ.get("BQ_PLATFORM_GCP_USE_ADC")
)
_MISSING = [
    name
    for name, ok in (
        ("GOOGLE_APPLICATION_CREDENTIALS", _HAVE_CREDENTIALS),
        ("BQ_PLATFORM_GCP_PROJECT", bool(os.environ.get("BQ_PLATFORM_GCP_PROJECT"))),
        ("BQ_PLATFORM_BUCKET", bool(os.environ.get("BQ_PLATFORM_BUCKET"))),
    )
    if not ok
]

pytestmark = [
    pytest.mark.gcp,
    pytest.mark.skipif(bool(_MISSING), reason=f"real GCP test: set {', '.join(_MISSING)}"),
]

DAY = dt.date(1995, 8, 1)
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in range(24)]
RUN_ID = f"it-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def project() -> str:
    return os.environ["BQ_PLATFORM_GCP_PROJECT"]


@pytest.fixture(scope="module")
def store(project: str) -> Iterator[GCSObjectStore]:
    prefix = f"bq_platform_it/{uuid.uuid4().hex[:12]}"
    gcs = GCSObjectStore(os.environ["BQ_PLATFORM_BUCKET"], gcs_client(project), prefix=prefix)
    yield gcs
    for folder in ("staging", "landing"):
        gcs.delete_prefix(folder)


@pytest.fixture(scope="module")
def warehouse(project: str) -> Iterator[BigQueryWarehouse]:
    location = os.environ.get("BQ_PLATFORM_BQ_LOCATION", "US")
    client = bigquery_client(project, location)
    dataset = f"bqp_it_{uuid.uuid4().hex[:12]}"
    yield BigQueryWarehouse(client, project, dataset, location, job_id_prefix=f"{dataset}_")
    client.delete_dataset(f"{project}.{dataset}", delete_contents=True, not_found_ok=True)


def test_gcs_round_trip(store: GCSObjectStore) -> None:
    key = layout.hour_manifest_key(HOURS[0])
    store.write_text(key, "{}")
    assert store.read_text(key) == "{}"
    assert store.list_folders(layout.STAGING_PREFIX) == [f"hour={layout.hour_label(HOURS[0])}"]
    assert store.key_for_uri(store.uri(key)) == key
    assert store.delete_prefix(layout.STAGING_PREFIX) == 1


def _load_hour(
    warehouse: BigQueryWarehouse, store: GCSObjectStore, hour: dt.datetime, rows: int
) -> tuple[str, int]:
    """Write the hour's Parquet at its real layout keys and load it; return (job, rows)."""
    prefix = f"{layout.attempt_prefix(RUN_ID)}/full/hour={layout.hour_label(hour)}"
    key = f"{prefix}/part-00000.parquet"
    store.write_bytes(key, pageview_parquet(hour, rows))
    spec = stage_spec("full", hour)
    partition = f"{hour:%Y%m%d%H}"
    fingerprint = sha256_json([RUN_ID, partition, rows])
    warehouse.ensure_table(spec)

    def make(generation: int) -> LoadJob:
        return LoadJob(
            job_id=job_id("load", spec.name, partition, fingerprint, generation),
            destination=spec.name,
            source_uris=(store.uri(f"{prefix}/part-*.parquet"),),  # one wildcard per hour
            spec=spec,
            labels=job_labels("stage_tables", partition, RUN_ID, fingerprint),
        )

    outcome = run_idempotent_job(
        warehouse, make, fingerprint=fingerprint, partition=partition, budget=JobBudget()
    )
    return outcome.job_id, rows


def test_whole_day(warehouse: BigQueryWarehouse, store: GCSObjectStore) -> None:
    loaded = {hour: _load_hour(warehouse, store, hour, 3 + hour.hour % 4) for hour in HOURS}
    total = sum(rows for _, rows in loaded.values())
    for hour, (_job, rows) in loaded.items():
        assert warehouse.table_rows(stage_spec("full", hour).name) == rows
    stage = warehouse.client.get_table(warehouse.table_id(stage_spec("full", HOURS[0]).name))
    assert stage.expires is not None  # emulator GAP-EXPIRES, checked for real

    spec = pageviews_spec(require_partition_filter=True)
    warehouse.ensure_table(spec)
    table = warehouse.client.get_table(warehouse.table_id(spec.name))
    assert table.require_partition_filter is True  # emulator GAP-RPF, checked for real
    assert table.clustering_fields == ["site", "page_path"]

    fingerprint = day_fingerprint({layout.hour_label(h): j for h, (j, _) in loaded.items()})
    sources = tuple(f"{stage_spec('full', h).name}${DAY:%Y%m%d}" for h in HOURS)

    def make(generation: int) -> CopyJob:
        return CopyJob(
            job_id=job_id("copy", spec.name, "19950801", fingerprint, generation),
            sources=sources,
            destination=f"{spec.name}$19950801",
            labels=job_labels("pageviews", "19950801", RUN_ID, fingerprint),
        )

    outcome = run_idempotent_job(
        warehouse, make, fingerprint=fingerprint, partition="19950801", budget=JobBudget()
    )
    assert outcome.action == "submitted"
    assert outcome.rows == total  # statistics.copy.copiedRows (emulator GAP-COPY-STATS)
    assert warehouse.partition_rows(spec.name, DAY) == total
    assert warehouse.partition_rows(spec.name, DAY + dt.timedelta(days=1)) == 0

    # Re-running the day submits nothing.
    today = dt.datetime.now(dt.UTC).date()
    jobs_before = warehouse.jobs_submitted(spec.name, today)
    again = run_idempotent_job(warehouse, make, fingerprint=fingerprint, partition="19950801")
    assert (again.action, again.job_id) == ("skipped", outcome.job_id)
    assert warehouse.jobs_submitted(spec.name, today) == jobs_before == 1

    # A reused job ID answers 409 (emulator GAP-409).
    with pytest.raises(JobConflictError):
        warehouse.submit_job(make(0))


def test_failed_truncate_leaves_the_table_intact(
    warehouse: BigQueryWarehouse, store: GCSObjectStore
) -> None:
    hour = HOURS[0]
    table = stage_spec("full", hour).name
    _, rows = _load_hour(warehouse, store, hour, 5)
    before = warehouse.table_rows(table)
    spec = stage_spec("full", hour)
    missing = store.uri("staging/pageviews/missing/part-*.parquet")
    fingerprint = sha256_json([RUN_ID, "missing"])

    def make(generation: int) -> LoadJob:
        return LoadJob(
            job_id("load", table, "1995080100", fingerprint, generation), table, (missing,), spec
        )

    with pytest.raises(JobFailedError):
        run_idempotent_job(warehouse, make, fingerprint=fingerprint, partition="1995080100")
    assert warehouse.table_rows(table) == before  # emulator GAP-TRUNCATE, checked for real
