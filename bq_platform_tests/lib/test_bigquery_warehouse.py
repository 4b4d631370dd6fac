"""BigQueryWarehouse against bqemulator (BigQuery REST on loopback) and gcp-storage-emulator.

What the emulator supports is tested against it: tables and their spec read-back, the ensure
cache, hourly loads of gs:// Parquet written through the GCS emulator, get_job and the job
state machine, the job budget, INFORMATION_SCHEMA.PARTITIONS, the ledger and audit MERGEs.

What it lacks is tested by asserting the exact job resource the official client sends (the
``jobs.insert`` body is ``job.to_api_repr()``, captured by :class:`RecordingSession`) and by
answering like BigQuery would (:class:`SimulatedJobs`). Every such test names the gap:

- GAP-DECORATOR: ``table$YYYYMMDD`` as a load/copy destination answers 400 "Invalid table id".
- GAP-409: a reused job ID is not refused with 409 ``duplicate``; the job runs again.
- GAP-HIVE: a gs:// path with ``key=value`` folders (our layout: ``attempt=...``, ``hour=...``)
  is read with DuckDB's hive partitioning, which adds those keys as columns, and Parquet
  columns are inserted by position, not by name (BigQuery ignores the path without
  ``hivePartitioningOptions`` and matches by name). Emulator loads use keys without ``=``.
- GAP-RPF: the table-level ``requirePartitionFilter`` is dropped (only the deprecated
  ``timePartitioning.requirePartitionFilter`` is kept), so read-back tests use specs without it.
- GAP-EXPIRES: ``expirationTime`` is not kept either.
- GAP-PATCH-DDL: a schema patch changes the catalog only, not the DuckDB table.
- GAP-COPY-STATS: copy jobs report no ``statistics.copy.copiedRows`` and leave ``numRows`` of
  the destination's metadata at its old value.
- GAP-COPY-MULTI: a copy job with several source tables copies only the first one.
- GAP-TRUNCATE: a failed ``WRITE_TRUNCATE`` load empties the table (BigQuery leaves it intact).
- GAP-LABEL-NONE: a label set to None answers HTTP 500 (retried by the client for 10 minutes
  unless a short ``retry=`` is given); the adapter refuses None before sending.
- GAP-SCRIPT-PARAMS: query parameters are not bound inside multi-statement scripts, one reason
  the adapter uses single MERGE statements.
- GAP-JOBS-LIST: ``jobs.list`` ignores ``minCreationTime``/``maxCreationTime`` (the adapter also
  filters by creation time itself); ``INFORMATION_SCHEMA.JOBS`` does not exist.
"""

import dataclasses
import datetime as dt
import io
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

from bq_platform.lib.accounting import SiteHourCounts, audit_records
from bq_platform.lib.jobids import day_fingerprint, job_id, job_labels, sha256_json
from bq_platform.lib.jobs import run_idempotent_job
from bq_platform.lib.objectstore.gcs import GCSObjectStore
from bq_platform.lib.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.retries import api_retry, query_job_retry
from bq_platform.lib.warehouse.base import (
    CopyJob,
    JobFailedError,
    LoadJob,
    PublishRecord,
    SchemaMismatchError,
    WarehouseError,
)
from bq_platform.lib.warehouse.bigquery import (
    MAX_LOAD_URIS,
    PUBLISH_LEDGER_TABLE,
    BigQueryWarehouse,
    bigquery_client,
    validate_labels,
)
from bq_platform.lib.warehouse.schema import (
    PAGEVIEW_COLUMNS,
    Column,
    TableSpec,
    audit_spec,
    pageviews_spec,
    stage_spec,
)
from bq_platform_tests.emulators import (
    BigQueryEmulator,
    GCSEmulator,
    RecordingSession,
    SimulatedJobs,
    unique_name,
)

pytestmark = pytest.mark.emulator

DAY = dt.date(1995, 8, 1)
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (4, 5)]
RUN_ID = "run-0001"

_ARROW_TYPES = {
    "STRING": pa.string(),
    "INT64": pa.int64(),
    "TIMESTAMP": pa.timestamp("us", tz="UTC"),
    "DATE": pa.date32(),
}
PAGEVIEW_ARROW_SCHEMA = pa.schema(
    [
        pa.field(c.name, _ARROW_TYPES[c.type], nullable=c.mode != "REQUIRED")
        for c in PAGEVIEW_COLUMNS
    ]
)


def fp(warehouse: BigQueryWarehouse, content: object) -> str:
    """A content fingerprint unique to the test's dataset.

    Job IDs are project-wide and every test shares the emulator's project, so content that
    repeats across tests must not produce the same job ID (see test_job_ids_are_project_wide).
    """
    return sha256_json([warehouse.dataset, content])


def pageview_parquet(hour: dt.datetime, rows: int, site: str = "epa.gov") -> bytes:
    """Parquet bytes of ``rows`` pageviews in ``hour`` (schema.PAGEVIEW_COLUMNS, in order)."""
    ts = [hour + dt.timedelta(seconds=i) for i in range(rows)]
    data: dict[str, list[Any]] = {
        "event_id": [f"{hour:%Y%m%d%H}-{site}-{i}" for i in range(rows)],
        "event_ts": ts,
        "event_date": [t.date() for t in ts],
        "site": [site] * rows,
        "visitor_id": [f"v{i % 3}" for i in range(rows)],
        "page_path": [f"/page/{i}.html" for i in range(rows)],
        "query_string": [None] * rows,
        "http_method": ["GET"] * rows,
        "http_protocol": ["HTTP/1.0"] * rows,
        "status": [200] * rows,
        "response_bytes": [1000 + i for i in range(rows)],
        "referrer": [None] * rows,
        "user_agent": ["Mosaic/2.0"] * rows,
    }
    buffer = io.BytesIO()
    pq.write_table(pa.table(data, schema=PAGEVIEW_ARROW_SCHEMA), buffer)
    return buffer.getvalue()


@pytest.fixture
def session() -> RecordingSession:
    return RecordingSession()


@pytest.fixture
def make_warehouse(
    bq_emulator: BigQueryEmulator, bq_dataset: str
) -> Callable[..., BigQueryWarehouse]:
    """A new warehouse object (= a new run) on the test's dataset, optionally over a session."""

    def make(
        session: RecordingSession | None = None, dataset: str = bq_dataset
    ) -> BigQueryWarehouse:
        return BigQueryWarehouse(
            bq_emulator.client(session),
            bq_emulator.project,
            dataset,
            "US",
            retry=api_retry(timeout_s=5.0),  # GAP-LABEL-NONE & co: never wait 10 minutes
            job_retry=query_job_retry(timeout_s=5.0),
            poll_initial_s=0.01,
            poll_max_s=0.05,
        )

    return make


@pytest.fixture
def warehouse(
    make_warehouse: Callable[..., BigQueryWarehouse], session: RecordingSession
) -> BigQueryWarehouse:
    return make_warehouse(session)


@pytest.fixture
def store(gcs_emulator: GCSEmulator, gcs_bucket: str) -> GCSObjectStore:
    return GCSObjectStore(gcs_bucket, gcs_emulator.client())


def stage_hour(
    store: GCSObjectStore, hour: dt.datetime, rows: int, attempt: str = "a1"
) -> list[str]:
    """Write one hour's Parquet (two files) to GCS; return their gs:// URIs.

    GAP-HIVE: keys without ``key=value`` folders (production keys come from layout.py).
    """
    uris = []
    for part, n in enumerate((rows - rows // 2, rows // 2)):
        key = f"staging/pageviews/attempt-{attempt}/full/{hour:%Y-%m-%dT%H}/part-{part}.parquet"
        store.write_bytes(
            key, pageview_parquet(hour, n, site="epa.gov" if part == 0 else "nasa.gov")
        )
        uris.append(store.uri(key))
    return uris


def load_job_factory(
    hour: dt.datetime, uris: list[str], fingerprint: str
) -> Callable[[int], LoadJob]:
    spec = stage_spec("full", hour)
    partition = f"{hour:%Y%m%d%H}"

    def make(generation: int) -> LoadJob:
        return LoadJob(
            job_id=job_id("load", spec.name, partition, fingerprint, generation),
            destination=spec.name,
            source_uris=tuple(uris),
            spec=spec,
            write_disposition="WRITE_TRUNCATE",
            labels=job_labels("stage_tables", partition, RUN_ID, fingerprint),
        )

    return make


def run_load(
    warehouse: BigQueryWarehouse,
    hour: dt.datetime,
    uris: list[str],
    fingerprint: str,
    budget: JobBudget | None = None,
) -> Any:
    make = load_job_factory(hour, uris, fingerprint)
    warehouse.ensure_table(make(0).spec)
    return run_idempotent_job(
        warehouse, make, fingerprint=fingerprint, partition=f"{hour:%Y%m%d%H}", budget=budget
    )


# -- tables ----------------------------------------------------------------------------------


def test_tables_are_created_from_their_spec_and_read_back(
    warehouse: BigQueryWarehouse, session: RecordingSession, bq_emulator: BigQueryEmulator
) -> None:
    specs = [
        pageviews_spec(require_partition_filter=False),
        stage_spec("full", HOURS[0]),
        audit_spec(),
    ]
    for spec in specs:
        warehouse.ensure_table(spec)
    reader = bq_emulator.client()
    for spec in specs:
        table = reader.get_table(warehouse.table_id(spec.name))
        assert [(f.name, f.field_type, f.mode) for f in table.schema] == [
            (c.name, c.type, c.mode) for c in spec.columns
        ]
        if spec.partition_field:
            assert (table.time_partitioning.type_, table.time_partitioning.field) == (
                "DAY",
                spec.partition_field,
            )
        else:
            assert table.time_partitioning is None
        assert tuple(table.clustering_fields or ()) == spec.clustering
        assert table.labels == dict(spec.labels)
        assert table.description == spec.description
    # A new run reads each table back and finds it matching: no update.
    again = BigQueryWarehouse(
        bq_emulator.client(session), warehouse.project, warehouse.dataset, retry=api_retry(5.0)
    )
    for spec in specs:
        again.ensure_table(spec)
    assert not [c for c in session.calls if c.method in ("PATCH", "PUT")]


def test_create_request_carries_partition_filter_and_expiration(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    """GAP-RPF / GAP-EXPIRES: the emulator drops both, so the request itself is checked."""
    warehouse.ensure_table(pageviews_spec(require_partition_filter=True))
    warehouse.ensure_table(stage_spec("sample", HOURS[0]))
    inserts = {
        c.body["tableReference"]["tableId"]: c.body
        for c in session.calls
        if c.method == "POST" and c.path.endswith("/tables")
    }
    pageviews = inserts["pageviews"]
    assert pageviews["requirePartitionFilter"] is True
    assert pageviews["timePartitioning"] == {"type": "DAY", "field": "event_date"}
    assert pageviews["clustering"] == {"fields": ["site", "page_path"]}
    stage = inserts["pageviews_sample_stage_1995080104"]
    expires = dt.datetime.fromtimestamp(int(stage["expirationTime"]) / 1000, dt.UTC)
    assert abs(expires - (dt.datetime.now(dt.UTC) + dt.timedelta(days=7))) < dt.timedelta(minutes=5)
    assert "timePartitioning" not in stage and "requirePartitionFilter" not in stage


def test_ensure_touches_each_table_once_per_run(
    make_warehouse: Callable[..., BigQueryWarehouse], session: RecordingSession
) -> None:
    """The ensure cache: 1 table-metadata request per table per run, however often ensured."""
    specs = [pageviews_spec(False), stage_spec("full", HOURS[0]), stage_spec("full", HOURS[1])]
    for run in range(2):  # run 0 creates the tables, run 1 reads them back
        warehouse = make_warehouse(session)
        before = len(session.calls)
        for _partition in range(24):
            for spec in specs:
                warehouse.ensure_table(spec)
        assert dict(warehouse.metadata_requests) == {spec.name: 1 for spec in specs}
        calls = session.calls[before:]
        for spec in specs:
            per_table = [c for c in session.table_metadata_calls(spec.name) if c in calls]
            assert len(per_table) == 1, (run, spec.name, per_table)
            assert per_table[0].method == ("POST" if run == 0 else "GET")
        # dataset-level: datasets.get (+ datasets.insert on the first run) and one tables.list
        assert warehouse.dataset_requests == (3 if run == 0 else 2)


def test_create_that_answers_409_counts_as_success(
    make_warehouse: Callable[..., BigQueryWarehouse], session: RecordingSession
) -> None:
    spec = stage_spec("full", HOURS[0])
    late = make_warehouse(session)
    late.ensure_table(audit_spec())  # lists the dataset's tables now: the stage table is missing
    make_warehouse().ensure_table(spec)  # another run creates it meanwhile
    late.ensure_table(spec)  # insert -> 409 -> read back and compare
    calls = session.table_metadata_calls(spec.name)
    assert [(c.method, c.status) for c in calls] == [("POST", 409), ("GET", 200)]
    assert late.metadata_requests[spec.name] == 2


def test_additive_nullable_column_is_applied_with_one_update(
    make_warehouse: Callable[..., BigQueryWarehouse],
    session: RecordingSession,
    bq_emulator: BigQueryEmulator,
) -> None:
    v1 = stage_spec("full", HOURS[0])
    make_warehouse().ensure_table(v1)
    v2 = dataclasses.replace(v1, columns=v1.columns + (Column("country", "STRING"),))
    warehouse = make_warehouse(session)
    warehouse.ensure_table(v2)
    warehouse.ensure_table(v2)
    assert warehouse.metadata_requests[v1.name] == 2  # get + one patch
    patches = [c for c in session.table_metadata_calls(v1.name) if c.method == "PATCH"]
    assert len(patches) == 1
    assert patches[0].body["schema"]["fields"][-1] == {
        "name": "country",
        "type": "STRING",
        "mode": "NULLABLE",
    }
    table = bq_emulator.client().get_table(warehouse.table_id(v1.name))
    assert [f.name for f in table.schema][-1] == "country"
    # GAP-PATCH-DDL: the emulator's DuckDB table keeps 13 columns; loads are not tried here.


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: dataclasses.replace(
                s, columns=s.columns + (Column("x", "STRING", "REQUIRED"),)
            ),
            "only NULLABLE columns",
        ),
        (
            lambda s: dataclasses.replace(
                s, columns=(dataclasses.replace(s.columns[0], type="INT64"),) + s.columns[1:]
            ),
            "column 1 is event_id STRING REQUIRED, the spec says event_id INT64 REQUIRED",
        ),
        (lambda s: dataclasses.replace(s, columns=s.columns[:-1]), "exists in the table but not"),
        (lambda s: dataclasses.replace(s, clustering=("site",)), "clustered by"),
        (
            lambda s: dataclasses.replace(s, partition_field=None, require_partition_filter=False),
            "partitioned on event_date",
        ),
    ],
)
def test_incompatible_change_raises_before_any_job(
    make_warehouse: Callable[..., BigQueryWarehouse],
    session: RecordingSession,
    change: Callable[[TableSpec], TableSpec],
    message: str,
    store: GCSObjectStore,
) -> None:
    spec = pageviews_spec(require_partition_filter=False)
    make_warehouse().ensure_table(spec)
    warehouse = make_warehouse(session)
    with pytest.raises(SchemaMismatchError, match=message):
        warehouse.ensure_table(change(spec))
    assert not [c for c in session.calls if c.method in ("PATCH", "PUT")]
    assert session.job_inserts() == []


def test_dataset_in_another_location_is_refused(
    bq_emulator: BigQueryEmulator, bq_dataset: str
) -> None:
    dataset = bigquery.Dataset(f"{bq_emulator.project}.{bq_dataset}")
    dataset.location = "EU"
    bq_emulator.client().create_dataset(dataset)
    warehouse = BigQueryWarehouse(bq_emulator.client(), bq_emulator.project, bq_dataset, "US")
    with pytest.raises(WarehouseError, match="location EU"):
        warehouse.ensure_table(audit_spec())


# -- hourly loads and the job state machine --------------------------------------------------


def test_hourly_load_from_gcs_parquet_and_rerun_submits_nothing(
    warehouse: BigQueryWarehouse,
    make_warehouse: Callable[..., BigQueryWarehouse],
    session: RecordingSession,
    store: GCSObjectStore,
) -> None:
    hour = HOURS[0]
    uris = stage_hour(store, hour, rows=7)
    fingerprint = fp(warehouse, {"hour": hour.isoformat(), "files": uris})
    outcome = run_load(warehouse, hour, uris, fingerprint)
    table = stage_spec("full", hour).name
    assert (outcome.action, outcome.generation) == ("submitted", 0)
    assert outcome.job_id == job_id("load", table, "1995080104", fingerprint, 0)
    assert outcome.rows == 7
    assert warehouse.table_rows(table) == 7

    status = warehouse.get_job(outcome.job_id)
    assert status is not None and status.succeeded
    assert status.output_rows == 7
    assert status.labels == job_labels("stage_tables", "1995080104", RUN_ID, fingerprint)
    record = warehouse.read_publish_record(table, "1995080104")
    assert record is not None
    assert (record.job_id, record.fingerprint, record.rows) == (outcome.job_id, fingerprint, 7)

    # The exact load resource sent.
    (sent,) = session.job_inserts()
    assert sent["jobReference"]["jobId"] == outcome.job_id
    load = sent["configuration"]["load"]
    assert load["sourceUris"] == uris
    assert load["sourceFormat"] == "PARQUET"
    assert load["writeDisposition"] == "WRITE_TRUNCATE"
    assert load["createDisposition"] == "CREATE_NEVER"
    assert load["destinationTable"]["tableId"] == table
    assert [(f["name"], f["type"], f["mode"]) for f in load["schema"]["fields"]] == [
        (c.name, c.type, c.mode) for c in PAGEVIEW_COLUMNS
    ]
    assert "autodetect" not in load
    assert sent["configuration"]["labels"]["fingerprint"] == fingerprint[:40]

    # Re-running the hour (a new run, same content) submits no second job.
    rerun_session = RecordingSession()
    rerun = make_warehouse(rerun_session)
    again = run_load(rerun, hour, uris, fingerprint)
    assert (again.action, again.job_id) == ("skipped", outcome.job_id)
    assert rerun_session.job_inserts() == []
    assert rerun.metadata_requests[table] == 1


def test_new_content_gets_a_new_job_id(
    warehouse: BigQueryWarehouse, session: RecordingSession, store: GCSObjectStore
) -> None:
    hour = HOURS[1]
    first = run_load(warehouse, hour, stage_hour(store, hour, 4, "a1"), fp(warehouse, "a"))
    second = run_load(warehouse, hour, stage_hour(store, hour, 6, "a2"), fp(warehouse, "b"))
    assert first.job_id != second.job_id and second.action == "submitted"
    assert warehouse.table_rows(stage_spec("full", hour).name) == 6
    assert len(session.job_inserts()) == 2


def test_failed_load_raises_job_failed_error(
    warehouse: BigQueryWarehouse, store: GCSObjectStore, gcs_bucket: str
) -> None:
    hour = HOURS[0]
    missing = [f"gs://{gcs_bucket}/staging/pageviews/missing/part-0.parquet"]
    with pytest.raises(JobFailedError, match="failed: invalid") as info:
        run_load(warehouse, hour, missing, fp(warehouse, "c"))
    assert info.value.status.error_reason == "invalid"
    # GAP-TRUNCATE: the emulator has emptied the stage table here; BigQuery would not have.


def test_budget_refuses_before_submitting(
    warehouse: BigQueryWarehouse, session: RecordingSession, store: GCSObjectStore
) -> None:
    hour = HOURS[0]
    table = stage_spec("full", hour).name
    started = dt.datetime.now(dt.UTC)
    run_load(warehouse, hour, stage_hour(store, hour, 2), fp(warehouse, "d"), budget=JobBudget(1))
    today = dt.datetime.now(dt.UTC).date()
    assert warehouse.jobs_submitted(table, today) == 1
    assert warehouse.jobs_submitted(stage_spec("full", HOURS[1]).name, today) == 0
    assert warehouse.jobs_submitted(table, today - dt.timedelta(days=1)) == 0  # GAP-JOBS-LIST
    lists = [c.query for c in session.calls if c.method == "GET" and c.path.endswith("/jobs")]
    day_start = dt.datetime.combine(today, dt.time(0), dt.UTC)
    day_start_ms = int(day_start.timestamp() * 1000)
    # The first listing covers the whole UTC day, later ones only what is new (10-min overlap).
    assert int(lists[0]["minCreationTime"]) == day_start_ms
    overlap_start = max(day_start, started - dt.timedelta(minutes=10))
    assert int(lists[1]["minCreationTime"]) >= int(overlap_start.timestamp() * 1000)
    assert int(lists[0]["maxCreationTime"]) == day_start_ms + 86_400_000
    with pytest.raises(QuotaBudgetExceededError, match=f"budget for table '{table}' is spent"):
        run_load(
            warehouse,
            hour,
            stage_hour(store, hour, 3, "a2"),
            fp(warehouse, "e"),
            budget=JobBudget(1),
        )
    assert len(session.job_inserts()) == 1
    # Counting is per dataset: the same table name elsewhere has its own budget.
    other = BigQueryWarehouse(
        warehouse.client, warehouse.project, unique_name("bqp"), retry=api_retry(5.0)
    )
    assert other.jobs_submitted(table, today) == 0


def test_get_and_wait_job(warehouse: BigQueryWarehouse, session: RecordingSession) -> None:
    assert warehouse.get_job("bqp_load_nothing_1995080104_" + "0" * 20 + "_g0") is None
    sim = SimulatedJobs(intercept=lambda body: False)
    body = {
        "jobReference": {"projectId": warehouse.project, "jobId": "running-job"},
        "configuration": {"copy": {"destinationTable": _dest(warehouse, "pageviews$19950801")}},
    }
    sim.add_existing(body, running_polls=2)
    session.responders.append(sim)
    assert warehouse.get_job("running-job").state == "RUNNING"
    status = warehouse.wait_job("running-job", timeout_s=10)
    assert status.done and status.succeeded and status.output_rows == 0
    sim.add_existing({**body, "jobReference": {"jobId": "stuck"}}, running_polls=10_000)
    with pytest.raises(TimeoutError, match="still RUNNING"):
        warehouse.wait_job("stuck", timeout_s=0.1)


# -- the daily publish (decorator copies): the resource sent, 409 and failed-job injection ----


def _dest(warehouse: BigQueryWarehouse, table: str) -> dict[str, str]:
    return {"projectId": warehouse.project, "datasetId": warehouse.dataset, "tableId": table}


def _publish_factory(stage_tables: tuple[str, ...], fingerprint: str) -> Callable[[int], CopyJob]:
    def make(generation: int) -> CopyJob:
        return CopyJob(
            job_id=job_id("copy", "pageviews", "19950801", fingerprint, generation),
            sources=stage_tables,
            destination="pageviews$19950801",
            write_disposition="WRITE_TRUNCATE",
            labels=job_labels("pageviews", "19950801", RUN_ID, fingerprint),
        )

    return make


def _decorated_copy(body: dict[str, Any]) -> bool:
    """GAP-DECORATOR: simulate copies into ``table$YYYYMMDD`` the way BigQuery runs them."""
    copy = body.get("configuration", {}).get("copy")
    return bool(copy) and "$" in copy["destinationTable"]["tableId"]


@pytest.fixture
def staged_day(warehouse: BigQueryWarehouse, store: GCSObjectStore) -> tuple[str, ...]:
    """Two hours loaded into their stage tables; the published table exists."""
    for hour, rows in zip(HOURS, (3, 4), strict=True):
        run_load(warehouse, hour, stage_hour(store, hour, rows), fp(warehouse, hour.isoformat()))
    warehouse.ensure_table(pageviews_spec(require_partition_filter=True))
    return tuple(stage_spec("full", h).name for h in HOURS)


def test_daily_publish_sends_one_decorated_truncate_copy(
    warehouse: BigQueryWarehouse,
    make_warehouse: Callable[..., BigQueryWarehouse],
    session: RecordingSession,
    staged_day: tuple[str, ...],
) -> None:
    fingerprint = day_fingerprint(
        {"1995-08-01T04": fp(warehouse, "h4"), "1995-08-01T05": fp(warehouse, "h5")}
    )
    session.responders.append(SimulatedJobs(_decorated_copy, copied_rows=7))
    outcome = run_idempotent_job(
        warehouse,
        _publish_factory(staged_day, fingerprint),
        fingerprint=fingerprint,
        partition="19950801",
    )
    assert (outcome.action, outcome.rows) == ("submitted", 7)
    copies = [b for b in session.job_inserts() if "copy" in b["configuration"]]
    assert len(copies) == 1
    sent = copies[0]
    assert sent["jobReference"]["jobId"] == job_id("copy", "pageviews", "19950801", fingerprint, 0)
    assert sent["jobReference"]["location"] == "US"
    config = sent["configuration"]
    assert config["copy"]["destinationTable"] == {
        "projectId": warehouse.project,
        "datasetId": warehouse.dataset,
        "tableId": "pageviews$19950801",
    }
    assert [t["tableId"] for t in config["copy"]["sourceTables"]] == list(staged_day)
    assert config["copy"]["writeDisposition"] == "WRITE_TRUNCATE"
    assert config["copy"]["createDisposition"] == "CREATE_NEVER"
    assert config["labels"] == job_labels("pageviews", "19950801", RUN_ID, fingerprint)
    record = warehouse.read_publish_record("pageviews", "19950801")
    assert record is not None and (record.job_id, record.rows) == (outcome.job_id, 7)

    # Same content again (a new run): looked up, skipped, nothing sent.
    rerun_session = RecordingSession()
    rerun_session.responders.extend(session.responders)
    again = run_idempotent_job(
        make_warehouse(rerun_session),
        _publish_factory(staged_day, fingerprint),
        fingerprint=fingerprint,
        partition="19950801",
    )
    assert (again.action, again.job_id) == ("skipped", outcome.job_id)
    assert rerun_session.job_inserts() == []

    # New content (an hour was rebuilt): a new deterministic ID, one more copy.
    changed = day_fingerprint(
        {"1995-08-01T04": fp(warehouse, "h4"), "1995-08-01T05": fp(warehouse, "h5-rebuilt")}
    )
    third = run_idempotent_job(
        warehouse,
        _publish_factory(staged_day, changed),
        fingerprint=changed,
        partition="19950801",
    )
    assert third.action == "submitted"
    assert third.job_id == job_id("copy", "pageviews", "19950801", changed, 0) != outcome.job_id
    assert warehouse.read_publish_record("pageviews", "19950801").fingerprint == changed


def test_emulator_still_rejects_partition_decorators(
    warehouse: BigQueryWarehouse, staged_day: tuple[str, ...]
) -> None:
    """GAP-DECORATOR, checked: if this starts passing through, drop the simulation above."""
    job = _publish_factory(staged_day, fp(warehouse, "f"))(0)
    with pytest.raises(WarehouseError, match="Invalid table id"):
        warehouse.submit_job(job)


def test_409_on_insert_is_adopted(
    warehouse: BigQueryWarehouse, session: RecordingSession, staged_day: tuple[str, ...]
) -> None:
    """GAP-409: another run inserts the same job ID between our lookup and our insert."""
    fingerprint = fp(warehouse, "1")
    make = _publish_factory(staged_day, fingerprint)
    sim = SimulatedJobs(_decorated_copy, copied_rows=7)
    existing = {
        "jobReference": {"projectId": warehouse.project, "jobId": make(0).job_id},
        "configuration": {"copy": {"destinationTable": _dest(warehouse, "pageviews$19950801")}},
    }
    sim.add_existing(existing, hidden_gets=1, running_polls=1)
    session.responders.append(sim)
    outcome = run_idempotent_job(warehouse, make, fingerprint=fingerprint, partition="19950801")
    assert (outcome.action, outcome.job_id, outcome.generation) == ("adopted", make(0).job_id, 0)
    inserts = [
        c
        for c in session.calls
        if c.method == "POST" and c.path.endswith("/jobs") and "copy" in c.body["configuration"]
    ]
    assert [c.status for c in inserts] == [409]


def test_failed_job_moves_to_the_next_generation(
    warehouse: BigQueryWarehouse, session: RecordingSession, staged_day: tuple[str, ...]
) -> None:
    fingerprint = fp(warehouse, "2")
    make = _publish_factory(staged_day, fingerprint)
    sim = SimulatedJobs(_decorated_copy, copied_rows=7)
    failed = {
        "jobReference": {"projectId": warehouse.project, "jobId": make(0).job_id},
        "configuration": {"copy": {"destinationTable": _dest(warehouse, "pageviews$19950801")}},
    }
    sim.add_existing(failed, error={"reason": "backendError", "message": "injected"})
    session.responders.append(sim)
    outcome = run_idempotent_job(warehouse, make, fingerprint=fingerprint, partition="19950801")
    assert (outcome.action, outcome.generation) == ("submitted", 1)
    assert outcome.job_id.endswith("_g1")
    (sent,) = [b for b in session.job_inserts() if "copy" in b["configuration"]]
    assert sent["jobReference"]["jobId"] == make(1).job_id


def test_job_ids_are_project_wide(
    make_warehouse: Callable[..., BigQueryWarehouse], store: GCSObjectStore
) -> None:
    """Two datasets in one project computing the same job ID: refused, or kept apart by a prefix.

    Job IDs are unique per project; without the guard, the second environment would find the
    first one's job, "skip", and never load its own table.
    """
    hour, fingerprint = HOURS[0], sha256_json(["shared content", unique_name("x")])
    uris = stage_hour(store, hour, 2)
    run_load(make_warehouse(), hour, uris, fingerprint)
    staging_env = make_warehouse(dataset=unique_name("bqp"))
    with pytest.raises(WarehouseError, match="job IDs are unique per project"):
        run_load(staging_env, hour, uris, fingerprint)
    prefixed = BigQueryWarehouse(
        staging_env.client,
        staging_env.project,
        staging_env.dataset,
        retry=api_retry(5.0),
        job_id_prefix=f"{staging_env.dataset}_",
    )
    outcome = run_load(prefixed, hour, uris, fingerprint)
    assert outcome.action == "submitted"
    assert outcome.job_id == job_id(
        "load", stage_spec("full", hour).name, "1995080104", fingerprint
    )
    assert prefixed.get_job(outcome.job_id).job_id == outcome.job_id  # prefix is internal
    assert prefixed.table_rows(stage_spec("full", hour).name) == 2


# -- counts from metadata, ledger, audit -----------------------------------------------------


def test_partition_rows_come_from_information_schema(
    warehouse: BigQueryWarehouse, session: RecordingSession, store: GCSObjectStore
) -> None:
    # GAP-DECORATOR / GAP-COPY-MULTI: fill pageviews with a whole-table load of two days.
    spec = pageviews_spec(require_partition_filter=False)
    warehouse.ensure_table(spec)
    next_day = HOURS[0] + dt.timedelta(days=1)
    keys = {
        "d1.parquet": pageview_parquet(HOURS[0], 3),
        "d2.parquet": pageview_parquet(next_day, 2),
    }
    for key, data in keys.items():
        store.write_bytes(key, data)
    warehouse.submit_job(
        LoadJob("bqp_load_pageviews_all", spec.name, tuple(store.uri(k) for k in keys), spec)
    )
    before = len(session.calls)
    assert warehouse.partition_rows("pageviews", DAY) == 3
    assert warehouse.partition_rows("pageviews", DAY + dt.timedelta(days=1)) == 2
    assert warehouse.partition_rows("pageviews", DAY + dt.timedelta(days=2)) == 0
    assert warehouse.partition_rows("no_such_table", DAY) == 0
    queries = [
        c.body["configuration"]["query"]
        for c in session.calls[before:]
        if c.method == "POST" and c.path.endswith("/jobs")
    ]
    assert len(queries) == 4
    for query in queries:
        assert "INFORMATION_SCHEMA.PARTITIONS" in query["query"]
        assert "COUNT(" not in query["query"].upper()
        assert "1995" not in query["query"]  # values travel as parameters
        assert {p["name"] for p in query["queryParameters"]} == {"table_name", "partition_id"}
    assert warehouse.table_rows("pageviews") == 5  # numRows from metadata, no query
    assert warehouse.table_rows("no_such_table") is None


def test_emulator_copies_only_the_first_source(
    warehouse: BigQueryWarehouse, staged_day: tuple[str, ...], bq_emulator: BigQueryEmulator
) -> None:
    """GAP-COPY-MULTI / GAP-COPY-STATS, checked: drop the workaround above once this fails."""
    job = bq_emulator.client().copy_table(
        [warehouse.table_id(t) for t in staged_day],
        warehouse.table_id("pageviews"),
        job_config=bigquery.CopyJobConfig(write_disposition="WRITE_TRUNCATE"),
    )
    job.result()
    assert "copy" not in job._properties.get("statistics", {})
    assert warehouse.partition_rows("pageviews", DAY) == 3  # BigQuery: 3 + 4


def test_publish_records_are_replaced_per_partition(warehouse: BigQueryWarehouse) -> None:
    assert warehouse.read_publish_record("pageviews", "19950801") is None
    at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    for n in (1, 2):
        warehouse.write_publish_record(
            PublishRecord("pageviews", "19950801", f"job{n}", f"fp{n}", n * 10, at)
        )
    warehouse.write_publish_record(PublishRecord("pageviews", "19950802", "job9", "fp9", 9, at))
    record = warehouse.read_publish_record("pageviews", "19950801")
    assert record == PublishRecord("pageviews", "19950801", "job2", "fp2", 20, at)
    rows = list(
        warehouse.client.query(
            f"SELECT COUNT(*) AS n FROM `{warehouse.table_id(PUBLISH_LEDGER_TABLE)}`"
        ).result()
    )
    assert rows[0]["n"] == 2


def test_publish_record_sql_is_parameterized(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    evil = "x'); DELETE FROM t; --"
    warehouse.write_publish_record(
        PublishRecord("pageviews", "19950801", evil, "fp", 1, dt.datetime.now(dt.UTC))
    )
    assert warehouse.read_publish_record("pageviews", "19950801").job_id == evil
    merges = [
        c.body["configuration"]["query"]
        for c in session.calls
        if c.method == "POST"
        and c.path.endswith("/jobs")
        and "MERGE" in c.body["configuration"].get("query", {}).get("query", "")
    ]
    assert len(merges) == 1 and evil not in merges[0]["query"]


def _audit(hour: dt.datetime, site: str, pageviews: int) -> SiteHourCounts:
    return SiteHourCounts(
        site=site,
        hour=hour,
        source_lines=pageviews + 1,
        pageviews=pageviews,
        non_page_hits=1,
        visitors=1,
        files=1,
    )


def test_audit_rows_are_replaced_atomically_per_hour(warehouse: BigQueryWarehouse) -> None:
    h4, h5 = HOURS
    warehouse.replace_audit_rows(
        HOURS,
        audit_records(
            [_audit(h4, "epa.gov", 5), _audit(h4, "nasa.gov", 6), _audit(h5, "epa.gov", 7)],
            "fp1",
            RUN_ID,
        ),
    )
    warehouse.replace_audit_rows([h4], audit_records([_audit(h4, "epa.gov", 50)], "fp2", "run-2"))
    warehouse.replace_audit_rows([h4], audit_records([_audit(h4, "epa.gov", 50)], "fp2", "run-2"))
    rows = warehouse.audit_rows(h4, h5 + dt.timedelta(hours=1))
    assert [(r["hour"], r["site"], r["pageviews"], r["fingerprint"]) for r in rows] == [
        (h4, "epa.gov", 50, "fp2"),
        (h5, "epa.gov", 7, "fp1"),
    ]
    assert rows[0]["event_date"] == DAY and rows[0]["source_lines"] == 51
    assert warehouse.audit_rows(h5, h5 + dt.timedelta(hours=1))[0]["pageviews"] == 7
    warehouse.replace_audit_rows([h5], [])
    assert [r["hour"] for r in warehouse.audit_rows(h4, h5 + dt.timedelta(days=1))] == [h4]
    with pytest.raises(ValueError, match="not in the replaced hours"):
        warehouse.replace_audit_rows([h4], audit_records([_audit(h5, "x", 1)], "fp", RUN_ID))


# -- validation and the client factory -------------------------------------------------------


def test_bad_jobs_and_labels_are_refused_before_sending(
    warehouse: BigQueryWarehouse, session: RecordingSession, gcs_bucket: str
) -> None:
    spec = stage_spec("full", HOURS[0])
    base = LoadJob(
        "bqp_load_x_1995080104_" + "0" * 20 + "_g0",
        spec.name,
        (f"gs://{gcs_bucket}/a.parquet",),
        spec,
    )
    too_many = dataclasses.replace(
        base, source_uris=tuple(f"gs://{gcs_bucket}/p{i}.parquet" for i in range(MAX_LOAD_URIS + 1))
    )
    with pytest.raises(ValueError, match="wildcard"):
        warehouse.submit_job(too_many)
    with pytest.raises(ValueError, match="gs://"):
        warehouse.submit_job(dataclasses.replace(base, source_uris=("/tmp/local.parquet",)))
    # GAP-LABEL-NONE: None would be an HTTP 500 retried for minutes; refused here instead.
    with pytest.raises(ValueError, match="label 'run_id'"):
        warehouse.submit_job(dataclasses.replace(base, labels={"run_id": None}))  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="label key"):
        validate_labels({"Upper": "x"}, "test")
    with pytest.raises(ValueError, match="table name"):
        warehouse.table_rows("pageviews`; DROP TABLE x; --")
    assert session.calls == []


@pytest.mark.parametrize(
    ("project", "dataset"),
    [("bqp-emulator", "bad-dataset"), ("bqp-emulator", "a.b"), ("Bad_Project", "ds"), ("p", "ds")],
)
def test_identifiers_are_validated(project: str, dataset: str) -> None:
    with pytest.raises(ValueError, match="invalid BigQuery"):
        BigQueryWarehouse(
            bigquery.Client(project="bqp-emulator", credentials=AnonymousCredentials()),
            project,
            dataset,
        )


def test_bigquery_client_factory(bq_emulator: BigQueryEmulator) -> None:
    emulated = bigquery_client("bqp-emulator", "US", api_endpoint=bq_emulator.endpoint)
    assert emulated._connection.API_BASE_URL == bq_emulator.endpoint
    assert isinstance(emulated._credentials, AnonymousCredentials)
    assert emulated.location == "US"
    real = bigquery_client("my-project", "EU", credentials=AnonymousCredentials())
    assert real._connection.API_BASE_URL == "https://bigquery.googleapis.com"
    assert (real.project, real.location) == ("my-project", "EU")
