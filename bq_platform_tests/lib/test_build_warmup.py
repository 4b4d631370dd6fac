"""``build_warmup.plan_build_pass``: the build's first action planned on a tiny input."""

import tempfile
import threading

import pytest

from bq_platform.lib import build_warmup
from bq_platform.lib.build import build_hours
from bq_platform.lib.build_read import BUILD_SQL_CONF
from bq_platform.lib.logformat import parse_line
from bq_platform.lib.objectstore.local import LocalObjectStore
from bq_platform.lib.pages import is_page
from bq_platform.lib.transform import CATEGORIES
from bq_platform_tests.lib.build_inputs import H_NASA_1, KEY, NASA, land, real_lines

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


def test_a_build_beside_looping_warmups_counts_every_line(spark, access_logs, tmp_path) -> None:
    """``bq-platform run``'s pre-start thread plans while the build plans and runs: the build's
    files still each get their own split and line numbers 1..n, and every line is counted.
    Whether a shared session's settings would be reset inside the build's window is a matter of
    timing; ``test_the_warmup_never_touches_the_callers_sql_settings`` checks that for certain."""
    store = LocalObjectStore(tmp_path / "lake")
    lines = real_lines(access_logs)[(NASA, H_NASA_1)]
    thirds = [lines[i::3] for i in range(3)]  # three small files: packed splits would mix them
    for number, part in enumerate(thirds):
        land(store, NASA, H_NASA_1, part, name=f"part-{number}.log.gz")
    stop, errors = threading.Event(), []

    def warm_up_until_stopped() -> None:
        while not stop.is_set():
            try:
                build_warmup.plan_build_pass(spark)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                return

    thread = threading.Thread(target=warm_up_until_stopped)
    thread.start()
    try:
        (manifest,) = build_hours(spark, store, [H_NASA_1], attempt_id="beside", visitor_key=KEY)
    finally:
        stop.set()
        thread.join(timeout=120)
    assert not errors and not thread.is_alive()
    (counts,) = manifest.counts
    assert counts.source_lines == len(lines) and not manifest.file_mismatches
    assert counts.pageviews + counts.non_page_hits + counts.rejected == len(lines)


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
