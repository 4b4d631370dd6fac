"""The daily rollups in the daily job on the local backend: both assets published with passing
checks, nothing submitted again for the same content, a tampered rollup caught, and the same
rollups built by ``spark-submit`` through Pipes (``BQ_PLATFORM_BUILD=spark-submit``)."""

import datetime as dt
import gzip
import sys

import dagster as dg
import duckdb
import pytest

from bq_platform.defs.pageviews.spark_build import SparkSubmitBuild, hourly_build
from bq_platform.lib.core.layout import ROLLUPS_PREFIX
from bq_platform.lib.hourly_build.spark import spark_config
from bq_platform.lib.landing.producer.land import land_file
from bq_platform_tests.defs.conftest import SITE, CountingSparkResource, Pipeline
from bq_platform_tests.defs.pageviews.test_spark_build import with_build

pytestmark = pytest.mark.spark
DAY = dt.date(1995, 8, 1)
TAGS = {
    "dagster/asset_partition_range_start": "1995-08-01T00",
    "dagster/asset_partition_range_end": "1995-08-01T23",
}
#: (UTC hour, client, path): c1 reads /a twice and /b once; c2 reads /a; c3 fetches
#: /robots.txt (a page too) in hour 8, so its 3 pages of that hour are suspected bots.
REQUESTS = [
    (7, "c1", "/a"),
    (7, "c1", "/a"),
    (7, "c2", "/a"),
    (8, "c1", "/b"),
    (8, "c3", "/robots.txt"),
    (8, "c3", "/a"),
    (8, "c3", "/c"),
]


def _land(pipeline: Pipeline) -> None:
    for hour in sorted({h for h, _, _ in REQUESTS}):
        stamp = dt.datetime.combine(DAY, dt.time(hour)).strftime("%d/%b/%Y:%H")
        text = "".join(
            f'{client}.example - - [{stamp}:00:{i:02d} +0000] "GET {path} HTTP/1.0" 200 10\n'
            for i, (h, client, path) in enumerate(REQUESTS)
            if h == hour
        )
        file = pipeline.home / f"rollup-{hour}.log.gz"
        file.write_bytes(gzip.compress(text.encode()))
        land_file(pipeline.store, SITE, file)


def _daily(pipeline: Pipeline) -> dg.ExecuteInProcessResult:
    return pipeline.definitions.resolve_job_def("pageviews_daily_job").execute_in_process(
        instance=pipeline.instance, partition_key=DAY.isoformat(), raise_on_error=False
    )


def _rollup_checks(result: dg.ExecuteInProcessResult) -> dict[tuple[str, str], object]:
    return {
        (e.asset_key.path[-1], e.check_name): e
        for e in result.get_asset_check_evaluations()
        if e.asset_key.path[-1].startswith("pageviews_daily_")
    }


def _metadata(result: dg.ExecuteInProcessResult, table: str) -> dict:
    (event,) = [
        e for e in result.get_asset_materialization_events() if e.asset_key.path[-1] == table
    ]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_daily_job_publishes_both_rollups_with_passing_checks_once_per_content(
    pipeline: Pipeline,
):
    _land(pipeline)
    hourly = pipeline.definitions.resolve_job_def("pageviews_hourly_job")
    assert hourly.execute_in_process(instance=pipeline.instance, tags=TAGS).success

    first = _daily(pipeline)
    assert first.success
    checks = _rollup_checks(first)
    assert len(checks) == 4 and all(e.passed for e in checks.values())
    assert {e.partition for e in checks.values()} == {DAY.isoformat()}

    published = pipeline.query(
        "SELECT traffic_class, count(*) AS n FROM pageviews GROUP BY 1 ORDER BY 1"
    )
    assert {r["traffic_class"]: r["n"] for r in published} == {"human": 4, "suspected_bot": 3}
    by_site = pipeline.query("SELECT * FROM pageviews_daily_by_site")
    assert [
        (r["event_date"], r["site"], r["human_pageviews"], r["bot_pageviews"], r["human_visitors"])
        for r in by_site
    ] == [(DAY, SITE, 4, 3, 2)]
    by_page = pipeline.query(
        "SELECT page_path, human_pageviews, human_visitors FROM pageviews_daily_by_page "
        "ORDER BY page_path"
    )
    assert [tuple(r.values()) for r in by_page] == [("/a", 3, 2), ("/b", 1, 1)]

    site_meta = _metadata(first, "pageviews_daily_by_site")
    assert site_meta["job_action"] == "submitted"
    assert site_meta["destination"] == "pageviews_daily_by_site$19950801"
    assert (site_meta["rows"], site_meta["human_pageviews"], site_meta["bot_pageviews"]) == (
        1,
        4,
        3,
    )
    jobs = pipeline.query(
        "SELECT job_id FROM _bq_platform_jobs WHERE job_id LIKE 'bqp_load_pageviews_daily_%'"
    )
    assert len(jobs) == 2

    again = _daily(pipeline)
    assert again.success
    assert _metadata(again, "pageviews_daily_by_page")["job_action"] == "skipped"
    assert _metadata(again, "pageviews_daily_by_site")["fingerprint"] == site_meta["fingerprint"]
    assert pipeline.query(
        "SELECT count(*) AS n FROM _bq_platform_jobs WHERE job_id LIKE 'bqp_load_pageviews_daily_%'"
    ) == [{"n": 2}]


def test_a_tampered_rollup_fails_its_check_naming_the_page_and_both_numbers(
    pipeline: Pipeline,
):
    _land(pipeline)
    hourly = pipeline.definitions.resolve_job_def("pageviews_hourly_job")
    assert hourly.execute_in_process(instance=pipeline.instance, tags=TAGS).success
    assert _daily(pipeline).success
    con = duckdb.connect(str(pipeline.home / "warehouse.duckdb"))
    try:
        con.execute("UPDATE pageviews_daily_by_page SET human_visitors = 7 WHERE page_path = '/a'")
    finally:
        con.close()

    tampered = _daily(pipeline)
    assert not tampered.success  # a blocking check failed
    checks = _rollup_checks(tampered)
    failed = checks[("pageviews_daily_by_page", "human_visitors_exact")]
    assert not failed.passed
    assert f"site {SITE} page /a: human_visitors 7 in the rollup, 2 published" in (
        failed.description
    )
    assert "bq-platform run --start 1995-08-01T00 --end 1995-08-01T23 --force" in (
        failed.description
    )
    assert failed.metadata["actual"].value == 1
    assert checks[("pageviews_daily_by_page", "rollup_equals_published")].passed
    assert checks[("pageviews_daily_by_site", "human_visitors_exact")].passed


def test_spark_submit_builds_the_rollups_the_run_process_builds(
    pipeline: Pipeline, monkeypatch
) -> None:
    """The daily job with ``BQ_PLATFORM_BUILD=spark-submit``: the rollups' application runs
    through Pipes (no session in the run's process), writes the same files' content, and the
    loads and checks follow as in process."""
    _land(pipeline)
    hourly = pipeline.definitions.resolve_job_def("pageviews_hourly_job")
    assert hourly.execute_in_process(instance=pipeline.instance, tags=TAGS).success
    monkeypatch.setenv("BQ_PLATFORM_BUILD", "spark-submit")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    launcher = hourly_build(spark_config("local[1]", shuffle_partitions=2))
    assert isinstance(launcher, SparkSubmitBuild)
    sessions = len(CountingSparkResource.setups)
    submitted = (
        with_build(pipeline, launcher)
        .resolve_job_def("pageviews_daily_job")
        .execute_in_process(
            instance=pipeline.instance, partition_key=DAY.isoformat(), raise_on_error=False
        )
    )
    assert submitted.success, [
        e.step_failure_data.error.message for e in submitted.all_events if e.is_step_failure
    ]
    assert len(CountingSparkResource.setups) == sessions  # built out of process
    checks = _rollup_checks(submitted)
    assert len(checks) == 4 and all(e.passed for e in checks.values())
    site_meta = _metadata(submitted, "pageviews_daily_by_site")
    assert site_meta["job_action"] == "submitted"
    assert (site_meta["rows"], site_meta["human_pageviews"], site_meta["bot_pageviews"]) == (
        1,
        4,
        3,
    )
    logs = [
        e.message
        for e in pipeline.instance.all_logs(submitted.run_id)
        if "launching the rollups of 1995-08-01" in (e.message or "")
    ]
    assert len(logs) == 1  # both assets, one application: the second finds its manifest
    by_page = pipeline.query(
        "SELECT page_path, human_pageviews, human_visitors FROM pageviews_daily_by_page "
        "ORDER BY page_path"
    )
    assert [tuple(r.values()) for r in by_page] == [("/a", 3, 2), ("/b", 1, 1)]

    # The process's own build finds the content built and submits nothing new.
    again = _daily(pipeline)
    assert again.success
    assert {
        _metadata(again, t)["job_action"]
        for t in ("pageviews_daily_by_site", "pageviews_daily_by_page")
    } == {"skipped"}
    folders = {k.rsplit("/", 2)[0] for k in pipeline.store.list_keys(ROLLUPS_PREFIX + "/")}
    assert len(folders) == 2  # one content folder per table
