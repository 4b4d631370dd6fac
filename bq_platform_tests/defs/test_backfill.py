"""A backfill of two days: the runs Dagster's backfill daemon would launch, executed in process.

The run requests come from ``build_run_requests_with_backfill_policies``, the function the
asset backfill daemon uses (``dagster/_core/execution/asset_backfill.py``) to split a backfill
by each asset's ``BackfillPolicy``; so this checks our policy (24 hours per run) the way a UI
backfill applies it.
"""

import datetime as dt

import dagster as dg
import pytest

# Private, but it is exactly what a UI backfill runs to chunk partitions by backfill policy.
from dagster._core.definitions.automation_tick_evaluation_context import (
    build_run_requests_with_backfill_policies,
)
from dagster._core.definitions.events import AssetKeyPartitionKey

from bq_platform.defs.automation import DAILY_SELECTION, HOURLY_SELECTION
from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform_tests.defs.conftest import CountingSparkResource, Pipeline

pytestmark = pytest.mark.spark
UTC = dt.UTC
DAYS = [dt.date(1995, 8, 1), dt.date(1995, 8, 2)]


def backfill_requests(
    pipeline: Pipeline, selection: dg.AssetSelection, keys: list[str]
) -> list[dg.RunRequest]:
    graph = pipeline.definitions.resolve_asset_graph()
    assets = selection.resolve(graph)
    return list(
        build_run_requests_with_backfill_policies(
            [AssetKeyPartitionKey(a, k) for a in assets for k in keys], graph, pipeline.instance
        )
    )


def test_two_day_backfill_runs_one_spark_session_per_day_and_reports_every_hour(
    pipeline: Pipeline,
):
    for day in DAYS:
        pipeline.land(dt.datetime.combine(day, dt.time(7), UTC), 12)
    hours = [hour_label(h) for day in DAYS for h in day_hours(day)]

    hourly = backfill_requests(pipeline, HOURLY_SELECTION, hours)
    assert [
        (r.tags["dagster/asset_partition_range_start"], r.tags["dagster/asset_partition_range_end"])
        for r in hourly
    ] == [("1995-08-01T00", "1995-08-01T23"), ("1995-08-02T00", "1995-08-02T23")]
    results = [
        pipeline.definitions.resolve_job_def("pageviews_hourly_job").execute_in_process(
            instance=pipeline.instance,
            tags=r.tags,
            asset_selection=r.asset_selection,
        )
        for r in hourly
    ]
    # One Spark session set up per run, one run per day.
    assert len(CountingSparkResource.setups) == 2
    assert CountingSparkResource.setups == [r.run_id for r in results]

    # Each hour's check result is reported on its own partition, one per hour.
    for result, day in zip(results, DAYS, strict=True):
        evaluations = result.get_asset_check_evaluations()
        by_check: dict[tuple[str, str], list[str]] = {}
        for e in evaluations:
            key = (e.asset_key.to_user_string(), e.check_name)
            by_check.setdefault(key, []).append(e.partition)
        want = [hour_label(h) for h in day_hours(day)]
        assert sorted(by_check[("lake/pageview_files", "accounting_identity")]) == want
        assert sorted(by_check[("warehouse/pageviews_stage", "stage_matches_manifest")]) == want
        assert all(e.passed for e in evaluations)
        # each evaluation is linked to its own partition's materialization in this run
        for asset_key in {e.asset_key for e in evaluations}:
            records = pipeline.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=want), limit=100
            ).records
            partition_of = {r.storage_id: (r.partition_key, r.run_id) for r in records}
            for e in (e for e in evaluations if e.asset_key == asset_key):
                target = e.target_materialization_data
                assert target is not None and target.run_id == result.run_id
                assert partition_of[target.storage_id] == (e.partition, result.run_id)
        metadata = evaluations[0].metadata
        assert {"expected", "actual", "difference"} <= metadata.keys()
        _each_hour_has_its_own_numbers(pipeline, day)

    daily = backfill_requests(pipeline, DAILY_SELECTION, [d.isoformat() for d in DAYS])
    assert sorted(r.partition_key for r in daily) == ["1995-08-01", "1995-08-02"]
    for r in daily:
        result = pipeline.definitions.resolve_job_def("pageviews_daily_job").execute_in_process(
            instance=pipeline.instance,
            partition_key=r.partition_key,
            asset_selection=r.asset_selection,
        )
        checks = {
            (e.check_name, e.partition, e.passed) for e in result.get_asset_check_evaluations()
        }
        assert ("day_equals_sum_of_hours", r.partition_key, True) in checks
        assert ("all_hours_complete", r.partition_key, True) in checks
    assert len(CountingSparkResource.setups) == 2  # publishing starts no Spark session
    rows = pipeline.query("SELECT event_date, count(*) AS n FROM pageviews GROUP BY 1 ORDER BY 1")
    assert [(r["event_date"], r["n"]) for r in rows] == [(DAYS[0], 12), (DAYS[1], 12)]


def _each_hour_has_its_own_numbers(pipeline: Pipeline, day: dt.date) -> None:
    """A range run records one materialization per hour, each with that hour's numbers (12
    pages landed at 07:00, none at 06:00) and the step's totals under ``step_totals``."""
    for asset in ("lake/pageview_files", "warehouse/pageviews_stage", "warehouse/pageviews_audit"):
        got = {}
        for hour in (6, 7):
            label = f"{day}T{hour:02d}"
            records = pipeline.instance.fetch_materializations(
                dg.AssetRecordsFilter(
                    asset_key=dg.AssetKey.from_user_string(asset), asset_partitions=[label]
                ),
                limit=1,
            ).records
            metadata = records[0].asset_materialization.metadata  # type: ignore[union-attr]
            got[hour] = {k: getattr(v, "value", v) for k, v in metadata.items()}
        rows = "source_lines" if asset.endswith("audit") else "rows"
        assert (got[6][rows], got[7][rows]) == (0, 12), asset
        assert got[6]["step_totals"] == got[7]["step_totals"], asset
        assert got[7]["step_totals"]["hours"] == 24 and got[7]["step_totals"][rows] == 12, asset
    (stage,) = pipeline.instance.fetch_materializations(
        dg.AssetRecordsFilter(
            asset_key=dg.AssetKey(["warehouse", "pageviews_stage"]),
            asset_partitions=[f"{day}T07"],
        ),
        limit=1,
    ).records
    metadata = stage.asset_materialization.metadata  # type: ignore[union-attr]
    assert metadata["table"].value == f"pageviews_stage_{day:%Y%m%d}07"
    assert metadata["job_action"].value == "submitted"
