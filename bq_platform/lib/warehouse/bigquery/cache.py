"""What one BigQuery warehouse object (one Dagster run) knows of its tables, so that a run
sends one metadata request per table.

Filled by the table resources BigQuery answers anyway (``tables.get``/``insert``/``patch``) and
by this object's jobs: a ``WRITE_TRUNCATE`` job sets the rows of its table, or of its
``$YYYYMMDD`` partition (the table's total is then unknown), to the job's output rows; an
``INSERT`` into the unpartitioned ledger adds its rows; any other write, or another run's job
that ended after the table was read, makes the rows unknown. A table another process drops
during the run is seen by the next run.
"""

import dataclasses
import datetime as dt
from typing import Any

from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.base import TableInfo


@dataclasses.dataclass
class CachedTable:
    """One table: UTC ``created``; ``rows`` (None: unknown); the ``resource`` of the last
    whole-table request (None if only a partition was read); ``known_since``, the UTC time it
    was last read or written; ``partitions``: UTC day -> rows."""

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
        """The table's rows changed (DML, or another run's job that ended at UTC ``since``):
        forget its counts, unless they were read after ``since``."""
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
