"""The local warehouse's jobs on worker threads (``DuckDBWarehouse(concurrent_jobs=2)``,
:mod:`bq_platform.lib.warehouse.duckdb.background`): ``submit_job`` returns a RUNNING job as
BigQuery does, jobs really run side by side, and what they write is what one-at-a-time jobs
write: the same tables, job history and publish records, failures recorded, re-runs skipped.
"""

import datetime as dt
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from bq_platform.lib.core.job_ids import job_id, sha256_json
from bq_platform.lib.publish.idempotent_jobs import JobRequest, run_idempotent_jobs
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.warehouse.base import JobConflictError, LoadJob
from bq_platform.lib.warehouse.duckdb import jobs as duckdb_jobs
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import stage_spec
from bq_platform_tests.lib.publish.test_idempotent_jobs_duckdb import write_hour

UTC = dt.UTC
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=UTC) for h in range(4)]


def hour_load(hour: dt.datetime, uri: str, generation: int = 0) -> LoadJob:
    spec = stage_spec("full", hour)
    fingerprint = sha256_json(uri)
    return LoadJob(
        job_id=job_id("load", spec.name, f"{hour:%Y%m%d%H}", fingerprint, generation),
        destination=spec.name,
        source_uris=(uri,),
        spec=spec,
    )


@pytest.fixture
def files(tmp_path: Path) -> dict[dt.datetime, str]:
    return {h: write_hour(tmp_path / f"{h:%H}.parquet", h, 10 + h.hour, f"h{h:%H}") for h in HOURS}


def load_all(wh: DuckDBWarehouse, files: dict[dt.datetime, str], budget: JobBudget | None = None):
    for hour in HOURS:
        wh.ensure_table(stage_spec("full", hour))
    requests = [
        JobRequest(
            lambda g, h=hour: hour_load(h, files[h], g),
            sha256_json(files[hour]),
            f"{hour:%Y%m%d%H}",
        )
        for hour in HOURS
    ]
    return run_idempotent_jobs(wh, requests, budget=budget)


def test_submit_returns_running_and_wait_gives_the_done_job(tmp_path, files) -> None:
    wh = DuckDBWarehouse(tmp_path / "w.duckdb", concurrent_jobs=2)
    try:
        wh.ensure_table(stage_spec("full", HOURS[0]))
        job = hour_load(HOURS[0], files[HOURS[0]])
        assert wh.submit_job(job).state == "RUNNING"
        with pytest.raises(JobConflictError):  # its ID is taken while it runs, as in BigQuery
            wh.submit_job(job)
        done = wh.wait_job(job.job_id)
        assert (done.state, done.succeeded, done.output_rows) == ("DONE", True, 10)
        assert wh.get_job(job.job_id) == done
        assert wh.table_rows(job.destination) == 10
    finally:
        wh.close()


def test_jobs_run_side_by_side_on_worker_threads(tmp_path, files, monkeypatch) -> None:
    """Two loads are inside DuckDB at the same time: each waits at a barrier that only opens
    when both have reached it (one-at-a-time jobs would time out there)."""
    barrier = threading.Barrier(2, timeout=20)
    threads: list[str] = []
    real_run_load = duckdb_jobs.run_load

    def run_load(con, job, spec_of):
        threads.append(threading.current_thread().name)
        if len(threads) <= 2:
            barrier.wait()
        return real_run_load(con, job, spec_of)

    monkeypatch.setattr(duckdb_jobs, "run_load", run_load)
    wh = DuckDBWarehouse(tmp_path / "w.duckdb", concurrent_jobs=2)
    try:
        outcomes = load_all(wh, files)
    finally:
        wh.close()
    assert [o.rows for o in outcomes] == [10, 11, 12, 13]
    assert len(threads) == 4 and all(t.startswith("duckdb-job") for t in threads)
    assert threading.current_thread().name not in threads


def test_side_by_side_writes_what_one_at_a_time_writes(tmp_path, files) -> None:
    results = {}
    for workers in (1, 2):
        path = tmp_path / f"w{workers}.duckdb"
        wh = DuckDBWarehouse(path, concurrent_jobs=workers)
        try:
            first = load_all(wh, files)
            again = load_all(wh, files)
            records = [
                wh.read_publish_record(stage_spec("full", h).name, f"{h:%Y%m%d%H}") for h in HOURS
            ]
            tables = [wh.table_rows(stage_spec("full", h).name) for h in HOURS]
        finally:
            wh.close()
        with duckdb.connect(str(path), read_only=True) as con:
            jobs = con.execute(
                "SELECT job_id, state, output_rows FROM _bq_platform_jobs ORDER BY job_id"
            ).fetchall()
        assert [o.action for o in first] == ["submitted"] * 4
        assert [o.action for o in again] == ["skipped"] * 4  # a re-run submits nothing
        results[workers] = (
            [(o.job_id, o.rows) for o in first],
            jobs,
            [(r.job_id, r.rows) for r in records if r is not None],
            tables,
        )
    assert results[1] == results[2]
    assert results[2][3] == [10, 11, 12, 13]
    assert len(results[2][1]) == len(results[2][2]) == 4


def test_a_failed_background_job_is_recorded_and_leaves_its_table(tmp_path, files) -> None:
    wh = DuckDBWarehouse(tmp_path / "w.duckdb", concurrent_jobs=2)
    try:
        spec = stage_spec("full", HOURS[0])
        wh.ensure_table(spec)
        bad = tmp_path / "bad.parquet"
        bad.write_bytes(b"not parquet")
        job = hour_load(HOURS[0], str(bad))
        assert wh.submit_job(job).state == "RUNNING"
        done = wh.wait_job(job.job_id)
        assert done.state == "DONE" and not done.succeeded and done.error_reason
        assert wh.get_job(job.job_id) == done
        assert wh.table_rows(spec.name) == 0
    finally:
        wh.close()


def test_running_jobs_count_against_the_budget(tmp_path, files, monkeypatch) -> None:
    release = threading.Event()
    real_run_load = duckdb_jobs.run_load

    def run_load(con, job, spec_of):
        release.wait(timeout=20)
        return real_run_load(con, job, spec_of)

    monkeypatch.setattr(duckdb_jobs, "run_load", run_load)
    wh = DuckDBWarehouse(tmp_path / "w.duckdb", concurrent_jobs=2)
    try:
        job = hour_load(HOURS[0], files[HOURS[0]])
        wh.ensure_table(job.spec)
        wh.submit_job(job)
        assert wh.jobs_submitted(job.destination, dt.datetime.now(UTC).date()) == 1  # running
        release.set()
        wh.wait_job(job.job_id)
        assert wh.jobs_submitted(job.destination, dt.datetime.now(UTC).date()) == 1  # recorded
    finally:
        release.set()
        wh.close()


def test_close_waits_for_running_jobs_and_releases_the_file(tmp_path, files) -> None:
    path = tmp_path / "w.duckdb"
    wh = DuckDBWarehouse(path, concurrent_jobs=2)
    wh.ensure_table(stage_spec("full", HOURS[0]))
    job = hour_load(HOURS[0], files[HOURS[0]])
    wh.submit_job(job)
    wh.close()
    # another process may open the file now: no worker connection holds its lock
    read = subprocess.run(
        [sys.executable, "-c", _READ_JOB, str(path), job.job_id],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["DONE", "10"]


_READ_JOB = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
query = "SELECT state, output_rows FROM _bq_platform_jobs WHERE job_id = ?"
print(*con.execute(query, [sys.argv[2]]).fetchone())
"""


def test_workers_must_be_positive(tmp_path) -> None:
    with pytest.raises(ValueError, match="concurrent_jobs must be at least 1"):
        DuckDBWarehouse(tmp_path / "w.duckdb", concurrent_jobs=0)
