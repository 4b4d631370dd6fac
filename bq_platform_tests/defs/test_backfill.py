"""A backfill of two days: the runs a UI backfill launches under our backfill policies, executed
in process.

Dagster splits a backfill by each asset's ``BackfillPolicy`` inside its backfill daemon, which
has no public entry point. So this reads the policies from the definitions, splits the two days
by the policy's documented contract (runs of at most ``max_partitions_per_run`` consecutive
partitions, tagged with their partition range; no policy: one partition per run), and executes
those runs: 24 hours per run, one Spark session per run, every hour reported on its own.
"""

import datetime as dt

import dagster as dg
import pytest

from bq_platform.defs.automation import DAILY_SELECTION, HOURLY_SELECTION
from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform_tests.defs.conftest import CountingSparkResource, Pipeline

pytestmark = pytest.mark.spark
UTC = dt.UTC
DAYS = [dt.date(1995, 8, 1), dt.date(1995, 8, 2)]
RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def backfill_runs(
    pipeline: Pipeline, selection: dg.AssetSelection, keys: list[str]
) -> list[dict[str, str]]:
    """Partition tags of the runs a backfill of ``keys`` (in order) launches for ``selection``,
    under the one backfill policy its assets share (see the module docstring)."""
    definitions = pipeline.definitions
    assets = selection.resolve(definitions.resolve_asset_graph())
    (policy,) = {definitions.resolve_assets_def(key).backfill_policy for key in assets}
    if policy is None:
        return [{"dagster/partition": key} for key in keys]
    size = policy.max_partitions_per_run or len(keys)
    chunks = [keys[i : i + size] for i in range(0, len(keys), size)]
    return [{RANGE_START: chunk[0], RANGE_END: chunk[-1]} for chunk in chunks]


def test_hourly_assets_backfill_24_hours_per_run_and_daily_assets_one_day_per_run(
    pipeline: Pipeline,
):
    graph = pipeline.definitions.resolve_asset_graph()
    policies = {
        key.to_user_string(): pipeline.definitions.resolve_assets_def(key).backfill_policy
        for key in HOURLY_SELECTION.resolve(graph) | DAILY_SELECTION.resolve(graph)
    }
    assert policies == {
        "lake/pageview_files": dg.BackfillPolicy.multi_run(max_partitions_per_run=24),
        "warehouse/pageviews_stage": dg.BackfillPolicy.multi_run(max_partitions_per_run=24),
        "warehouse/pageviews_sample_stage": dg.BackfillPolicy.multi_run(max_partitions_per_run=24),
        "warehouse/pageviews_audit": dg.BackfillPolicy.multi_run(max_partitions_per_run=24),
        "warehouse/pageviews": None,
        "warehouse/pageviews_sample": None,
        "warehouse/pageview_deadletters": None,
        "warehouse/pageviews_daily_by_site": None,
        "warehouse/pageviews_daily_by_page": None,
        "reports/pageviews_completeness": None,
    }


def test_two_day_backfill_runs_one_spark_session_per_day_and_reports_every_hour(
    pipeline: Pipeline,
):
    for day in DAYS:
        pipeline.land(dt.datetime.combine(day, dt.time(7), UTC), 12)
    hours = [hour_label(h) for day in DAYS for h in day_hours(day)]

    hourly = backfill_runs(pipeline, HOURLY_SELECTION, hours)
    assert [(tags[RANGE_START], tags[RANGE_END]) for tags in hourly] == [
        ("1995-08-01T00", "1995-08-01T23"),
        ("1995-08-02T00", "1995-08-02T23"),
    ]
    results = [
        pipeline.definitions.resolve_job_def("pageviews_hourly_job").execute_in_process(
            instance=pipeline.instance, tags=tags
        )
        for tags in hourly
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

    daily = backfill_runs(pipeline, DAILY_SELECTION, [d.isoformat() for d in DAYS])
    assert [tags["dagster/partition"] for tags in daily] == ["1995-08-01", "1995-08-02"]
    for tags in daily:
        day = tags["dagster/partition"]
        result = pipeline.definitions.resolve_job_def("pageviews_daily_job").execute_in_process(
            instance=pipeline.instance, partition_key=day
        )
        checks = {
            (e.check_name, e.partition, e.passed) for e in result.get_asset_check_evaluations()
        }
        assert ("day_equals_sum_of_hours", day, True) in checks
        assert ("all_hours_complete", day, True) in checks
    # Each daily run sets Spark up too, for the rollups (its session starts at first use).
    assert len(CountingSparkResource.setups) == 4
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
