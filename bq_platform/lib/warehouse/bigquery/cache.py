"""What one :class:`~bq_platform.lib.warehouse.bigquery.warehouse.BigQueryWarehouse` object knows about
its tables, so that a run sends one table-metadata request per table (issue 9).

The cache lives as long as the warehouse object, i.e. one Dagster run. It is filled by the
table resources BigQuery answers anyway (``tables.get`` in ``ensure_table``, ``tables.insert``
when a table is created, ``tables.patch``) and by the jobs this object runs:

- a ``WRITE_TRUNCATE`` job that wrote a whole table sets the table's rows to the job's output
  rows (``statistics.load.outputRows``/``statistics.copy.copiedRows``);
- a ``WRITE_TRUNCATE`` job into ``table$YYYYMMDD`` sets that partition's rows; the table's
  total becomes unknown (fetched when asked);
- a one-row ``INSERT`` into the (unpartitioned) ledger adds one row;
- any other write this object makes (DML, ``WRITE_APPEND``, a job without output rows, a job
  of another run that it adopted) makes the table's rows unknown.

Anything unknown is fetched by the caller and then remembered. A change made by another
process during the run (a table dropped or expired mid-run) is seen by the next run's object;
the state machine's ``stale_reason`` runs with a fresh object per run, so an expired or
dropped stage table is still detected.
"""

import dataclasses
import datetime as dt
from typing import Any

from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.base import TableInfo


@dataclasses.dataclass
class CachedTable:
    """What is known of one table.

    Attributes:
        created: UTC creation time of the table.
        rows: rows in the whole table; None when unknown.
        resource: the table resource (a ``google.cloud.bigquery.Table``) as last answered by a
            whole-table request, for ``ensure_table``'s comparison; None if only a partition
            was read.
        known_since: local UTC time the entry was last read or written: a job of another run
            that ended after it may have changed the table.
        partitions: UTC day -> rows of that day partition.
    """

    created: dt.datetime
    rows: int | None
    resource: Any
    known_since: dt.datetime
    partitions: dict[dt.date, int] = dataclasses.field(default_factory=dict)


class TableCache:
    """Table name (no decorator) -> :class:`CachedTable`, for one warehouse object."""

    def __init__(self) -> None:
        self._tables: dict[str, CachedTable] = {}

    def remember(self, name: str, resource: Any) -> None:
        """Keep a whole table's resource (``tables.get``/``insert``/``patch`` answer)."""
        created = resource.created or dt.datetime.now(dt.UTC)
        self._tables[name] = CachedTable(
            created=created,
            rows=int(resource.num_rows or 0),
            resource=resource,
            known_since=dt.datetime.now(dt.UTC),
        )

    def remember_partition(self, name: str, day: dt.date, created: dt.datetime, rows: int) -> None:
        """Keep one day partition's rows (a ``tables.get`` of ``table$YYYYMMDD``)."""
        entry = self._tables.get(name)
        if entry is None:
            entry = CachedTable(created, None, None, dt.datetime.now(dt.UTC))
            self._tables[name] = entry
        entry.partitions[day] = rows

    def resource(self, name: str) -> Any:
        """The table's cached resource, or None."""
        entry = self._tables.get(name)
        return None if entry is None else entry.resource

    def info(self, destination: str) -> TableInfo | None:
        """The table's or partition's :class:`TableInfo` if known; None if it must be fetched."""
        name, day = rules.split_destination(destination)
        entry = self._tables.get(name)
        if entry is None:
            return None
        rows = entry.rows if day is None else entry.partitions.get(day)
        return None if rows is None else TableInfo(table=name, created=entry.created, rows=rows)

    def job_wrote(self, destination: str, disposition: str, rows: int | None) -> None:
        """A job this object ran wrote ``destination`` (``table`` or ``table$YYYYMMDD``)."""
        name, day = rules.split_destination(destination)
        entry = self._tables.get(name)
        if entry is None:
            return
        entry.known_since = dt.datetime.now(dt.UTC)
        exact = disposition == "WRITE_TRUNCATE" and rows is not None
        if day is None:
            entry.partitions.clear()
            entry.rows = rows if exact else None
            return
        entry.rows = None
        if exact:
            entry.partitions[day] = int(rows)
        else:
            entry.partitions.pop(day, None)

    def changed(self, name: str, since: dt.datetime | None = None) -> None:
        """The table's rows changed (DML, or a job of another run): forget its counts.

        Args:
            since: when the change happened (a job's end, UTC); counts read after it are kept.
        """
        entry = self._tables.get(name)
        if entry is None or (since is not None and since < entry.known_since):
            return
        entry.rows = None
        entry.partitions.clear()

    def appended(self, name: str, rows: int) -> None:
        """This object appended ``rows`` rows to an unpartitioned table (a one-row INSERT)."""
        entry = self._tables.get(name)
        if entry is not None and entry.rows is not None:
            entry.rows += rows
            entry.known_since = dt.datetime.now(dt.UTC)

    def forget(self, name: str) -> None:
        """Forget everything about the table (dropped)."""
        self._tables.pop(name, None)
