"""The data-quality gate end to end: Spark build, the rejected_share check, the daily publish.

Issue 7: the accounting identity holds even when every line is rejected, so a LogFormat change
upstream used to empty the warehouse with every check green. Here an hour whose lines are
mostly in another format fails ``rejected_share`` with ERROR and holds its day's publish
(unless the operator allows it for the run); an hour with 2% garbage warns and publishes.
"""

import datetime as dt
from pathlib import Path

import dagster as dg

from bq_platform.cli.runner import PipelineRunner
from bq_platform.defs.pageviews.assets import REJECTED_SHARE_CHECK, pageview_files
from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.publish.protocol import REJECTED_SHARE_PROBLEM, day_completeness

SITE = "example.org"
HOUR = dt.datetime(1995, 8, 1, 6, tzinfo=dt.UTC)
DAY = HOUR.date()


def good(i: int) -> str:
    """A combined line as a real server writes it (trailing blank after the user agent)."""
    return (
        f"10.0.{i // 200}.{i % 200} - - [01/Aug/1995:06:{i % 60:02d}:00 +0000] "
        f'"GET /page{i}.html HTTP/1.1" 200 512 "-" "Mozilla/5.0 (X11)" '
    )


def json_line(i: int) -> str:
    """What the same server writes after someone switched its log format to JSON."""
    return (
        f'{{"time":"1995-08-01T06:{i % 60:02d}:00Z","remote_addr":"10.1.0.{i % 200}",'
        f'"request":"GET /page{i}.html HTTP/1.1","status":200,"body_bytes_sent":512}}'
    )


def land(env, tmp_path: Path, lines: list[str]) -> None:
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    (landed,) = land_file(env.store, SITE, path)
    assert landed.manifest.hour == HOUR and landed.manifest.lines == len(lines)


def check_of_hour(env) -> dg.AssetCheckEvaluation:
    """The latest ``rejected_share`` evaluation of HOUR recorded in the instance."""
    key = dg.AssetCheckKey(pageview_files.key, REJECTED_SHARE_CHECK)
    records = env.instance.event_log_storage.get_asset_check_execution_history(key, limit=100)
    latest = next(r for r in records if r.partition == hour_label(HOUR))
    return latest.event.dagster_event.event_specific_data


def runner(env) -> PipelineRunner:
    return PipelineRunner.from_environment("local", echo=lambda _line: None, instance=env.instance)


def published(env) -> int:
    return env.query(f"SELECT count(*) AS n FROM pageviews WHERE site = '{SITE}'")[0]["n"]


def test_log_format_change_fails_with_error_and_holds_the_day(local_env, tmp_path) -> None:
    lines = [good(i) for i in range(10)] + [json_line(i) for i in range(90)]
    land(local_env, tmp_path, lines)

    first = runner(local_env)
    assert not first.run()  # the hourly run succeeds (the check does not block it), not publish
    assert ("lake/pageview_files", REJECTED_SHARE_CHECK, False) in first.check_results[DAY]
    evaluation = check_of_hour(local_env)
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.ERROR
    meta = {k: v.value for k, v in evaluation.metadata.items()}
    assert meta["rate"] == 0.9
    assert meta["top_reasons"] == {SITE: {"malformed": 90}}
    (samples,) = meta["sample_lines"].values()
    assert samples and all(s.startswith('{"time":"1995-08-01T06:') for s in samples)
    assert all(len(s) <= 200 for s in samples)
    assert local_env.query("SELECT count(*) AS n FROM pageviews_stage_1995080106")[0]["n"] == 10
    wh = local_env.warehouse()
    try:
        completeness = day_completeness(wh, local_env.store, DAY, "full", max_rejected_share=0.05)
        lenient = day_completeness(wh, local_env.store, DAY, "full", max_rejected_share=None)
    finally:
        wh.close()
    assert list(completeness.problems) == [HOUR]
    (problem,) = completeness.problems[HOUR]
    assert problem.startswith(REJECTED_SHARE_PROBLEM) and SITE in problem and "90.0%" in problem
    assert lenient.complete

    operator = runner(local_env)
    assert operator.run(hours=day_hours(DAY), allow_rejected=True)
    assert published(local_env) == 10  # the well-formed lines; the rest are dead letters


def test_two_percent_garbage_warns_and_publishes(local_env, tmp_path) -> None:
    lines = [good(i) for i in range(98)] + [json_line(i) for i in range(2)]
    land(local_env, tmp_path, lines)

    assert runner(local_env).run()
    assert published(local_env) == 98
    evaluation = check_of_hour(local_env)
    assert not evaluation.passed
    assert evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.metadata["rate"].value == 0.02
