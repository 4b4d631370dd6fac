"""Check results of a run over a partition range: each on its own partition, linked to that
partition's materialization, and a failed blocking check stops downstream steps."""

import dagster as dg
import pytest

from bq_platform.defs.check_events import PartitionCheck, report

HOURS = dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00")
RANGE = ("2026-01-01-00:00", "2026-01-01-05:00")  # 6 hours, one run
BAD_HOUR = "2026-01-01-03:00"


def hourly_assets(checks: str = "complete") -> list[dg.AssetsDefinition]:
    """``checked`` with a blocking check ``complete`` that fails on BAD_HOUR, then
    ``downstream``; ``checks`` names the check ``checked`` reports."""

    @dg.multi_asset(
        specs=[dg.AssetSpec("checked")],
        partitions_def=HOURS,
        backfill_policy=dg.BackfillPolicy.single_run(),
        check_specs=[
            dg.AssetCheckSpec("complete", asset="checked", partitions_def=HOURS, blocking=True)
        ],
        can_subset=True,  # a run may leave the checks out
    )
    def checked(context: dg.AssetExecutionContext):
        results = [
            PartitionCheck(checks, key, passed=key != BAD_HOUR, description=key)
            for key in context.partition_keys
        ]
        return report(context, dg.MaterializeResult(), results)

    @dg.asset(
        partitions_def=HOURS, deps=["checked"], backfill_policy=dg.BackfillPolicy.single_run()
    )
    def downstream() -> None:
        pass

    return [checked, downstream]


RANGE_TAGS = {
    "dagster/asset_partition_range_start": RANGE[0],
    "dagster/asset_partition_range_end": RANGE[1],
}


def run_range(instance: dg.DagsterInstance, checks: str = "complete", selection=None):
    return dg.materialize(
        hourly_assets(checks),
        selection=selection,
        instance=instance,
        tags=RANGE_TAGS,
        raise_on_error=False,
    )


def test_each_partition_gets_its_result_linked_to_its_materialization_and_blocking_holds():
    hours = HOURS.get_partition_keys_in_range(dg.PartitionKeyRange(*RANGE))
    with dg.instance_for_test() as instance:
        result = run_range(instance)

        evaluations = result.get_asset_check_evaluations()
        assert sorted((e.partition, e.passed) for e in evaluations) == [
            (hour, hour != BAD_HOUR) for hour in hours
        ]
        assert all(e.blocking and e.description == e.partition for e in evaluations)
        records = instance.fetch_materializations(dg.AssetKey("checked"), limit=100).records
        materialization = {r.partition_key: r.storage_id for r in records}
        assert sorted(materialization) == hours
        for e in evaluations:
            target = e.target_materialization_data
            assert target is not None and target.run_id == result.run_id
            assert target.storage_id == materialization[e.partition]

        assert not result.success  # the failed blocking check fails the step
        assert not instance.get_materialized_partitions(dg.AssetKey("downstream"))


def test_a_check_the_asset_does_not_have_is_refused():
    with dg.instance_for_test() as instance:
        result = run_range(instance, checks="no_such_check")
    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    assert "checked has no check 'no_such_check'" in failure.step_failure_data.error.to_string()


@pytest.mark.parametrize("selected", [True, False])
def test_only_selected_checks_are_reported(selected: bool):
    selection = dg.AssetSelection.assets("checked")
    with dg.instance_for_test() as instance:
        result = run_range(
            instance, selection=selection if selected else selection.without_checks()
        )
    assert len(result.get_asset_check_evaluations()) == (6 if selected else 0)
    assert result.success is not selected
