"""The ledger and audit SQL of BigQueryWarehouse on bqemulator: the publish ledger is
append-only parameterized INSERTs (concurrent MERGEs on one table fail with "Could not serialize
access"), the audit rows of some hours are replaced atomically, and rows are read with
``tabledata.list``, never a query.

Behaviour shared with DuckDB (latest wins, one schema) is the contract suite's
(``lib/warehouse/test_contract.py``); here, the SQL BigQuery receives.
"""

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pytest
import requests

from bq_platform.lib.core.accounting import SiteHourCounts, audit_records
from bq_platform.lib.warehouse import ledger
from bq_platform.lib.warehouse.base import PublishRecord
from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
from bq_platform.lib.warehouse.schema import AUDIT_TABLE
from bq_platform_tests.bigquery_shim import BigQueryShim
from bq_platform_tests.emulators import BigQueryEmulator
from bq_platform_tests.http_recording import HttpCall, RecordingSession, json_response

pytestmark = pytest.mark.emulator

DAY = dt.date(1995, 8, 1)
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (4, 5)]
RUN_ID = "run-sql"


@pytest.fixture
def make_warehouse(
    bq_emulator: BigQueryEmulator, bq_dataset: str
) -> Callable[[RecordingSession], BigQueryWarehouse]:
    """A new adapter object (= a new run) on the test's dataset, over ``session``."""

    def make(session: RecordingSession) -> BigQueryWarehouse:
        return bq_emulator.warehouse(bq_dataset, session)

    return make


@pytest.fixture
def warehouse(
    make_warehouse: Callable[[RecordingSession], BigQueryWarehouse], session: RecordingSession
) -> BigQueryWarehouse:
    return make_warehouse(session)


def test_ledger_rows_are_parameterized_inserts(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    evil = "x'); DELETE FROM t; --"
    warehouse.write_publish_records(
        [PublishRecord("pageviews", "19950801", evil, "fp", 1, dt.datetime.now(dt.UTC))]
    )
    assert warehouse.read_publish_record("pageviews", "19950801").job_id == evil
    queries = [
        c.body["configuration"]["query"]["query"]
        for c in session.calls
        if c.method == "POST" and c.path.endswith("/jobs") and "query" in c.body["configuration"]
    ]
    writes = [q for q in queries if q.lstrip().split()[0].upper() in {"INSERT", "MERGE", "UPDATE"}]
    assert len(writes) == 1 and writes[0].startswith("INSERT INTO")  # append-only
    assert all(evil not in q for q in queries)


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
    warehouse.replace_audit_rows([h5], [])
    assert [r["hour"] for r in warehouse.audit_rows(h4, h5 + dt.timedelta(days=1))] == [h4]
    with pytest.raises(ValueError, match="not in the replaced hours"):
        warehouse.replace_audit_rows([h4], audit_records([_audit(h5, "x", 1)], "fp", RUN_ID))


def _merges(session: RecordingSession) -> list[int]:
    """The request bytes (the JSON body) of each audit MERGE or DELETE query job sent."""
    return [
        len(json.dumps(c.body).encode())
        for c in session.calls
        if c.method == "POST"
        and c.path.endswith("/jobs")
        and c.body["configuration"]
        .get("query", {})
        .get("query", "")
        .startswith(("MERGE", "DELETE"))
    ]


def test_audit_rows_over_the_request_size_go_in_several_statements_of_whole_hours(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    """BigQuery refuses requests over 10 MB; a step's audit rows travel as a parameter, so they
    are sent in statements of whole hours, each under the limit (scaled down here)."""
    hours = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (1, 2, 3)]
    sites = [f"site{n}.example" for n in range(30)]
    rows = audit_records([_audit(h, s, 5) for h in hours for s in sites], "fp1", RUN_ID)
    warehouse.replace_audit_rows(hours, rows)
    (whole,) = _merges(session)  # by default: one statement
    warehouse.max_request_bytes = whole // 2  # room for one hour's rows, not two
    session.calls.clear()
    warehouse.replace_audit_rows(
        hours, audit_records([_audit(h, s, 6) for h in hours for s in sites], "fp2", RUN_ID)
    )
    sent = _merges(session)
    assert len(sent) == 3 and all(size <= warehouse.max_request_bytes for size in sent)
    got = warehouse.audit_rows(hours[0], hours[-1] + dt.timedelta(hours=1))
    assert sorted((r["hour"], r["site"], r["pageviews"]) for r in got) == sorted(
        (h, s, 6) for h in hours for s in sites
    )
    session.calls.clear()
    many = audit_records([_audit(hours[0], f"s{n}.example", 7) for n in range(60)], "fp3", RUN_ID)
    with pytest.raises(ValueError, match="audit rows of hour 1995-08-01T01 make a"):
        warehouse.replace_audit_rows(hours[:1], many)
    assert _merges(session) == []  # nothing sent


class ConcurrentUpdateOnce:
    """Answers the first ``MERGE`` query job as BigQuery answers the loser of two concurrent
    mutating DML statements on one table: the job is DONE with a 400 ``invalidQuery``
    "Could not serialize access to table ... due to concurrent update"."""

    def __init__(self) -> None:
        self.failed: dict[str, dict[str, Any]] = {}

    def __call__(self, call: HttpCall) -> requests.Response | None:
        body = call.body if isinstance(call.body, dict) else {}
        query = body.get("configuration", {}).get("query", {}).get("query", "")
        if call.method == "POST" and call.path.endswith("/jobs") and query.startswith("MERGE"):
            if self.failed:
                return None
            error = {
                "reason": "invalidQuery",
                "message": f"Could not serialize access to table {AUDIT_TABLE} due to "
                "concurrent update",
            }
            now = str(int(dt.datetime.now(dt.UTC).timestamp() * 1000))
            resource = {
                **body,
                "jobReference": {**body["jobReference"], "location": "US"},
                "status": {"state": "DONE", "errorResult": error, "errors": [error]},
                "statistics": {"creationTime": now, "startTime": now, "endTime": now},
            }
            self.failed[body["jobReference"]["jobId"]] = resource
            return json_response(200, resource)
        job_id = call.path.rsplit("/", 1)[-1]
        if call.method == "GET" and job_id in self.failed:
            if "/queries/" in call.path:
                error = self.failed[job_id]["status"]["errorResult"]
                payload = {"error": {"code": 400, "message": error["message"], "errors": [error]}}
                return json_response(400, payload)
            return json_response(200, self.failed[job_id])
        return None


def test_a_statement_that_loses_a_concurrent_update_runs_again(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    h4 = HOURS[0]
    conflict = ConcurrentUpdateOnce()
    session.responders.insert(0, conflict)
    warehouse.replace_audit_rows([h4], audit_records([_audit(h4, "epa.gov", 5)], "fp", RUN_ID))
    assert len(conflict.failed) == 1
    assert _query_statements(session).count("MERGE") == 2  # a new query job, run once more
    rows = warehouse.audit_rows(h4, h4 + dt.timedelta(hours=1))
    assert [(r["site"], r["pageviews"]) for r in rows] == [("epa.gov", 5)]


def test_audit_rows_are_listed_per_day_partition_not_queried(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    """The completeness check's audit read bills 0 bytes: one ``tabledata.list`` of
    ``pageviews_audit$YYYYMMDD`` per UTC day of the range, hours filtered in Python."""
    late = dt.datetime(1995, 8, 1, 23, tzinfo=dt.UTC)
    next_day = late + dt.timedelta(hours=1)
    hours = [HOURS[0], late, next_day]
    warehouse.replace_audit_rows(
        hours, audit_records([_audit(h, "epa.gov", h.hour) for h in hours], "fp", RUN_ID)
    )
    before = len(session.calls)
    rows = warehouse.audit_rows(HOURS[1], next_day + dt.timedelta(minutes=30))
    assert [r["hour"] for r in rows] == [late, next_day]  # 04:00 is before the range
    calls = session.calls[before:]
    assert [c.path.rsplit("/", 2)[-2] for c in calls] == [
        "pageviews_audit$19950801",
        "pageviews_audit$19950802",
    ]
    assert all(c.method == "GET" and c.path.endswith("/data") for c in calls)
    assert "SELECT" not in _query_statements(session)
    assert warehouse.audit_rows(next_day, next_day) == []  # an empty range reads nothing
    assert len(session.calls) == before + 2


def _query_statements(session: RecordingSession) -> list[str]:
    """First keyword of each query job the session inserted."""
    return [
        c.body["configuration"]["query"]["query"].split()[0].upper()
        for c in session.calls
        if c.method == "POST"
        and c.path.endswith("/jobs")
        and isinstance(c.body, dict)
        and "query" in c.body.get("configuration", {})
    ]


def test_ledger_is_listed_once_per_run_never_queried(
    make_warehouse: Callable[[RecordingSession], BigQueryWarehouse], shim: BigQueryShim
) -> None:
    """Publish-record lookups bill 0 bytes. The ledger is read once per warehouse
    object with ``tabledata.list`` (free); the object's own appends are seen at once, another
    process's from the next run on (documented in ``bigquery/warehouse.py``)."""
    at = dt.datetime(2026, 1, 2, 3, tzinfo=dt.UTC)
    writer = make_warehouse(shim.session())
    writer.write_publish_records([PublishRecord("pageviews", "19950801", "j1", "f1", 1, at)])
    session = shim.session()
    reader = make_warehouse(session)
    for _ in range(3):
        assert reader.read_publish_record("pageviews", "19950801").job_id == "j1"
        assert reader.read_publish_record("pageviews", "19950802") is None
    later = at + dt.timedelta(minutes=1)
    writer.write_publish_records([PublishRecord("pageviews", "19950801", "j2", "f2", 2, later)])
    assert reader.read_publish_record("pageviews", "19950801").job_id == "j1"  # next run's
    reader.write_publish_records([PublishRecord("pageviews", "19950803", "j3", "f3", 3, at)])
    assert reader.read_publish_record("pageviews", "19950803").job_id == "j3"  # its own: now
    assert make_warehouse(shim.session()).read_publish_record("pageviews", "19950801") == (
        PublishRecord("pageviews", "19950801", "j2", "f2", 2, later)
    )
    assert _query_statements(session) == ["INSERT"]  # the one append; no SELECT
    assert [c.method for c in session.calls if c.path.endswith("/data")] == ["GET"]
    assert len(session.table_metadata_calls(ledger.PUBLISH_LEDGER_TABLE)) == 1
