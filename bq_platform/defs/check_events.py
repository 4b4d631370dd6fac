"""Asset-check results reported on their partition, also from multi-partition runs.

An asset computes its checks' numbers while it materializes (the numbers are there), and a
run may cover 24 hourly partitions (the backfill policy). Dagster 1.13's ``AssetCheckResult``
takes the partition from the run's single ``dagster/partition`` tag, so in a range run it
would record one result with no partition ("Partition —" in the UI). Instead the asset yields
one ``dg.AssetCheckEvaluation(partition=...)`` per partition (the event ``AssetCheckResult``
becomes inside Dagster, see ``dagster/_core/definitions/asset_checks/asset_check_result.py``),
after one ``dg.Output`` per selected check so the step's check outputs exist. Blocking still
works: Dagster fails the step after it has recorded every failed blocking ERROR evaluation
(``execute_step.py``), so each failing hour is shown on its own partition and downstream
steps do not run.

Usage inside an ``@dg.asset`` with ``check_specs`` whose ``partitions_def`` is the asset's::

    return report(context, dg.MaterializeResult(metadata=...), [PartitionCheck(...), ...])

The asset body stays a plain function (it computes everything, so wrappers such as
``defs/errors.py::fail_fast`` see its exceptions) and returns the generator :func:`report`,
which Dagster iterates: the materialization is stored first, then each evaluation is linked to
the materialization of its partition.
"""

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

# Not re-exported by ``dagster``; it links an evaluation to the materialization it checked.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)


@dataclasses.dataclass(frozen=True)
class PartitionCheck:
    """One check's result on one partition.

    Attributes:
        check_name: name of an ``AssetCheckSpec`` of the asset.
        partition: partition key (``YYYY-MM-DDTHH`` or ``YYYY-MM-DD``).
        passed: the verdict.
        description: one line an operator reads first (what failed and what to do).
        metadata: numbers and names (see :func:`comparison`).
        severity: ``ERROR`` (default; blocks downstream if the spec is blocking) or ``WARN``.
        asset_key: the checked asset; default the executing asset.
    """

    check_name: str
    partition: str
    passed: bool
    description: str
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
    asset_key: dg.AssetKey | None = None


CheckedEvent = dg.MaterializeResult | dg.Output | dg.AssetCheckEvaluation
"""What an asset with partitioned checks yields."""


def comparison(expected: int | float, actual: int | float, **subject: Any) -> dict[str, Any]:
    """Check metadata in one shape: expected, actual, difference (actual - expected), then the
    file, table or job concerned (``subject``, e.g. ``file="gs://..."``, ``job_id="bqp_..."``).
    """
    difference = actual - expected
    if isinstance(difference, float):
        difference = round(difference, 6)
    return {"expected": expected, "actual": actual, "difference": difference, **subject}


def _target_data(record: Any) -> AssetCheckEvaluationTargetMaterializationData:
    return AssetCheckEvaluationTargetMaterializationData(
        run_id=record.event_log_entry.run_id,
        storage_id=record.storage_id,
        timestamp=record.timestamp,
    )


def _targets(
    context: dg.AssetExecutionContext, asset_key: dg.AssetKey, partitions: Iterable[str]
) -> dict[str, AssetCheckEvaluationTargetMaterializationData]:
    """The latest materialization of each of ``partitions`` (missing: never materialized).

    One event-log query for all of them, newest first, limited to their number: after the asset
    materialized them all in this step, those are exactly this step's records (a query per
    partition cost ~3 ms each, 288 per 72-hour run, issue 9). A partition the newest records
    miss (it was not materialized in this step) is looked up on its own.
    """
    wanted = sorted(set(partitions))
    found: dict[str, AssetCheckEvaluationTargetMaterializationData] = {}
    if not wanted:
        return found
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=wanted), limit=len(wanted)
    ).records
    for record in records:
        partition = record.partition_key
        if partition is not None and partition not in found:
            found[partition] = _target_data(record)
    for partition in wanted:
        if partition not in found:
            older = context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1
            ).records
            if older:
                found[partition] = _target_data(older[0])
    return found


def check_events(
    context: dg.AssetExecutionContext, checks: Iterable[PartitionCheck]
) -> Iterator[dg.Output | dg.AssetCheckEvaluation]:
    """Events that report ``checks`` on their partitions; yield them after the materialization.

    Results of checks that are not selected in this run are dropped (a run may select a
    subset of an asset's checks).

    Raises:
        ValueError: if a result names a check the asset does not have.
    """
    assets_def = context.assets_def
    known = {spec.key for spec in assets_def.node_check_specs_by_output_name.values()}
    selected = set(context.selected_asset_check_keys) & known
    for key in sorted(selected, key=lambda k: (k.asset_key.to_user_string(), k.name)):
        yield dg.Output(None, output_name=assets_def.get_output_name_for_asset_check_key(key))
    reported = []
    for check in checks:
        asset_key = check.asset_key or context.asset_key
        key = dg.AssetCheckKey(asset_key, check.check_name)
        if key not in known:
            raise ValueError(f"{asset_key.to_user_string()} has no check {check.check_name!r}")
        if key in selected:
            reported.append((key, check))
    targets = {
        asset_key: _targets(
            context, asset_key, (c.partition for k, c in reported if k.asset_key == asset_key)
        )
        for asset_key in {k.asset_key for k, _ in reported}
    }
    for key, check in reported:
        asset_key = key.asset_key
        spec = assets_def.get_spec_for_check_key(key)
        yield dg.AssetCheckEvaluation(
            asset_key=asset_key,
            check_name=check.check_name,
            passed=check.passed,
            metadata=dict(check.metadata),
            target_materialization_data=targets[asset_key].get(check.partition),
            severity=check.severity,
            description=check.description,
            blocking=spec.blocking,
            partition=check.partition,
        )


def report(
    context: dg.AssetExecutionContext,
    result: dg.MaterializeResult | Sequence[dg.MaterializeResult],
    checks: Iterable[PartitionCheck],
) -> Iterator[CheckedEvent]:
    """The materialization (or, from a multi-asset, one per asset, each with its
    ``asset_key``), then :func:`check_events` for ``checks`` (return it from the asset).

    Raises:
        ValueError: see :func:`check_events`.
    """
    checks = list(checks)
    yield from [result] if isinstance(result, dg.MaterializeResult) else result
    yield from check_events(context, checks)
