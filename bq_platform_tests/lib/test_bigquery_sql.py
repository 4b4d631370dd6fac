"""The SQL half of the BigQuery backend (``bigquery_sql.py``) on bqemulator: the publish
ledger is append-only parameterized INSERTs (issue 6, defect 3: concurrent MERGEs fail with
"Could not serialize access"), and the audit rows of some hours are replaced atomically.

Behaviour shared with DuckDB (latest wins, one schema) is the contract suite's
(``lib/warehouse/test_contract.py``); here, the SQL BigQuery receives.
"""

import datetime as dt

import pytest

from bq_platform.lib.accounting import SiteHourCounts, audit_records
from bq_platform.lib.retries import api_retry, query_job_retry
from bq_platform.lib.warehouse.base import PublishRecord
from bq_platform.lib.warehouse.bigquery import BigQueryWarehouse
from bq_platform_tests.emulators import BigQueryEmulator, RecordingSession

pytestmark = pytest.mark.emulator

DAY = dt.date(1995, 8, 1)
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (4, 5)]
RUN_ID = "run-sql"


@pytest.fixture
def session() -> RecordingSession:
    return RecordingSession()


@pytest.fixture
def warehouse(
    bq_emulator: BigQueryEmulator, bq_dataset: str, session: RecordingSession
) -> BigQueryWarehouse:
    """The adapter on the raw emulator (these SQL statements need no shim)."""
    return BigQueryWarehouse(
        bq_emulator.client(session),
        bq_emulator.project,
        bq_dataset,
        "US",
        retry=api_retry(timeout_s=5.0),
        job_retry=query_job_retry(timeout_s=5.0),
    )


def test_ledger_rows_are_parameterized_inserts(
    warehouse: BigQueryWarehouse, session: RecordingSession
) -> None:
    evil = "x'); DELETE FROM t; --"
    warehouse.write_publish_record(
        PublishRecord("pageviews", "19950801", evil, "fp", 1, dt.datetime.now(dt.UTC))
    )
    assert warehouse.read_publish_record("pageviews", "19950801").job_id == evil
    queries = [
        c.body["configuration"]["query"]["query"]
        for c in session.calls
        if c.method == "POST" and c.path.endswith("/jobs") and "query" in c.body["configuration"]
    ]
    writes = [q for q in queries if q.lstrip().split()[0].upper() in {"INSERT", "MERGE", "UPDATE"}]
    assert len(writes) == 1 and writes[0].startswith("INSERT INTO")  # append-only (defect 3)
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
