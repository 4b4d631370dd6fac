"""How ``bq-platform run`` groups due days into hourly runs (batches of consecutive days), then
publishes them, and what it prints."""

import datetime as dt
import json

import dagster as dg
import pytest
from click.testing import CliRunner

from bq_platform.cli.main import main
from bq_platform.cli.runner import PipelineRunner
from bq_platform.defs.reports import assets as reports_assets
from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import day_hours
from bq_platform.lib.core.reporting import COUNT_FIELDS, summary_table
from bq_platform.lib.planning import batches
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform_tests.cli.test_main import one_landed_day
from bq_platform_tests.lib.hourly_build.test_retention import lake

D1, D2, D3, D5 = (dt.date(1995, 8, d) for d in (1, 2, 3, 5))


def test_consecutive_days_share_a_batch_up_to_the_limit():
    todo = {d: day_hours(d) for d in (D3, D1, D2, D5)}
    assert [sorted(b) for b in batches(todo)] == [[D1, D2, D3], [D5]]  # D4 is not due: a gap
    assert [sorted(b) for b in batches(todo, max_days=2)] == [[D1, D2], [D3], [D5]]
    (first, *_) = batches(todo)
    assert first[D2] == day_hours(D2)


def test_partial_days_join_only_when_their_hours_touch():
    evening = day_hours(D1)[20:]
    morning = day_hours(D2)[:4]
    assert [sorted(b) for b in batches({D1: evening, D2: morning})] == [[D1, D2]]
    late_morning = day_hours(D2)[2:6]
    assert [sorted(b) for b in batches({D1: evening, D2: late_morning})] == [[D1], [D2]]
    assert batches({}) == []


def _runner(tmp_path, events: list[str]) -> PipelineRunner:
    store = LocalObjectStore(tmp_path / "lake")
    warehouse = DuckDBWarehouse(str(tmp_path / "warehouse.duckdb"))

    def load_definitions() -> dg.Definitions:
        events.append("definitions")
        return dg.Definitions()

    runner = PipelineRunner(
        load_definitions=load_definitions,
        store=store,
        warehouse=warehouse,
        visitor_key="k",
        echo=lambda _: None,
        instance=dg.DagsterInstance.ephemeral(),
    )
    return runner


def test_the_definitions_load_once_when_a_build_is_due(tmp_path, monkeypatch):
    events: list[str] = []
    runner = _runner(tmp_path, events)

    def run_batch(self, batch, *_):
        assert self.definitions is self.definitions  # loaded once
        events.append("build")
        return True

    monkeypatch.setattr(PipelineRunner, "_run_batch", run_batch)
    assert runner.run(hours=day_hours(D1)[:2])
    assert events == ["definitions", "build"]


def test_no_definitions_when_nothing_is_due(tmp_path):
    events: list[str] = []
    runner = _runner(tmp_path, events)
    assert runner.run()  # an empty landing zone: nothing to build
    assert events == []


def test_a_lookback_window_plans_only_its_days(tmp_path):
    """``bq-platform run`` with BQ_PLATFORM_LOOKBACK_DAYS: older landed days are not planned,
    and it says which days it plans."""
    from bq_platform_tests.lib.build_inputs import land

    lines: list[str] = []
    runner = _runner(tmp_path, [])
    runner.echo = lines.append
    runner.lookback_days = 2
    land(runner.store, "epa.gov", dt.datetime.combine(D1, dt.time(4), tzinfo=dt.UTC), [b"x"])
    assert runner.run()  # 1995 only: nothing in the window
    since = dt.datetime.now(dt.UTC).date() - dt.timedelta(days=2)
    assert lines[0] == f"planning the landed days from {since} on (BQ_PLATFORM_LOOKBACK_DAYS)"
    assert lines[1].startswith(f"nothing landed from {since} on") and len(lines) == 2

    runner.lookback_days = 0
    lines.clear()
    runner.warehouse = DuckDBWarehouse(str(tmp_path / "warehouse.duckdb"))
    runner._run_batch = lambda *a: True  # type: ignore[method-assign]
    assert runner.run()
    assert lines == [
        f"{D1}: due (24 hours to build (1995-08-01T00, 1995-08-01T01, 1995-08-01T02 ...))"
    ]


def test_the_cleanup_after_a_run_says_what_it_deleted_and_what_it_could_not_read(tmp_path):
    store = lake(tmp_path)  # old/05, running/06 and crashed: superseded, first seen long ago
    seen = ("old/1995-08-01T05", "running/1995-08-01T06", "crashed/*")
    long_ago = "2020-01-01T00:00:00+00:00"
    store.write_text(layout.ATTEMPT_REGISTRY_KEY, json.dumps(dict.fromkeys(seen, long_ago)))
    torn = "staging/pageviews/_SUPERSEDED/attempt=torn/units.json"
    store.write_text(torn, "{")
    lines: list[str] = []
    runner = PipelineRunner(
        load_definitions=dg.Definitions,
        store=store,
        warehouse=DuckDBWarehouse(tmp_path / "w.duckdb"),
        visitor_key="k",
        echo=lines.append,
    )

    runner.clean_attempts()

    (line,) = lines
    assert line.startswith("cleanup: deleted 7 files of 4 superseded attempt-hours (3 attempts)")
    assert "; full pass" in line and f"1 unreadable superseded records kept, e.g. {torn}" in line
    assert store.exists(torn)
    runner.clean_attempts()  # nothing left to delete: the unreadable record is said again
    assert "1 unreadable superseded records kept" in lines[1] and "; full pass" not in lines[1]


class _AuditRows:
    """Stands in for the warehouse of :meth:`PipelineRunner.print_summary`: audit rows only."""

    def __init__(self, sites: list[str]) -> None:
        self.sites = sites

    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict]:
        counts = {"pageviews": 40, "non_page_hits": 50, "rejected": 3, "duplicates": 0}
        return [
            {"site": site, "source_lines": 93, "out_of_window": 0, "sample_rows": 1, **counts}
            for site in self.sites
        ]


def test_the_summary_keeps_its_columns_for_long_site_names(tmp_path):
    """A site name longer than the column (``syn001.ksc.nasa.gov``) widens it for every row,
    so each number stays under its heading."""
    lines: list[str] = []
    runner = _runner(tmp_path, [])
    runner.echo = lines.append
    runner.warehouse = _AuditRows(["epa.gov", "syn001.ksc.nasa.gov.example"])  # type: ignore
    runner.print_summary([D1])
    (header,) = [line for line in lines if line.startswith("day ")]
    rows = [line for line in lines if line.startswith(str(D1))]
    assert len(rows) == 2
    for row in rows:
        for heading, value in (("source", "93"), ("pages", "40"), ("rejected", "3")):
            column_end = header.index(heading) + len(heading)
            assert row[column_end - len(value) : column_end] == value, (heading, row)


def test_the_summary_shows_human_and_bot_pages_apart():
    """Per site a human and a bot column (``-`` for a site whose audit rows predate them),
    and per day the pageviews with human and bot apart."""
    zero = {k: 0 for k in COUNT_FIELDS}
    shop = {**zero, "source_lines": 90, "pageviews": 81, "non_page_hits": 9}
    rows = {
        D1: [
            {"site": "zanbil.ir", **shop, "human_pageviews": 47, "bot_pageviews": 34},
            {"site": "old.example", **shop, "human_pageviews": None, "bot_pageviews": None},
        ]
    }

    lines = summary_table(rows, {})

    header = lines[0]
    by_site = {line.split()[1]: line for line in lines if line.startswith(str(D1))}
    for site, human, bot in (("zanbil.ir", "47", "34"), ("old.example", "-", "-")):
        for heading, value in (("human", human), ("bot", bot)):
            end = header.index(f" {heading} ") + len(heading) + 1
            assert by_site[site][end - len(value) : end] == value, (site, heading)
    assert lines[4].split() == [
        "pageviews",
        "162",
        "(human",
        "47,",
        "bot",
        "34,",
        "not",
        "classified",
        "81)",
    ]


def test_the_summary_leaves_out_sites_with_no_lines_that_day():
    """Each site has an audit row for every hour; a site that landed nothing that day (and is
    balanced) is left out, and a day with no site left says so."""
    zero = {k: 0 for k in COUNT_FIELDS}
    landed = {**zero, "source_lines": 5, "pageviews": 2, "non_page_hits": 3}
    rows = {
        D1: [{"site": "epa.gov", **landed}, {"site": "zanbil.ir", **zero}],
        D1 + dt.timedelta(days=1): [{"site": "epa.gov", **zero}],
    }

    lines = summary_table(rows, {})

    assert [line.split()[1] for line in lines if line.startswith(str(D1))] == ["epa.gov"]
    day2 = str(D1 + dt.timedelta(days=1))
    assert [line for line in lines if line.startswith(day2)] == [
        f"{day2} (no lines landed for this day)"
    ]


class _Result:
    """Stands in for a Dagster run's result."""

    def __init__(self, success: bool) -> None:
        self.success, self.run_id = success, "r"


def _executed(tmp_path, monkeypatch, todo, failing: set[str]) -> list[str]:
    """The events of executing ``todo`` with builds whose labels are in ``failing`` failing,
    then whether it succeeded."""
    events: list[str] = []
    runner = _runner(tmp_path, events)

    def build(self, label, hours):
        events.append(f"build {label}")
        return _Result(label not in failing)

    def publish(self, days, *_):
        events.append(f"publish {days[0]}..{days[-1]}")
        return True

    monkeypatch.setattr(PipelineRunner, "_build", build)
    monkeypatch.setattr(PipelineRunner, "_publish", publish)
    monkeypatch.setattr(PipelineRunner, "_record_checks", lambda *_: None)
    monkeypatch.setattr(PipelineRunner, "_failure", lambda *_: "failed")
    events.append("ok" if runner.execute(todo) else "failed")
    return events


def test_batches_are_built_then_published_and_a_failed_batch_day_by_day(tmp_path, monkeypatch):
    """Each batch is built in one run, then published; a failed multi-day build is rebuilt day
    by day, each day published after its own build."""
    todo = {d: day_hours(d) for d in (D1, D2, D5)}
    assert _executed(tmp_path, monkeypatch, todo, set()) == [
        f"build {D1}..{D2}",
        f"publish {D1}..{D2}",
        f"build {D5}",
        f"publish {D5}..{D5}",
        "ok",
    ]
    two = {d: day_hours(d) for d in (D1, D2)}
    assert _executed(tmp_path, monkeypatch, two, {f"{D1}..{D2}"}) == [
        f"build {D1}..{D2}",
        f"build {D1}",
        f"publish {D1}..{D1}",
        f"build {D2}",
        f"publish {D2}..{D2}",
        "ok",
    ]
    failed = _executed(tmp_path, monkeypatch, {D5: day_hours(D5)}, {f"{D5}"})
    assert failed == [f"build {D5}", "failed"]


@pytest.mark.spark
def test_a_day_whose_publish_failed_in_the_report_is_due_again(tmp_path, monkeypatch, spark):
    """``bq-platform run`` fails in the report step after the tables were published; the next
    ``run`` (no --force) publishes the day again, saying why, and produces the report; the
    one after skips it."""
    one_landed_day(tmp_path, monkeypatch)
    real_render = reports_assets.render_png
    calls: list[int] = []

    def render_png_fails_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise OSError("No space left on device: reports/completeness")
        return real_render(*args, **kwargs)

    monkeypatch.setattr(reports_assets, "render_png", render_png_fails_once)
    report = LocalObjectStore(tmp_path / "lake").exists
    key = reports_assets.report_key(str(D1))

    failed = CliRunner().invoke(main, ["run"])
    assert failed.exit_code == 1, failed.output
    assert "FAILED: reports__pageviews_completeness: OSError: No space left" in failed.output
    assert not report(key)
    with dg.DagsterInstance.from_config(str(tmp_path / "dh")) as instance:
        (run,) = instance.get_runs(dg.RunsFilter(job_name="pageviews_daily_job"))
    assert run.status == dg.DagsterRunStatus.FAILURE

    again = CliRunner().invoke(main, ["run"])
    assert again.exit_code == 0, again.output
    said = f"last publish run {run.run_id[:8]} failed in reports__pageviews_completeness"
    assert f"{D1}: due ({said})" in again.output
    assert report(key)

    third = CliRunner().invoke(main, ["run"])
    assert third.exit_code == 0, third.output
    assert f"{D1}: skip (up to date)" in third.output
