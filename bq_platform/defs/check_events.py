"""Asset-check results reported on their partition, also from runs over a partition range.

``dg.AssetCheckResult`` has no partition: Dagster takes the run's single partition, so a range
run (a backfill covers 24 hourly partitions per run) would record one result with none. Until
Dagster supports per-partition results there (dagster-io/dagster#17005, "Partitioned asset
checks"; dagster-io/dagster#21072, per-partition results from single-run backfills), the asset
yields one public ``dg.AssetCheckEvaluation(partition=...)`` per partition and check, after one
``dg.Output`` per selected check so the step's check outputs exist. Dagster still fails the
step after recording every failed blocking evaluation.

Each evaluation is linked to its partition's materialization, as Dagster links an
``AssetCheckResult`` (the UI's per-partition status counts only linked evaluations). Dagster
exports no constructor for that link, so :func:`_target` builds it with the public
``dg.deserialize_value``.

Use in an ``@dg.asset`` whose ``check_specs`` share its ``partitions_def``::

    return report(context, dg.MaterializeResult(metadata=...), [PartitionCheck(...), ...])
"""

import dataclasses
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import dagster as dg


@dataclasses.dataclass(frozen=True)
class PartitionCheck:
    """One check's result on one partition (``YYYY-MM-DDTHH`` or ``YYYY-MM-DD``):
    ``description`` is the line an operator reads first, ``metadata`` see :func:`comparison`,
    ``severity`` ``ERROR`` blocks if the spec is blocking, ``asset_key`` defaults to the
    executing asset."""

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
    file, table or job concerned (``subject``, e.g. ``file="gs://..."``)."""
    difference = actual - expected
    if isinstance(difference, float):
        difference = round(difference, 6)
    return {"expected": expected, "actual": actual, "difference": difference, **subject}


def _target(record: dg.EventLogRecord) -> Any:
    """The link from an evaluation to the materialization ``record`` (its run, storage ID and
    time), in the serialized form of ``AssetCheckEvaluation.target_materialization_data``."""
    return dg.deserialize_value(
        json.dumps(
            {
                "__class__": "AssetCheckEvaluationTargetMaterializationData",
                "run_id": record.run_id,
                "storage_id": record.storage_id,
                "timestamp": record.timestamp,
            }
        )
    )


def _targets(
    context: dg.AssetExecutionContext, asset_key: dg.AssetKey, partitions: Iterable[str]
) -> dict[str, Any]:
    """The link to each partition's latest materialization (missing: never materialized), in
    one query; a partition it misses is looked up alone."""
    wanted = sorted(set(partitions))
    found: dict[str, Any] = {}
    if not wanted:
        return found
    records = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=wanted), limit=len(wanted)
    ).records
    for record in records:
        partition = record.partition_key
        if partition is not None and partition not in found:
            found[partition] = _target(record)
    for partition in wanted:
        if partition not in found:
            older = context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition]), limit=1
            ).records
            if older:
                found[partition] = _target(older[0])
    return found


def check_events(
    context: dg.AssetExecutionContext, checks: Iterable[PartitionCheck]
) -> Iterator[dg.Output | dg.AssetCheckEvaluation]:
    """The events that report ``checks`` on their partitions, to yield after the
    materialization; results of checks not selected in the run are dropped. ValueError if a
    result names a check the asset does not have."""
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
    """The materialization (a multi-asset: one per asset), then :func:`check_events`."""
    checks = list(checks)
    yield from [result] if isinstance(result, dg.MaterializeResult) else result
    yield from check_events(context, checks)
