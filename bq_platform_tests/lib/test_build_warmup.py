"""``build_warmup.plan_build_pass``: the build's first action planned on a tiny input."""

import tempfile
import threading

import pytest

from bq_platform.lib import build_warmup
from bq_platform.lib.build_read import BUILD_SQL_CONF
from bq_platform.lib.logformat import parse_line
from bq_platform.lib.pages import is_page
from bq_platform.lib.transform import CATEGORIES

OPEN_COST = "spark.sql.files.openCostInBytes"


def test_the_warmup_plans_the_builds_file_counts_without_running_a_job(spark) -> None:
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup())
    seconds = build_warmup.plan_build_pass(spark)
    assert seconds > 0
    assert set(tracker.getJobIdsForGroup()) == before  # planned, not run


def test_the_warmup_plans_what_the_build_plans(spark, monkeypatch) -> None:
    """The frame planned is the build's per-file counts over the transform of a real scan."""
    planned: list = []
    real = build_warmup.file_counts

    def recording(rows):
        frame = real(rows)
        planned.append(frame)
        return frame

    monkeypatch.setattr(build_warmup, "file_counts", recording)
    build_warmup.plan_build_pass(spark)
    (frame,) = planned
    assert {"file_no", "lines_read", "first_line", "last_line", *CATEGORIES} <= set(frame.columns)
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "HashAggregate" in plan and "FileScan text" in plan


def test_the_warmup_never_touches_the_callers_sql_settings(spark, monkeypatch) -> None:
    """It plans on a session of its own: a build running meanwhile on the caller's session keeps
    its settings (a warm-up on the same session restored them under the build's feet: the
    build then read packed splits and refused its own line numbers)."""
    seen: list[str | None] = []
    real = build_warmup.read_lines

    def watching(session, store, files):
        seen.append(spark.conf.get(OPEN_COST, None))
        assert session is not spark
        return real(session, store, files)

    monkeypatch.setattr(build_warmup, "read_lines", watching)
    before = spark.conf.get(OPEN_COST, None)
    build_warmup.plan_build_pass(spark)
    assert seen == [before] and before != BUILD_SQL_CONF[OPEN_COST]
    assert spark.conf.get(OPEN_COST, None) == before


def test_the_warmup_leaves_no_files(spark, monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    build_warmup.plan_build_pass(spark)
    assert list(tmp_path.iterdir()) == []


def test_the_warmup_runs_beside_a_build_on_another_thread(spark) -> None:
    """Two threads plan at once (as ``bq-platform run``'s pre-start thread and its build do)."""
    errors: list[BaseException] = []

    def plan() -> None:
        try:
            build_warmup.plan_build_pass(spark)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=plan) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and not any(t.is_alive() for t in threads)


@pytest.mark.parametrize("line", build_warmup.WARMUP_LINES.decode().splitlines())
def test_the_warmup_lines_are_well_formed_lines_of_its_hour(line: str) -> None:
    parsed = parse_line(line)
    assert parsed.reason is None
    assert parsed.timestamp.replace(minute=0, second=0) == build_warmup.WARMUP_HOUR


def test_the_warmup_has_a_page_and_an_asset() -> None:
    kinds = [
        is_page(p.parsed_request.method, p.parsed_request.target, p.status)
        for p in map(parse_line, build_warmup.WARMUP_LINES.decode().splitlines())
    ]
    assert sorted(kinds) == [False, True]
