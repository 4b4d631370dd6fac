"""The DuckDB warehouse enforces BigQuery's rules before anything runs.

Every case of :data:`rule_cases.CASES` is refused by ``ensure_table``/``submit_job`` with the
same message as the rule functions alone, and leaves no trace: no table created or patched, no
row in the job history (``_bq_platform_jobs``), not even a metadata read for a refused spec.
"""

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bq_platform.lib.warehouse import job_rules
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform_tests.lib.warehouse.rule_cases import (
    CASES,
    DAY,
    HOUR,
    PAGEVIEWS,
    STAGE,
    Case,
    check,
    copy_job,
    load_job,
)


def _state(wh: DuckDBWarehouse) -> tuple[list[dict], list[dict], list[dict]]:
    """Tables, table layouts and the job history of a DuckDB warehouse."""
    return (
        wh.query("SELECT table_name FROM duckdb_tables() ORDER BY 1"),
        wh.query("SELECT * FROM _bq_platform_tables ORDER BY table_name"),
        wh.query("SELECT * FROM _bq_platform_jobs ORDER BY job_id"),
    )


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_duckdb_refuses_before_anything_runs(wh: DuckDBWarehouse, case: Case) -> None:
    for table in case.tables:
        wh.ensure_table(table)
    before = _state(wh)
    with pytest.raises(RuleViolation) as expected:
        check(case)

    with pytest.raises(RuleViolation) as got:
        if case.spec is not None:
            wh.ensure_table(case.spec)
        else:
            assert case.job is not None
            wh.submit_job(case.job)

    assert str(got.value) == str(expected.value)
    assert _state(wh) == before
    assert before[2] == []  # no job row: nothing ran
    if case.spec is not None:
        assert case.spec.name not in wh.metadata_operations  # not even a metadata read


def test_duckdb_copy_never_creates_its_destination(wh: DuckDBWarehouse) -> None:
    wh.ensure_table(STAGE)
    before = _state(wh)
    with pytest.raises(RuleViolation, match=r"CREATE_NEVER\); ensure it first"):
        wh.submit_job(copy_job())
    assert _state(wh) == before


def _write_hour(path: Path, hour: dt.datetime, n: int) -> str:
    arrow = {"STRING": pa.string(), "INT64": pa.int64(), "DATE": pa.date32()}
    schema = pa.schema(
        [pa.field(c.name, arrow.get(c.type, pa.timestamp("us", tz="UTC"))) for c in STAGE.columns]
    )
    rows = [
        {
            "event_id": f"{hour:%d%H}-{i}",
            "event_ts": hour,
            "event_date": hour.date(),
            "site": "epa.gov",
            "visitor_id": "v",
            "page_path": "/",
            "http_method": "GET",
            "status": 200,
            "traffic_class": "human",
        }
        for i in range(n)
    ]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return str(path)


def test_duckdb_fails_a_day_copy_holding_another_day_as_bigquery_does(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    # BigQuery checks this one while the job runs: the job is DONE with an error, and the
    # destination partition is unchanged.
    wh.ensure_table(PAGEVIEWS)
    wh.ensure_table(STAGE)
    assert wh.submit_job(
        load_job(source_uris=(_write_hour(tmp_path / "a.parquet", HOUR, 3),))
    ).succeeded
    assert wh.submit_job(copy_job()).output_rows == 3
    next_day = HOUR + dt.timedelta(days=1)
    mixed = (_write_hour(tmp_path / "b.parquet", next_day, 2),)
    assert wh.submit_job(load_job(job_id="load_b", source_uris=mixed)).succeeded

    status = wh.submit_job(copy_job(job_id="copy_g1"))

    assert status.done and status.error_reason == "invalid"
    with pytest.raises(RuleViolation) as expected:
        job_rules.check_partition_rows("pageviews$19950801", DAY, [next_day.date()])
    assert str(expected.value) in (status.error_message or "")
    assert wh.partition_rows("pageviews", DAY) == 3
    assert wh.get_job("copy_g1") == status
