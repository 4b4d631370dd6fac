"""The one comparison of an existing table with its spec, used by every warehouse.

BigQuery's rules decide what may change in place (cloud.google.com/bigquery/docs/
managing-table-schemas): columns are matched by *position*; new columns may only be appended,
as NULLABLE; a column's name, type or mode cannot change (we treat relaxing REQUIRED as a
migration); partitioning cannot change (/bigquery/docs/managing-partitioned-tables);
clustering, ``require_partition_filter`` and labels can be patched
(/bigquery/docs/creating-clustered-tables#modifying-cluster-spec).
"""

import dataclasses
from collections.abc import Mapping

from bq_platform.lib.warehouse.schema import Column, TableSpec, normalize_mode, normalize_type


@dataclasses.dataclass(frozen=True)
class SpecDifference:
    """How an existing table differs from its spec.

    Attributes:
        errors: differences that cannot be applied in place (a migration is needed).
        added_columns: NULLABLE columns the spec appends; applied by a patch.
        patch_fields: layout fields to patch (``clustering``, ``require_partition_filter``,
            ``labels``), each mapped to the spec's value.
    """

    errors: tuple[str, ...]
    added_columns: tuple[Column, ...]
    patch_fields: Mapping[str, object]

    @property
    def needs_patch(self) -> bool:
        return not self.errors and bool(self.added_columns or self.patch_fields)


def compare(existing: TableSpec, wanted: TableSpec) -> SpecDifference:
    """Compare ``existing`` (as read back from the warehouse) with ``wanted``: columns by
    position, partitioning, clustering, ``require_partition_filter`` and the spec's labels
    (others' labels are kept); not descriptions or expiration. With ``errors``, nothing is
    to patch."""
    errors: list[str] = []
    have, want = list(existing.columns), list(wanted.columns)
    for index, column in enumerate(have):
        if index >= len(want):
            errors.append(f"column {column.name!r} exists in the table but not in the spec")
            continue
        got = (column.name, normalize_type(column.type), normalize_mode(column.mode))
        exp = (want[index].name, normalize_type(want[index].type), normalize_mode(want[index].mode))
        if got != exp:
            errors.append(f"column {index + 1} is {' '.join(got)}, the spec says {' '.join(exp)}")
    added = tuple(want[len(have) :])
    for column in added:
        if normalize_mode(column.mode) != "NULLABLE":
            errors.append(
                f"new column {column.name!r} is {column.mode}: only NULLABLE columns can be "
                "added to an existing table"
            )
    if existing.partition_field != wanted.partition_field:
        errors.append(
            f"partitioned on {existing.partition_field or 'nothing'}, the spec says "
            f"{wanted.partition_field or 'unpartitioned'} (partitioning cannot change in place)"
        )
    if errors:
        return SpecDifference(tuple(errors), (), {})
    patch: dict[str, object] = {}
    if tuple(existing.clustering) != tuple(wanted.clustering):
        patch["clustering"] = tuple(wanted.clustering)
    if existing.require_partition_filter != wanted.require_partition_filter:
        patch["require_partition_filter"] = wanted.require_partition_filter
    if any(existing.labels.get(k) != v for k, v in wanted.labels.items()):
        patch["labels"] = {**existing.labels, **wanted.labels}
    return SpecDifference((), added, patch)
