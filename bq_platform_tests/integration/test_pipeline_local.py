"""End to end on the bundled real logs and on crafted bad input, through Dagster, locally."""

import collections
import datetime as dt
import gzip

import dagster as dg
import pyarrow.parquet as pq

from bq_platform.cli.runner import PipelineRunner
from bq_platform.defs.pageviews.assets import pageview_files
from bq_platform.defs.resources import build_resources
from bq_platform.defs.warehouse.assets import pageviews_audit
from bq_platform.defs.warehouse.stage import stage_tables
from bq_platform.lib.core.accounting import row_balanced
from bq_platform.lib.core.layout import DEADLETTER_PREFIX, landed_manifest_key
from bq_platform.lib.core.manifest import LandedManifest
from bq_platform.lib.landing.producer.land import land_file

UTC = dt.UTC
NASA = "ksc.nasa.gov"
COUNT_COLUMNS = "source_lines, pageviews, non_page_hits, rejected, duplicates, out_of_window"


def runner(env) -> PipelineRunner:
    return PipelineRunner.from_environment("local", echo=lambda _line: None, instance=env.instance)


def audit(env) -> list[dict]:
    return env.query(f"SELECT site, hour, {COUNT_COLUMNS} FROM pageviews_audit ORDER BY hour, site")


def assert_identity(rows: list[dict]) -> None:
    for r in rows:
        assert row_balanced(r), r


def test_one_hour_materializes_with_passing_blocking_checks(local_env, access_logs):
    (path,) = (access_logs / NASA).glob("*.gz")
    landed = {f.manifest.hour: f.manifest for f in land_file(local_env.store, NASA, path)}
    hour = dt.datetime(1995, 8, 1, 5, tzinfo=UTC)

    result = dg.materialize(
        [pageview_files, stage_tables, pageviews_audit],
        partition_key="1995-08-01T05",
        resources=build_resources("local"),
        instance=local_env.instance,
    )

    assert result.success
    evaluations = result.get_asset_check_evaluations()
    assert {(e.asset_key.path[-1], e.check_name) for e in evaluations} == {
        ("pageview_files", "accounting_identity"),
        ("pageview_files", "traffic_classes"),
        ("pageview_files", "rejected_share"),
        ("pageviews_stage", "stage_matches_manifest"),
        ("pageviews_sample_stage", "stage_matches_manifest"),
    }
    assert all(e.passed for e in evaluations)
    (row,) = [r for r in audit(local_env) if r["site"] == NASA]
    assert row["hour"] == hour
    assert row["source_lines"] == landed[hour].lines
    assert_identity([row])
    stage_rows = local_env.query("SELECT count(*) AS n FROM pageviews_stage_1995080105")[0]["n"]
    assert stage_rows == row["pageviews"] > 0

    # One stage table alone (the step loads both, or the one a run selects): only its asset
    # and check are reported, and its unchanged hour submits no job.
    sample_key = dg.AssetKey(["warehouse", "pageviews_sample_stage"])
    again = dg.materialize(
        [stage_tables],
        selection=[sample_key],
        partition_key="1995-08-01T05",
        resources=build_resources("local"),
        instance=local_env.instance,
    )
    assert again.success
    (materialization,) = again.get_asset_materialization_events()
    assert materialization.asset_key == sample_key
    (evaluation,) = again.get_asset_check_evaluations()
    assert (evaluation.asset_key, evaluation.passed) == (sample_key, True)
    assert materialization.materialization.metadata["job_action"].value == "skipped"


def test_real_logs_day_publishes_and_rerun_changes_nothing(local_env, access_logs):
    (path,) = (access_logs / NASA).glob("*.gz")
    land_file(local_env.store, NASA, path)
    first = runner(local_env)

    assert first.run()

    rows = audit(local_env)
    assert len(rows) == 24  # every hour of the day, zeros included
    assert sum(r["source_lines"] for r in rows) == 33_996
    assert_identity(rows)
    per_hour = {
        r["hour"]: r["n"]
        for r in local_env.query(
            "SELECT date_trunc('hour', event_ts) AS hour, count(*) AS n FROM pageviews "
            "WHERE site = 'ksc.nasa.gov' GROUP BY 1"
        )
    }
    assert per_hour == {r["hour"]: r["pageviews"] for r in rows if r["pageviews"]}
    checks = first.check_results[dt.date(1995, 8, 1)]
    # One result per hour for the hourly checks, per day for the daily ones (issue 8).
    assert collections.Counter(name for _, name, _ in checks) == {
        "accounting_identity": 24,
        "traffic_classes": 24,
        "rejected_share": 24,
        "stage_matches_manifest": 48,
        "day_equals_sum_of_hours": 2,
        "sample_ratio": 1,
        "deadletters_match_manifests": 1,
        "all_hours_complete": 1,
        "rollup_equals_published": 2,
        "human_visitors_exact": 2,
    }
    assert all(passed for _, _, passed in checks), [c for c in checks if not c[2]]
    jobs_before = local_env.query("SELECT count(*) AS n FROM _bq_platform_jobs")[0]["n"]
    published = local_env.query("SELECT count(*) AS n FROM pageviews")[0]["n"]

    again = runner(local_env)
    assert again.run()
    assert again.processed_days == []  # up to date: nothing ran

    forced = runner(local_env)
    assert forced.run(force=True)
    assert forced.processed_days == [dt.date(1995, 8, 1)]
    assert audit(local_env) == rows
    assert local_env.query("SELECT count(*) AS n FROM pageviews")[0]["n"] == published
    # Same content: every load and copy job was found done and skipped.
    assert local_env.query("SELECT count(*) AS n FROM _bq_platform_jobs")[0]["n"] == jobs_before


COMBINED_GOOD = [
    '2001:db8::1 - alice [01/Aug/1995:06:00:01 +0000] "GET /index.html HTTP/1.1" 200 512 '
    '"http://ref.example/?q=a b" "Mozilla/5.0 (X11; \\"quoted\\")"',
    '10.0.0.2 - - [01/Aug/1995:06:00:02 +0000] "GET /logo.gif HTTP/1.1" 200 99 "-" "curl/7"',
    '10.0.0.3 - - [01/Aug/1995:06:10:00 +0000] "GET /a page with spaces.html HTTP/1.0" 304 -'
    ' "-" "-"',
    '10.0.0.4 - - [01/Aug/1995:06:20:00 +0000] "POST /form HTTP/1.0" 200 10 "-" "x"',
    '10.0.0.5 - - [01/Aug/1995:06:30:00 +0000] "GET /missing.html HTTP/1.0" 404 0 "-" "x"',
    '10.0.0.6 - - [01/Aug/1995:06:40:00 +0000] "-" 408 - "-" "-"',
]
BAD = [
    "",  # empty line
    "complete garbage that is not a log line",
    '10.0.0.7 - - [01/Aug/1995:06:41:00 +0000] "GET / HTTP/1.0" 2x0 5',  # bad status
    '10.0.0.8 - - [32/Aug/1995:06:42:00 +0000] "GET / HTTP/1.0" 200 5',  # bad timestamp
]
TRUNCATED = '10.0.0.9 - - [01/Aug/1995:06:59:00 +0000] "GET /trunc'  # no newline at the end


def test_combined_format_and_bad_lines_are_all_accounted_for(local_env, tmp_path):
    body = "\n".join(COMBINED_GOOD + BAD + [TRUNCATED]).encode() + b"\xff\xfe bytes\n"
    # the last line above is non-UTF-8 garbage appended to the truncated line
    path = tmp_path / "combined.log"
    path.write_bytes(body)
    (landed,) = land_file(local_env.store, "example.org", path)
    lines = landed.manifest.lines
    assert lines == len(COMBINED_GOOD) + len(BAD) + 1

    # A producer delivers the same file twice under another name (at-least-once delivery).
    copy_key = landed.manifest.data_key.replace(".log.gz", "-redelivery.log.gz")
    local_env.store.write_bytes(copy_key, local_env.store.read_bytes(landed.manifest.data_key))
    copy = LandedManifest(**{**landed.manifest.__dict__, "data_key": copy_key})
    local_env.store.write_text(landed_manifest_key(copy_key), copy.to_json())

    # A producer puts a 07:xx line into the 06:00 folder: out of window.
    stray = gzip.compress(b'10.0.0.10 - - [01/Aug/1995:07:05:00 +0000] "GET / HTTP/1.0" 200 1\n')
    stray_path = tmp_path / "stray.log.gz"
    stray_path.write_bytes(stray)
    (stray_landed,) = land_file(local_env.store, "example.org", stray_path)
    assert stray_landed.manifest.hour.hour == 7
    moved_key = landed.manifest.data_key.rsplit("/", 1)[0] + "/stray.log.gz"
    local_env.store.write_bytes(
        moved_key, local_env.store.read_bytes(stray_landed.manifest.data_key)
    )
    moved = LandedManifest(
        **{**stray_landed.manifest.__dict__, "data_key": moved_key, "hour": landed.manifest.hour}
    )
    local_env.store.write_text(landed_manifest_key(moved_key), moved.to_json())

    # 5 of 11 lines are bad on purpose: above the rejected share, so publishing needs the
    # operator's consent (test_rejected_share.py tests the gate itself).
    assert runner(local_env).run(allow_rejected=True)

    rows = [r for r in audit(local_env) if r["site"] == "example.org" and r["hour"].hour == 6]
    (row,) = rows
    assert row["source_lines"] == 2 * lines + 1
    assert row["duplicates"] == lines
    assert row["out_of_window"] == 1
    assert row["rejected"] == len(BAD) + 1  # + the truncated/garbled last line
    assert row["pageviews"] == 2  # /index.html 200 and the spaced path 304
    assert_identity(rows)

    dead = [
        pq.read_table(local_env.store.uri(k)).to_pylist()
        for k in local_env.store.list_keys(DEADLETTER_PREFIX)
        if k.endswith(".parquet")
    ]
    dead_rows = [r for table in dead for r in table]
    assert len(dead_rows) == row["rejected"] + row["out_of_window"]
    assert all(r["reason"] and r["data_key"] and r["line_no"] >= 1 for r in dead_rows)
    assert {r["raw"] for r in dead_rows} >= {"complete garbage that is not a log line", ""}

    # The warehouse's dead-letter table holds the same lines, once (issue 7).
    table = local_env.query(
        "SELECT site, delivery_hour, data_key, line_no, reason, raw FROM pageview_deadletters "
        "WHERE site = 'example.org'"
    )
    assert sorted((r["data_key"], r["line_no"]) for r in table) == sorted(
        (r["data_key"], r["line_no"]) for r in dead_rows
    )
    assert {r["delivery_hour"] for r in table} == {row["hour"]}
    assert {(r["raw"], r["reason"]) for r in table} == {(r["raw"], r["reason"]) for r in dead_rows}
