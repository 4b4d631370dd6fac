"""The publish ledger: one schema, append-only, read back latest-wins.

Every warehouse keeps ``_bq_platform_published``: one row per job that put content into a
destination partition. Rows are only appended and the latest row of a partition wins, because
BigQuery serializes UPDATE, DELETE and MERGE per table and fails the loser with "Could not
serialize access to table ... due to concurrent update" (wepay/kafka-connect-bigquery#279),
while INSERT statements do not conflict
(cloud.google.com/bigquery/docs/data-manipulation-language#concurrent_jobs).
"""

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from bq_platform.lib.warehouse.schema import Column, TableSpec

PUBLISH_LEDGER_TABLE = "_bq_platform_published"


@dataclasses.dataclass(frozen=True)
class PublishRecord:
    """What was last published into a destination partition, for later runs and auditors.

    Attributes:
        destination: table name, no decorator.
        partition: ``YYYYMMDD`` or ``YYYYMMDDHH``; ``""`` for a whole table.
        fingerprint: content fingerprint the job ID was built from.
        published_at: UTC time of the record.
    """

    destination: str
    partition: str
    job_id: str
    fingerprint: str
    rows: int
    published_at: dt.datetime


LEDGER_COLUMNS: tuple[Column, ...] = (
    Column("destination", "STRING", "REQUIRED", "Destination table, no decorator."),
    Column("partition_key", "STRING", "REQUIRED", "YYYYMMDD, YYYYMMDDHH or ''."),
    Column("job_id", "STRING", "REQUIRED", "Job that wrote the partition."),
    Column("fingerprint", "STRING", "REQUIRED", "Content fingerprint of the job ID."),
    Column("row_count", "INT64", "REQUIRED", "Rows the job wrote."),
    Column("published_at", "TIMESTAMP", "REQUIRED", "UTC time of the record."),
)


def publish_ledger_spec() -> TableSpec:
    """The ledger table's spec, the same in every warehouse."""
    return TableSpec(
        name=PUBLISH_LEDGER_TABLE,
        columns=LEDGER_COLUMNS,
        clustering=("destination", "partition_key"),
        labels={"app": "bq_platform", "role": "ledger"},
        description="Append-only: what bq_platform published into each destination partition; "
        "the latest row of a partition (by published_at) is current.",
    )


def to_row(record: PublishRecord) -> dict[str, Any]:
    """A :class:`PublishRecord` as a ledger row; ``ValueError`` if ``published_at`` is naive."""
    if record.published_at.tzinfo is None:
        raise ValueError(f"published_at must be timezone-aware UTC, got {record.published_at!r}")
    return {
        "destination": record.destination,
        "partition_key": record.partition,
        "job_id": record.job_id,
        "fingerprint": record.fingerprint,
        "row_count": int(record.rows),
        "published_at": record.published_at.astimezone(dt.UTC),
    }


def _order(row: Mapping[str, Any]) -> tuple[dt.datetime, str]:
    """The key "latest wins" orders ledger rows by: (UTC ``published_at``, job ID)."""
    stamp = row["published_at"]
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.astimezone(dt.UTC), row["job_id"]


def latest(rows: Iterable[Mapping[str, Any]]) -> PublishRecord | None:
    """The current :class:`PublishRecord` of some ledger rows (latest ``published_at``; ties
    broken by job ID, so every reader picks the same row), or None."""
    best = None
    for row in rows:
        key = _order(row)
        if best is None or key > best[0]:
            best = (key, row)
    if best is None:
        return None
    (stamp, _), row = best
    return PublishRecord(
        destination=row["destination"],
        partition=row["partition_key"],
        job_id=row["job_id"],
        fingerprint=row["fingerprint"],
        rows=int(row["row_count"]),
        published_at=stamp,
    )


class LedgerIndex:
    """The latest ledger row of each ``(destination, partition_key)``, in memory.

    A backend that reads the ledger once per warehouse object answers every lookup from it;
    rows it appends are added, so its own records are seen at once.
    """

    def __init__(self, rows: Iterable[Mapping[str, Any]] = ()) -> None:
        self._latest: dict[tuple[str, str], dict[str, Any]] = {}
        for row in rows:
            self.add(row)

    def __len__(self) -> int:
        return len(self._latest)

    def add(self, row: Mapping[str, Any]) -> None:
        """Take ``row`` into account (kept if it is the latest of its partition)."""
        key = (row["destination"], row["partition_key"])
        current = self._latest.get(key)
        if current is None or _order(row) > _order(current):
            self._latest[key] = dict(row)

    def rows(self, destination: str, partition: str) -> list[dict[str, Any]]:
        """The latest row of one destination partition as a one-element list, or ``[]``."""
        row = self._latest.get((destination, partition))
        return [] if row is None else [dict(row)]
