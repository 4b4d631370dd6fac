"""What is BigQuery-specific in BigQueryWarehouse, on bqemulator and gcp-storage-emulator.

The behaviour both warehouses share is the contract suite
(``bq_platform_tests/lib/warehouse/test_contract.py``). Here: the exact resources the official
client sends (``jobs.insert`` bodies are ``job.to_api_repr()``, ``tables.insert`` bodies the
table resource, captured by :class:`RecordingSession`), one metadata request per table per
run, metadata counts by ``tables.get`` (0 bytes billed), the job-ID prefix, the location
check, ``jobs.list`` budgets, polling, identifiers and the client factory (the ledger and
audit SQL: ``test_sql.py``).
Requests bqemulator cannot run as BigQuery does are answered by
:class:`~bq_platform_tests.bigquery_shim.BigQueryShim`; ``test_emulator_gaps.py`` notices
when the emulator learns them.

Gaps that remain visible here: GAP-RPF (the table-level ``requirePartitionFilter`` is
dropped) and GAP-EXPIRES (``expirationTime`` is not kept), so those are checked in the
request; GAP-LABEL-NONE (a None label is an HTTP 500 retried for minutes), refused before
sending; GAP-JOBS-LIST (``jobs.list`` ignores the creation-time window; the adapter filters
itself).
"""

import dataclasses
import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest
import requests
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

from bq_platform.lib.core.job_ids import job_id, job_labels, sha256_json
from bq_platform.lib.publish.idempotent_jobs import JobOutcome, run_idempotent_job
from bq_platform.lib.publish.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.warehouse.base import CopyJob, LoadJob, QuotaExceededError, WarehouseError
from bq_platform.lib.warehouse.bigquery.client import bigquery_client
from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform.lib.warehouse.schema import (
    PAGEVIEW_COLUMNS,
    Column,
    audit_spec,
    pageviews_spec,
    stage_spec,
)
from bq_platform_tests.bigquery_shim import BigQueryShim
from bq_platform_tests.emulators import BigQueryEmulator, GCSEmulator, unique_name
from bq_platform_tests.http_recording import (
    HttpCall,
    RecordingSession,
    SimulatedJobs,
    json_response,
)
from bq_platform_tests.lib.warehouse.contract_backends import RUN_ID, load_factory, pageview_parquet

__all__ = ["pageview_parquet"]  # test_gcp_real.py imports it from here

pytestmark = pytest.mark.emulator

DAY = dt.date(1995, 8, 1)
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (4, 5)]


@pytest.fixture
def make_warehouse(
    bq_emulator: BigQueryEmulator, bq_dataset: str
) -> Callable[..., BigQueryWarehouse]:
    """A new warehouse object (= a new run) on the test's dataset, optionally over a session.

    Job IDs are project-wide and tests share the emulator's project: each dataset gets its
    own job-ID prefix, as each production environment does.
    """

    def make(
        session: RecordingSession | None = None, dataset: str = bq_dataset, prefix: bool = True
    ) -> BigQueryWarehouse:
        return bq_emulator.warehouse(
            dataset, session, job_id_prefix=f"{dataset}_" if prefix else ""
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


def run_load(
    warehouse: BigQueryWarehouse,
    store: GCSObjectStore,
    hour: dt.datetime,
    rows: int,
    fingerprint: str,
    budget: JobBudget | None = None,
) -> tuple[JobOutcome, list[str]]:
    """Write ``rows`` pageviews of ``hour`` to GCS (GAP-HIVE: no ``key=value`` folders) and
    load them into the hour's stage table; return the outcome and the URIs."""
    key = f"staging/{fingerprint[:12]}/{hour:%Y-%m-%dT%H}/part-0.parquet"
    store.write_bytes(key, pageview_parquet(hour, rows))
    uris = [store.uri(key)]
    make = load_factory(hour, uris, fingerprint)
    warehouse.ensure_table(make(0).spec)
    outcome = run_idempotent_job(
        warehouse, make, fingerprint=fingerprint, partition=f"{hour:%Y%m%d%H}", budget=budget
    )
    return outcome, uris


# -- tables: the resources sent, one request per table per run -------------------------------


def test_create_requests_carry_the_layout(
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
    # A stage table has the published table's partitioning and clustering.
    assert stage["timePartitioning"] == pageviews["timePartitioning"]
    assert stage["clustering"] == pageviews["clustering"]
    assert stage["requirePartitionFilter"] is False
    assert stage["schema"] == pageviews["schema"]
    assert stage["labels"] == {"app": "bq_platform", "role": "stage"}


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


def test_additive_column_is_one_patch_request(
    make_warehouse: Callable[..., BigQueryWarehouse], session: RecordingSession
) -> None:
    v1 = stage_spec("full", HOURS[0])
    make_warehouse().ensure_table(v1)
    v2 = dataclasses.replace(v1, columns=(*v1.columns, Column("country", "STRING")))
    warehouse = make_warehouse(session)
    warehouse.ensure_table(v2)
    warehouse.ensure_table(v2)
    assert warehouse.metadata_requests[v1.name] == 2  # get + one patch
    (patch,) = [c for c in session.table_metadata_calls(v1.name) if c.method == "PATCH"]
    assert patch.body["schema"]["fields"][-1] == {
        "name": "country",
        "type": "STRING",
        "mode": "NULLABLE",
    }


def test_dataset_in_another_location_is_refused(
    bq_emulator: BigQueryEmulator, bq_dataset: str
) -> None:
    dataset = bigquery.Dataset(f"{bq_emulator.project}.{bq_dataset}")
    dataset.location = "EU"
    bq_emulator.client().create_dataset(dataset)
    warehouse = BigQueryWarehouse(bq_emulator.client(), bq_emulator.project, bq_dataset, "US")
    with pytest.raises(WarehouseError, match="location EU"):
        warehouse.ensure_table(audit_spec())


@pytest.mark.parametrize(
    ("field", "name"),
    [
        ("default_partition_expiration_ms", "defaultPartitionExpirationMs"),
        ("default_table_expiration_ms", "defaultTableExpirationMs"),
    ],
)
def test_dataset_whose_tables_would_expire_is_refused(
    bq_emulator: BigQueryEmulator, bq_dataset: str, field: str, name: str
) -> None:
    """A dataset default expiration (the sandbox sets 60 days) would delete published tables
    or their partitions: the run stops before it creates a table."""
    dataset = bigquery.Dataset(f"{bq_emulator.project}.{bq_dataset}")
    dataset.location = "US"
    setattr(dataset, field, 60 * 86_400_000)
    client = bq_emulator.client()
    client.create_dataset(dataset)
    warehouse = BigQueryWarehouse(client, bq_emulator.project, bq_dataset, "US")
    with pytest.raises(WarehouseError, match=f"{name} = 5184000000 ms \\(60 days\\)"):
        warehouse.ensure_table(audit_spec())
    assert list(client.list_tables(f"{bq_emulator.project}.{bq_dataset}")) == []


# -- jobs: the resources sent ----------------------------------------------------------------


def test_load_resource_sent(
    warehouse: BigQueryWarehouse, session: RecordingSession, store: GCSObjectStore
) -> None:
    hour = HOURS[0]
    fingerprint = sha256_json(["load resource"])
    outcome, uris = run_load(warehouse, store, hour, 7, fingerprint)
    table = stage_spec("full", hour).name
    assert (outcome.action, outcome.rows) == ("submitted", 7)
    (sent,) = session.job_inserts()
    assert sent["jobReference"] == {
        "projectId": warehouse.project,
        "jobId": f"{warehouse.dataset}_{outcome.job_id}",  # the prefix goes on the wire only
        "location": "US",
    }
    load = sent["configuration"]["load"]
    assert load["sourceUris"] == uris and uris[0].startswith("gs://")
    assert (load["sourceFormat"], load["writeDisposition"]) == ("PARQUET", "WRITE_TRUNCATE")
    assert load["createDisposition"] == "CREATE_NEVER"
    assert load["destinationTable"] == {
        "projectId": warehouse.project,
        "datasetId": warehouse.dataset,
        "tableId": table,
    }
    assert [(f["name"], f["type"], f["mode"]) for f in load["schema"]["fields"]] == [
        (c.name, c.type, c.mode) for c in PAGEVIEW_COLUMNS
    ]
    assert "autodetect" not in load
    spec = stage_spec("full", hour)  # the load states the destination's layout
    assert load["timePartitioning"] == {"type": "DAY", "field": spec.partition_field}
    assert load["clustering"] == {"fields": list(spec.clustering)}
    assert spec.partition_field and spec.clustering
    assert sent["configuration"]["labels"] == job_labels(
        "stage_tables", "1995080104", RUN_ID, fingerprint
    )
    status = warehouse.get_job(outcome.job_id)
    assert status is not None and status.job_id == outcome.job_id  # prefix removed again


def test_daily_copy_resource_sent(
    warehouse: BigQueryWarehouse, session: RecordingSession, store: GCSObjectStore
) -> None:
    for hour, rows in zip(HOURS, (3, 4), strict=True):
        run_load(warehouse, store, hour, rows, sha256_json(["copy", hour.isoformat()]))
    warehouse.ensure_table(pageviews_spec(require_partition_filter=True))
    sources = tuple(f"{stage_spec('full', h).name}$19950801" for h in HOURS)
    fingerprint = sha256_json(["day"])

    def make(generation: int) -> CopyJob:
        return CopyJob(
            job_id=job_id("copy", "pageviews", "19950801", fingerprint, generation),
            sources=sources,
            destination="pageviews$19950801",
            labels=job_labels("pageviews", "19950801", RUN_ID, fingerprint),
        )

    outcome = run_idempotent_job(warehouse, make, fingerprint=fingerprint, partition="19950801")
    assert (outcome.action, outcome.rows) == ("submitted", 7)
    (sent,) = [b for b in session.job_inserts() if "copy" in b["configuration"]]
    assert sent["jobReference"]["jobId"] == f"{warehouse.dataset}_{make(0).job_id}"
    copy = sent["configuration"]["copy"]
    assert copy["destinationTable"] == {
        "projectId": warehouse.project,
        "datasetId": warehouse.dataset,
        "tableId": "pageviews$19950801",
    }
    assert [t["tableId"] for t in copy["sourceTables"]] == list(sources)
    assert (copy["writeDisposition"], copy["createDisposition"]) == (
        "WRITE_TRUNCATE",
        "CREATE_NEVER",
    )
    assert sent["configuration"]["labels"] == job_labels(
        "pageviews", "19950801", RUN_ID, fingerprint
    )


def test_counts_are_one_tables_get_each_no_query(
    warehouse: BigQueryWarehouse,
    session: RecordingSession,
    store: GCSObjectStore,
    shim: BigQueryShim,
    make_warehouse: Callable[..., BigQueryWarehouse],
) -> None:
    """``table_rows``/``partition_rows`` bill 0 bytes: at most one ``tables.get`` each, no query
    job (INFORMATION_SCHEMA.PARTITIONS reads at most 1,000 tables); the rows of a table this
    object loaded with WRITE_TRUNCATE are the job's."""
    run_load(warehouse, store, HOURS[0], 3, sha256_json(["counts"]))
    table = stage_spec("full", HOURS[0]).name
    before = len(session.calls)
    for _ in range(2):
        assert warehouse.partition_rows(table, DAY) == 3
        assert warehouse.table_rows(table) == 3
    calls = session.calls[before:]
    assert [(c.method, c.path.rsplit("/", 1)[-1]) for c in calls] == [("GET", f"{table}$19950801")]
    fresh_session = shim.session()
    fresh = make_warehouse(fresh_session)  # a new run knows nothing: one tables.get each
    for _ in range(2):
        assert fresh.table_rows(table) == 3
        assert fresh.partition_rows(table, DAY) == 3
    tables_calls = [c for c in fresh_session.calls if "/tables" in c.path]  # not datasets.get
    assert [(c.method, c.path.rsplit("/", 1)[-1]) for c in tables_calls] == [
        ("GET", "tables"),  # tables.list, once per object
        ("GET", table),
        ("GET", f"{table}$19950801"),
    ]
    assert (fresh.metadata_requests[table], fresh.partition_reads[table]) == (1, 1)


def test_job_ids_are_project_wide(
    make_warehouse: Callable[..., BigQueryWarehouse], store: GCSObjectStore
) -> None:
    """Two datasets in one project computing the same job ID: refused, or kept apart by a prefix.

    Job IDs are unique per project; without the guard, the second environment would find the
    first one's job, "skip", and never load its own table.
    """
    hour, fingerprint = HOURS[0], sha256_json(["shared content", unique_name("x")])
    run_load(make_warehouse(prefix=False), store, hour, 2, fingerprint)
    staging_env = make_warehouse(dataset=unique_name("bqp"), prefix=False)
    with pytest.raises(WarehouseError, match="job IDs are unique per project"):
        run_load(staging_env, store, hour, 2, fingerprint)
    prefixed = make_warehouse(dataset=staging_env.dataset)
    outcome, _ = run_load(prefixed, store, hour, 2, fingerprint)
    assert outcome.action == "submitted"
    assert outcome.job_id == job_id(
        "load", stage_spec("full", hour).name, "1995080104", fingerprint
    )
    assert prefixed.table_rows(stage_spec("full", hour).name) == 2


def test_budget_counts_jobs_per_table_with_jobs_list(
    make_warehouse: Callable[..., BigQueryWarehouse], store: GCSObjectStore
) -> None:
    """On the raw emulator: the shim's jobs are not in its ``jobs.list``."""
    session = RecordingSession()
    warehouse = make_warehouse(session)
    hour = HOURS[0]
    table = stage_spec("full", hour).name
    started = dt.datetime.now(dt.UTC)
    run_load(warehouse, store, hour, 2, sha256_json(["budget", 1]), budget=JobBudget(1))
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
        run_load(warehouse, store, hour, 3, sha256_json(["budget", 2]), budget=JobBudget(1))
    assert len(session.job_inserts()) == 1


def test_get_and_wait_job(warehouse: BigQueryWarehouse, session: RecordingSession) -> None:
    assert warehouse.get_job("bqp_load_nothing_1995080104_" + "0" * 20 + "_g0") is None
    sim = SimulatedJobs(intercept=lambda body: False)
    destination = {
        "projectId": warehouse.project,
        "datasetId": warehouse.dataset,
        "tableId": "pageviews$19950801",
    }
    body = {
        "jobReference": {"projectId": warehouse.project, "jobId": f"{warehouse.dataset}_running"},
        "configuration": {"copy": {"destinationTable": destination}},
    }
    sim.add_existing(body, running_polls=2)
    session.responders.insert(0, sim)
    assert warehouse.get_job("running").state == "RUNNING"
    status = warehouse.wait_job("running", timeout_s=10)
    assert status.done and status.succeeded and status.output_rows == 0
    stuck = {**body, "jobReference": {"jobId": f"{warehouse.dataset}_stuck"}}
    sim.add_existing(stuck, running_polls=10_000)
    with pytest.raises(TimeoutError, match="still RUNNING"):
        warehouse.wait_job("stuck", timeout_s=0.1)


def test_a_job_that_exists_is_read_through_404s_and_a_lost_one_is_none(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    """BigQuery can answer 404 to ``jobs.get`` for a job that exists, right after its insert
    or a 409 (googleapis/python-bigquery#2134): such a lookup is retried. An ID that stays 404
    (a job past the job history) gives None, and waiting for it fails with what happened."""
    sim = SimulatedJobs(intercept=lambda body: False)
    destination = {
        "projectId": warehouse.project,
        "datasetId": warehouse.dataset,
        "tableId": "pageviews$19950801",
    }
    for name in ("late", "late_wait"):
        body = {
            "jobReference": {
                "projectId": warehouse.project,
                "jobId": f"{warehouse.dataset}_{name}",
            },
            "configuration": {"copy": {"destinationTable": destination}},
        }
        sim.add_existing(body, hidden_gets=1)
    session.responders.insert(0, sim)

    status = warehouse.get_existing_job("late")
    assert status is not None and status.succeeded
    assert warehouse.wait_job("late_wait", timeout_s=30).succeeded
    gets = [c for c in session.calls if c.method == "GET" and c.path.endswith("_late_wait")]
    assert len(gets) == 2  # the 404, then the retried lookup that finds it DONE

    warehouse.existing_job_grace_s = 0.5
    assert warehouse.get_existing_job("lost") is None
    with pytest.raises(WarehouseError, match="lost not found .* after 0 s of retries"):
        warehouse.wait_job("lost", timeout_s=5)


def test_a_job_refused_for_a_spent_quota_says_so(
    warehouse: BigQueryWarehouse, session: RecordingSession, store: GCSObjectStore
) -> None:
    """``jobs.insert`` answering 403 ``quotaExceeded`` (not retried by the client) is a
    QuotaExceededError, which the step turns into a retry after BigQuery's advised wait."""

    def spent(call: HttpCall) -> requests.Response | None:
        if call.method == "POST" and call.path.endswith("/jobs"):
            error = {"reason": "quotaExceeded", "message": "Quota exceeded: too many jobs"}
            return json_response(
                403, {"error": {"code": 403, "message": error["message"], "errors": [error]}}
            )
        return None

    session.responders.insert(0, spent)
    with pytest.raises(QuotaExceededError, match="quotaExceeded"):
        run_load(warehouse, store, HOURS[0], 3, sha256_json(["spent quota"]))
    assert len(session.job_inserts()) == 1  # not retried by the client


# -- validation and the client factory -------------------------------------------------------


def test_bigquery_only_refusals_send_nothing(
    warehouse: BigQueryWarehouse, session: RecordingSession, gcs_bucket: str
) -> None:
    spec = stage_spec("full", HOURS[0])
    warehouse.ensure_table(spec)
    before = len(session.calls)
    base = LoadJob("bqp_load_x_g0", spec.name, (f"gs://{gcs_bucket}/a.parquet",), spec)
    with pytest.raises(ValueError, match="gs://"):
        warehouse.submit_job(dataclasses.replace(base, source_uris=("/tmp/local.parquet",)))
    # GAP-LABEL-NONE: None would be an HTTP 500 retried for minutes; refused here instead.
    with pytest.raises(RuleViolation, match="label 'run_id'"):
        warehouse.submit_job(dataclasses.replace(base, labels={"run_id": None}))  # type: ignore[dict-item]
    with pytest.raises(RuleViolation, match="table name"):
        warehouse.table_rows("pageviews`; DROP TABLE x; --")
    assert len(session.calls) == before


@pytest.mark.parametrize(
    ("project", "dataset"),
    [("bqp-emulator", "bad-dataset"), ("bqp-emulator", "a.b"), ("Bad_Project", "ds")],
)
def test_identifiers_are_validated(project: str, dataset: str) -> None:
    with pytest.raises(ValueError, match="invalid BigQuery"):
        BigQueryWarehouse(
            bigquery.Client(project="bqp-emulator", credentials=AnonymousCredentials()),
            project,
            dataset,
        )


class _Unsent(Exception):
    """Raised by :class:`_NoNetwork` with the URL a request would have gone to."""


class _NoNetwork(requests.Session):
    is_mtls = False  # read by google-cloud-core to pick the endpoint

    def request(self, method: str, url: str, *args: object, **kwargs: object) -> Any:  # type: ignore[override]
        raise _Unsent(url)


def test_bigquery_client_factory(bq_emulator: BigQueryEmulator, bq_dataset: str) -> None:
    emulated = bigquery_client("bqp-emulator", "US", api_endpoint=bq_emulator.endpoint)
    emulated.create_dataset(bq_dataset, exists_ok=True)  # anonymous, at the endpoint
    assert emulated.location == "US"
    real = bigquery_client(
        "my-project", "EU", credentials=AnonymousCredentials(), http=_NoNetwork()
    )
    with pytest.raises(_Unsent) as sent:
        real.get_dataset("my-project.ds", retry=None)
    assert str(sent.value).startswith("https://bigquery.googleapis.com/bigquery/v2/projects/")
    assert (real.project, real.location) == ("my-project", "EU")
