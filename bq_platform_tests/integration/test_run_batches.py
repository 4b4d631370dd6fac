"""``bq-platform run`` builds consecutive due days in one hourly run, and a failed batch is
built again day by day, so a bad hour holds only its own day (bundled EPA log: 1995-08-30/31).
"""

import datetime as dt

import dagster as dg

from bq_platform.cli.runner import DAILY_JOB, HOURLY_JOB, PipelineRunner
from bq_platform.lib.landing.producer.land import land_file

EPA = "epa.gov"
AUG30, AUG31 = dt.date(1995, 8, 30), dt.date(1995, 8, 31)
PAGEVIEWS = {AUG30: 17_252, AUG31: 1_705}  # the README's figures for the bundled log


def _runner(env, lines: list[str]) -> PipelineRunner:
    return PipelineRunner.from_environment("local", echo=lines.append, instance=env.instance)


def _runs(env, job: str) -> list[dg.DagsterRun]:
    return list(reversed(env.instance.get_runs(dg.RunsFilter(job_name=job))))


def _pageviews(env) -> dict[dt.date, int]:
    rows = env.query("SELECT event_date, count(*) AS n FROM pageviews GROUP BY 1")
    return {r["event_date"]: r["n"] for r in rows}


def test_consecutive_days_are_built_in_one_hourly_run(local_env, access_logs):
    (path,) = (access_logs / EPA).glob("*.gz")
    land_file(local_env.store, EPA, path)
    lines: list[str] = []
    runner = _runner(local_env, lines)
    assert runner.run()
    (hourly,) = _runs(local_env, HOURLY_JOB)
    assert hourly.tags["dagster/asset_partition_range_start"] == "1995-08-30T00"
    assert hourly.tags["dagster/asset_partition_range_end"] == "1995-08-31T23"
    (daily,) = _runs(local_env, DAILY_JOB)  # the days are published in one run too
    assert daily.tags["dagster/asset_partition_range_start"] == "1995-08-30"
    assert daily.tags["dagster/asset_partition_range_end"] == "1995-08-31"
    assert _pageviews(local_env) == PAGEVIEWS
    for day, rows in PAGEVIEWS.items():  # each day's materialization has its own numbers
        (record,) = local_env.instance.fetch_materializations(
            dg.AssetRecordsFilter(
                asset_key=dg.AssetKey(["warehouse", "pageviews"]),
                asset_partitions=[day.isoformat()],
            ),
            limit=1,
        ).records
        metadata = record.asset_materialization.metadata
        assert metadata["rows"].value == rows
        assert metadata["destination"].value == f"pageviews${day:%Y%m%d}"
        assert metadata["step_totals"].value["rows"] == sum(PAGEVIEWS.values())
    assert runner.processed_days == [AUG30, AUG31]
    for day in (AUG30, AUG31):  # each day's checks are its own: 24 per hourly check
        names = [name for _, name, _ in runner.check_results[day]]
        assert names.count("accounting_identity") == 24 and names.count("sample_ratio") == 1
        assert all(passed for _, _, passed in runner.check_results[day])
    assert "1995-08-30..1995-08-31: building hours 1995-08-30T00 .. 1995-08-31T23" in lines


def test_a_failed_batch_is_built_day_by_day(local_env, access_logs):
    (path,) = (access_logs / EPA).glob("*.gz")
    landed = land_file(local_env.store, EPA, path)
    bad = next(d for d in landed if d.manifest.hour.date() == AUG31)
    local_env.store.write_bytes(bad.manifest.data_key, b"corrupt")  # size and SHA-256 differ
    lines: list[str] = []
    runner = _runner(local_env, lines)
    assert not runner.run()
    ranges = [
        (r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
        for r in _runs(local_env, HOURLY_JOB)
    ]
    assert ranges == [
        ("1995-08-30T00", "1995-08-31T23"),  # the batch: fails on the corrupt file
        ("1995-08-30T00", "1995-08-30T23"),  # then day by day
        ("1995-08-31T00", "1995-08-31T23"),
    ]
    assert _pageviews(local_env) == {AUG30: PAGEVIEWS[AUG30]}  # the good day is published
    assert runner.processed_days == [AUG30, AUG31]
    failures = [line for line in lines if "FAILED" in line]
    assert len(failures) == 2 and bad.manifest.data_key in failures[0]
    assert "building day by day" in failures[0]
    assert failures[1].startswith(f"{AUG31}: hourly run ")  # the message is printed once
    assert failures[1].endswith(": the same failure as above")


def test_the_quiet_output_shows_the_build_while_it_runs(local_env, access_logs):
    """Issue 9's 16x build is minutes of Spark: the pass line comes as the pass starts, and
    each step's line as the step finishes, not once the run returned (cli/progress.py)."""
    (path,) = (access_logs / EPA).glob("*.gz")
    land_file(local_env.store, EPA, path)
    seen: list[tuple[str, dg.DagsterRunStatus | None]] = []

    def echo(line: str) -> None:  # each line with the hourly run's status when it was printed
        runs = _runs(local_env, HOURLY_JOB)
        seen.append((line, runs[-1].status if runs else None))

    runner = PipelineRunner.from_environment("local", echo=echo, instance=local_env.instance)
    assert runner.run()

    lines = [line for line, _ in seen]
    label = "1995-08-30..1995-08-31"
    start = lines.index(f"{label}: building hours 1995-08-30T00 .. 1995-08-31T23")
    (passed,) = [i for i, line in enumerate(lines) if line.startswith(f"{label}:   pass ")]
    pass_line = "pass 1/1: hours 1995-08-30T03 .. 1995-08-31T03, 25 landed files, 47,748 lines"
    assert lines[passed] == f"{label}:   {pass_line}"
    (built,) = [i for i, line in enumerate(lines) if "lake/pageview_files:" in line]
    assert start < passed < built
    assert "47,748 source lines, 18,957 pageviews" in lines[built]
    assert seen[passed][1] == dg.DagsterRunStatus.STARTED  # printed during the run
    for asset in ("warehouse/pageviews_stage:", "warehouse/pageviews:"):  # once per run
        assert sum(asset in line for line in lines) == 1
    (published,) = [line for line in lines if "warehouse/pageviews:" in line]
    assert published == f"{label}:   warehouse/pageviews: 2 days, 18,957 rows"


def _line(day: dt.date, i: int, json: bool) -> str:
    """A combined line of ``day`` 06:xx UTC, or what the server writes after a switch to JSON."""
    if json:
        return f'{{"time":"{day}T06:{i % 60:02d}:00Z","request":"GET /p{i}.html HTTP/1.1"}}'
    return (
        f"10.0.0.{i % 200} - - [{day:%d/%b/%Y}:06:{i % 60:02d}:00 +0000] "
        f'"GET /page{i}.html HTTP/1.1" 200 512 "-" "Mozilla/5.0 (X11)"'
    )


def test_a_failed_range_publish_is_published_day_by_day(local_env, tmp_path):
    """Both days build; the second is held by the rejected-share gate, which fails the range's
    publish run: the days are then published one run each, so the first is published."""
    days = (dt.date(1995, 8, 1), dt.date(1995, 8, 2))
    for day, json in zip(days, (False, True), strict=True):
        path = tmp_path / f"access-{day}.log"
        path.write_text("".join(_line(day, i, json and i >= 10) + "\n" for i in range(100)))
        land_file(local_env.store, "example.org", path)
    lines: list[str] = []
    runner = _runner(local_env, lines)
    assert not runner.run()
    (hourly,) = _runs(local_env, HOURLY_JOB)
    assert hourly.status == dg.DagsterRunStatus.SUCCESS
    daily = [
        (
            r.tags.get("dagster/asset_partition_range_start") or r.tags["dagster/partition"],
            r.tags.get("dagster/asset_partition_range_end"),
            r.status,
        )
        for r in _runs(local_env, DAILY_JOB)
    ]
    assert daily == [
        ("1995-08-01", "1995-08-02", dg.DagsterRunStatus.FAILURE),  # the range: day 2 fails it
        ("1995-08-01", None, dg.DagsterRunStatus.SUCCESS),  # then day by day
        ("1995-08-02", None, dg.DagsterRunStatus.FAILURE),
    ]
    assert _pageviews(local_env) == {days[0]: 100}
    assert "1995-08-01..1995-08-02: publishing day by day, so a bad day holds only itself" in lines
    failures = [line for line in lines if "FAILED" in line]
    assert len(failures) == 2 and "1995-08-02: 1 of 24 hours" in failures[0]
    assert "--allow-rejected" in failures[0]  # the fix
    assert failures[1].startswith("1995-08-02: publish run ")  # the message is printed once
    assert failures[1].endswith(": the same failure as above")
    assert any(line.startswith("1995-08-01: done") for line in lines)
    for day in days:  # each check once: the failed range run's evaluations are not counted
        names = [name for _, name, _ in runner.check_results[day]]
        assert names.count("all_hours_complete") == 1
        assert names.count("deadletters_match_manifests") == 1
    names = [name for _, name, _ in runner.check_results[days[0]]]
    assert names.count("day_equals_sum_of_hours") == 2  # pageviews and pageviews_sample
