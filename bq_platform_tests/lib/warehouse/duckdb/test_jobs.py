"""Load and copy jobs in the local DuckDB warehouse (:mod:`bq_platform.lib.warehouse.duckdb.jobs`)
keep BigQuery's job semantics: WRITE_TRUNCATE of a table or a day partition, atomic failure
with BigQuery's error reason, a job ID used once, the job history.
"""

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from bq_platform.lib.warehouse.base import (
    CopyJob,
    JobConflictError,
    WarehouseError,
)
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform.lib.warehouse.schema import (
    pageviews_spec,
    stage_spec,
)
from bq_platform_tests.lib.warehouse.duckdb_rows import (
    DAY1,
    DAY2,
    HOUR,
    PAGEVIEW_SCHEMA,
    UTC,
    event_ids,
    load,
    pageviews,
    stage,
    write_parquet,
)

# ----------------------------------------------------------------------- load jobs


def test_load_write_truncate_replaces_table_and_reads_back_utc(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    spec = stage_spec("full", HOUR)
    wh.ensure_table(spec)
    first = write_parquet(tmp_path / "a" / "part-0.parquet", pageviews(HOUR, 3, tag="a"))
    second = [
        write_parquet(tmp_path / "b" / "part-0.parquet", pageviews(HOUR, 2, tag="b")),
        write_parquet(tmp_path / "b" / "part-1.parquet", pageviews(HOUR, 1, tag="c")),
    ]

    s1 = wh.submit_job(load("job_a", spec, [first]))
    s2 = wh.submit_job(load("job_b", spec, second))

    assert s1.succeeded and s1.output_rows == 3
    assert s2.succeeded and s2.output_rows == 3
    assert event_ids(wh, spec.name) == ["b-1995080104-0", "b-1995080104-1", "c-1995080104-0"]
    row = wh.query(
        f"SELECT event_ts, event_date FROM {spec.name} WHERE event_id = ?", ["b-1995080104-1"]
    )[0]
    assert row["event_ts"] == HOUR + dt.timedelta(minutes=1)
    assert row["event_ts"].tzinfo is UTC
    assert row["event_date"] == DAY1
    assert wh.get_job("job_b") == s2
    assert s2.labels == {"app": "bq_platform", "partition": "1995080104"}


def test_load_ignores_hive_style_folders_in_paths(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    # DuckDB would read "site=..." as a column and override the file's own site column.
    spec = stage_spec("full", HOUR)
    wh.ensure_table(spec)
    uri = write_parquet(
        tmp_path / "site=other.org" / "hour=1995-08-01T04" / "part-0.parquet",
        pageviews(HOUR, 2, site="epa.gov"),
    )
    status = wh.submit_job(load("job_hive", spec, [uri]))
    assert status.succeeded
    assert wh.query(f"SELECT DISTINCT site FROM {spec.name}") == [{"site": "epa.gov"}]


def test_load_accepts_naive_timestamps_as_utc_and_missing_nullable_columns(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    rows = [
        {k: v for k, v in r.items() if k != "user_agent"}
        | {"event_ts": r["event_ts"].replace(tzinfo=None)}
        for r in pageviews(HOUR, 2)
    ]
    schema = pa.schema(
        [
            pa.field(f.name, pa.timestamp("us") if f.name == "event_ts" else f.type)
            for f in PAGEVIEW_SCHEMA
            if f.name != "user_agent"
        ]
    )
    spec = stage_spec("full", HOUR)
    wh.ensure_table(spec)
    uri = write_parquet(tmp_path / "naive.parquet", rows, schema)
    assert wh.submit_job(load("job_naive", spec, [uri])).succeeded
    got = wh.query(f"SELECT min(event_ts) AS ts, count(user_agent) AS ua FROM {spec.name}")
    assert got == [{"ts": HOUR, "ua": 0}]


def _bad_status_type(tmp_path: Path) -> list[str]:
    schema = pa.schema(
        [pa.field(f.name, pa.string() if f.name == "status" else f.type) for f in PAGEVIEW_SCHEMA]
    )
    rows = [r | {"status": "200"} for r in pageviews(HOUR, 2)]
    return [write_parquet(tmp_path / "bad" / "status.parquet", rows, schema)]


def _missing_required(tmp_path: Path) -> list[str]:
    schema = pa.schema([f for f in PAGEVIEW_SCHEMA if f.name != "visitor_id"])
    rows = [{k: v for k, v in r.items() if k != "visitor_id"} for r in pageviews(HOUR, 2)]
    return [write_parquet(tmp_path / "bad" / "novisitor.parquet", rows, schema)]


def _null_in_required(tmp_path: Path) -> list[str]:
    rows = pageviews(HOUR, 2)
    rows[1]["site"] = None
    return [write_parquet(tmp_path / "bad" / "nullsite.parquet", rows)]


def _corrupt(tmp_path: Path) -> list[str]:
    good = write_parquet(tmp_path / "bad" / "good.parquet", pageviews(HOUR, 2))
    path = tmp_path / "bad" / "corrupt.parquet"
    path.write_bytes(Path(good).read_bytes()[:-100])
    return [good, str(path)]


def _missing_file(tmp_path: Path) -> list[str]:
    good = write_parquet(tmp_path / "bad" / "good.parquet", pageviews(HOUR, 2))
    return [good, str(tmp_path / "bad" / "gone.parquet")]


@pytest.mark.parametrize(
    ("make_uris", "reason", "words"),
    [
        (_missing_file, "notFound", "gone.parquet"),
        (_bad_status_type, "invalid", "status"),
        (_missing_required, "invalid", "visitor_id"),
        (_null_in_required, "invalid", "site"),
        (_corrupt, "invalid", "corrupt.parquet"),
    ],
)
def test_failed_load_leaves_table_intact_and_records_failed_job(
    wh: DuckDBWarehouse, tmp_path: Path, make_uris: Any, reason: str, words: str
) -> None:
    table = stage(wh, tmp_path, HOUR, pageviews(HOUR, 4, tag="old"), "job_old")
    before = event_ids(wh, table)

    status = wh.submit_job(load("job_bad", stage_spec("full", HOUR), make_uris(tmp_path)))

    assert status.done and not status.succeeded
    assert status.error_reason == reason
    assert words in (status.error_message or "")
    assert status.output_rows is None
    assert event_ids(wh, table) == before
    assert wh.get_job("job_bad") == status
    assert wh.describe_table(table) is not None


def test_reused_job_id_raises_conflict_even_for_failed_jobs(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    spec = stage_spec("full", HOUR)
    wh.ensure_table(spec)
    uri = write_parquet(tmp_path / "p.parquet", pageviews(HOUR, 2))
    assert wh.submit_job(load("job_1", spec, [uri])).succeeded
    assert not wh.submit_job(load("job_2", spec, [str(tmp_path / "missing.parquet")])).succeeded

    for job_id in ("job_1", "job_2"):
        with pytest.raises(JobConflictError, match=job_id):
            wh.submit_job(load(job_id, spec, [uri]))
    assert wh.table_rows(spec.name) == 2
    assert wh.jobs_submitted(spec.name, dt.datetime.now(UTC).date()) == 2


def test_load_into_day_partition_replaces_only_that_day(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    spec = pageviews_spec()
    wh.ensure_table(spec)
    day2_hour = HOUR + dt.timedelta(days=1)
    day1 = write_parquet(tmp_path / "d1.parquet", pageviews(HOUR, 3, tag="old"))
    day2 = write_parquet(tmp_path / "d2.parquet", pageviews(day2_hour, 2))
    new1 = write_parquet(tmp_path / "n1.parquet", pageviews(HOUR, 1, tag="new"))

    assert wh.submit_job(load("l1", spec, [day1], "pageviews$19950801")).succeeded
    assert wh.submit_job(load("l2", spec, [day2], "pageviews$19950802")).succeeded
    assert wh.submit_job(load("l3", spec, [new1], "pageviews$19950801")).output_rows == 1
    wrong = wh.submit_job(load("l4", spec, [day2], "pageviews$19950801"))

    assert wrong.error_reason == "invalid" and "1995-08-02" in (wrong.error_message or "")
    assert wh.partition_rows("pageviews", DAY1) == 1
    assert wh.partition_rows("pageviews", DAY2) == 2


# ----------------------------------------------------------------------- copy jobs


def test_copy_into_day_partition_replaces_only_that_day(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    wh.ensure_table(pageviews_spec())
    day2_hour = HOUR + dt.timedelta(days=1)
    h4 = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3, tag="a"), "s1")
    h5 = stage(
        wh,
        tmp_path,
        HOUR + dt.timedelta(hours=1),
        pageviews(HOUR + dt.timedelta(hours=1), 2, tag="a"),
        "s2",
    )
    d2 = stage(wh, tmp_path, day2_hour, pageviews(day2_hour, 4, tag="a"), "s3")
    assert (
        wh.submit_job(
            CopyJob("c1", (f"{h4}$19950801", f"{h5}$19950801"), "pageviews$19950801")
        ).output_rows
        == 5
    )
    assert wh.submit_job(CopyJob("c2", (d2,), "pageviews$19950802")).output_rows == 4

    # New content for hour 04 of day 1; re-publish day 1.
    stage(wh, tmp_path, HOUR, pageviews(HOUR, 1, tag="b"), "s4")
    status = wh.submit_job(
        CopyJob("c3", (f"{h4}$19950801", f"{h5}$19950801"), "pageviews$19950801")
    )

    assert status.succeeded and status.output_rows == 3
    assert wh.partition_rows("pageviews", DAY1) == 3
    assert wh.partition_rows("pageviews", DAY2) == 4
    assert [i for i in event_ids(wh, "pageviews") if i.startswith("a-19950801")] == [
        "a-1995080105-0",
        "a-1995080105-1",
    ]
    job = wh.query("SELECT destination, \"partition\" FROM _bq_platform_jobs WHERE job_id = 'c3'")
    assert job == [{"destination": "pageviews", "partition": "19950801"}]


def test_copy_with_row_of_another_day_fails_and_changes_nothing(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    wh.ensure_table(pageviews_spec())
    good = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3), "s1")
    assert wh.submit_job(CopyJob("c1", (good,), "pageviews$19950801")).succeeded
    other_hour = HOUR + dt.timedelta(hours=1)
    mixed = stage(
        wh,
        tmp_path,
        other_hour,
        pageviews(other_hour, 2, tag="b") + pageviews(HOUR + dt.timedelta(days=1), 1, tag="c"),
        "s2",
    )

    # One whole-table source (allowed): BigQuery checks the rows while the job runs.
    status = wh.submit_job(CopyJob("c2", (mixed,), "pageviews$19950801"))

    assert status.error_reason == "invalid"
    message = status.error_message or ""
    assert (
        "Some rows belong to different partitions rather than destination partition 19950801"
        in message
    )
    assert "1995-08-02" in message
    assert event_ids(wh, "pageviews") == [f"a-1995080104-{i}" for i in range(3)]


def test_copy_with_missing_source_is_refused_before_it_runs(
    wh: DuckDBWarehouse, tmp_path: Path
) -> None:
    wh.ensure_table(pageviews_spec())
    good = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3), "s1")
    assert wh.submit_job(CopyJob("c1", (good,), "pageviews$19950801")).succeeded

    sources = (f"{good}$19950801", "pageviews_stage_1995080105$19950801")
    with pytest.raises(RuleViolation, match="pageviews_stage_1995080105 does not exist"):
        wh.submit_job(CopyJob("c2", sources, "pageviews$19950801"))

    assert wh.get_job("c2") is None
    assert wh.partition_rows("pageviews", DAY1) == 3


def test_load_never_creates_its_table(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    # CREATE_NEVER, as the BigQuery adapter sends it: BigQuery fails the job with notFound.
    uri = write_parquet(tmp_path / "p.parquet", pageviews(HOUR, 2))
    status = wh.submit_job(load("job_1", stage_spec("full", HOUR), [uri]))

    assert (status.done, status.error_reason) == (True, "notFound")
    assert "loads never create tables" in (status.error_message or "")
    assert not wh.table_exists(stage_spec("full", HOUR).name)


def test_copy_write_append_empty_and_whole_table(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    wh.ensure_table(pageviews_spec())
    h4 = stage(wh, tmp_path, HOUR, pageviews(HOUR, 3), "s1")

    assert wh.submit_job(CopyJob("c1", (h4,), "pageviews$19950801", "WRITE_EMPTY")).succeeded
    refused = wh.submit_job(CopyJob("c2", (h4,), "pageviews$19950801", "WRITE_EMPTY"))
    assert refused.error_reason == "duplicate"
    assert wh.submit_job(CopyJob("c3", (h4,), "pageviews$19950801", "WRITE_APPEND")).succeeded
    assert wh.partition_rows("pageviews", DAY1) == 6

    # Without a decorator WRITE_TRUNCATE replaces the whole table (ensured first: CREATE_NEVER).
    assert wh.submit_job(CopyJob("c4", (h4,), "pageviews")).output_rows == 3
    assert wh.table_rows("pageviews") == 3
    wh.ensure_table(dataclasses.replace(pageviews_spec(), name="pageviews_copy"))
    assert wh.submit_job(CopyJob("c5", (h4, h4), "pageviews_copy")).output_rows == 6
    assert wh.partition_rows("pageviews_copy", DAY1) == 6


# ----------------------------------------------------------------------- job lookups


def test_get_and_wait_job(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    assert wh.get_job("nope") is None
    with pytest.raises(WarehouseError, match="nope"):
        wh.wait_job("nope")
    stage(wh, tmp_path, HOUR, pageviews(HOUR, 2), "job_w")
    status = wh.wait_job("job_w", timeout_s=0)
    assert status.succeeded and status.output_rows == 2


def test_jobs_submitted_counts_per_table_and_utc_day(wh: DuckDBWarehouse, tmp_path: Path) -> None:
    wh.ensure_table(pageviews_spec())
    h4 = stage(wh, tmp_path, HOUR, pageviews(HOUR, 1), "s1")
    wh.submit_job(CopyJob("c1", (h4,), "pageviews$19950801"))
    wh.submit_job(CopyJob("c2", (h4,), "pageviews$19950802"))  # fails: still counts
    wh.submit_job(CopyJob("c3", (h4,), "pageviews$19950801"))
    today = dt.datetime.now(UTC).date()

    assert wh.jobs_submitted("pageviews", today) == 3
    assert wh.jobs_submitted(h4, today) == 1
    assert wh.jobs_submitted("pageviews_sample", today) == 0
    assert wh.jobs_submitted("pageviews", today - dt.timedelta(days=1)) == 0
    assert wh.jobs_submitted("pageviews", today + dt.timedelta(days=1)) == 0
