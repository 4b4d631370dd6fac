"""The local instance's event log: Dagster's SQLite event log, writing a batch of asset events
in one transaction per database file instead of one per event.

Why (issue 9, docs/PERFORMANCE.md, "Dagster's asset events in batches"): a 72-hour hourly run
of ``bq-platform run`` stores ~300 ``ASSET_MATERIALIZATION_PLANNED`` events before its first
step, then 72 materializations per asset step. Dagster hands such events to
``EventLogStorage.store_event_batch`` when ``DAGSTER_EVENT_BATCH_SIZE`` is above 0
(``dagster/_core/instance/methods/event_methods.py``, ``handle_new_event``; the batchable types
are ``dagster._core.events.BATCH_WRITABLE_EVENTS``). ``dagster-postgres`` writes a batch at
once, but ``SqliteEventLogStorage`` inherits the base class's loop over ``store_event``, which
for each event creates an engine and commits once in the run's database and once in the
cross-run index database (~7 ms an event here). :class:`BatchedSqliteEventLogStorage` runs
the same statements as ``SqliteEventLogStorage.store_event``, in the same order, inside one
transaction on the run's database and one on the index database. Measured on the bench's 1x
landing zone (``scripts/event_log_ab.py``): the planned events 1.8-2.4 s -> 0.4-0.7 s, the audit
step's 72 materializations 0.5-0.66 s -> 0.2 s.

It is configured by ``dagster.yaml`` (:func:`bq_platform.cli.instance.ensure_dagster_yaml` writes
it for a local instance; a deployment on Postgres keeps Dagster's own storage and batches too).
Building it sets ``DAGSTER_EVENT_BATCH_SIZE`` (unless the environment sets it), so every
process that opens the instance (``bq-platform``, ``dagster dev``, its run workers) batches.

Scope: only batches of one run's ``ASSET_MATERIALIZATION``, ``ASSET_OBSERVATION``,
``ASSET_MATERIALIZATION_PLANNED`` and ``ASSET_CHECK_EVALUATION_PLANNED`` events, and the
check evaluations held back (below), take the batched path; any other batch is stored event by
event, as Dagster's base class does.

Check evaluations are batched here, not by Dagster: its executor stores every
``ASSET_CHECK_EVALUATION`` on its own (they are not in ``BATCH_WRITABLE_EVENTS``), and each
costs three SQLite transactions (the run's log, the index's copy, the check's execution row):
~8 ms, 288 of them in a 72-hour hourly run of ``bq-platform run`` (a step reports 72-144 at its
end, one per partition and check; ``defs/check_events.py``). The storage holds a run's
evaluations back and writes them in one transaction per database as soon as any other event
is stored (in a step: its ``STEP_SUCCESS`` or ``STEP_FAILURE``, which always follows them),
when it holds :data:`DEFAULT_BATCH_SIZE` of them, or when the storage is disposed. So the log
keeps its order and a step never shows success before its checks. What this changes: a reader
sees a step's evaluations together, at the step's next event, not one by one; a process killed
in between (``kill -9``) loses them with the step, which then has not succeeded and is run
again. Measured in docs/PERFORMANCE.md ("Check evaluations in batches, local listings on the
driver, rejected samples apart").

Schema questions answered once: for every asset event and check evaluation, Dagster asks
whether the tables and columns newer migrations add exist (``has_table``, which opens a new
engine on the index database, and an inspection of the asset-key table's columns).
:class:`BatchedSqliteEventLogStorage` remembers each True answer for its lifetime (a missing
table is asked again, so a migration is seen at once): ~1.5 s of a 1x ``bq-platform run`` on
a slow machine (docs/PERFORMANCE.md, "The landing scan off pathlib, Dagster's schema
questions once").

A batch in few statements: its rows go into each database by one ``executemany`` (the index's
returns the storage IDs, in order), its asset events' tags by one more, and each asset's row is
written once per event type, from the batch's last event (see :meth:`_store_index`), where
Dagster builds, compiles and runs one statement per event, and five for a materialization.

One engine and one open connection per database file: Dagster's
``SqliteEventLogStorage._connect`` builds a new SQLAlchemy engine for every transaction, with
``NullPool``, and disposes of it after. So SQLAlchemy's compiled-statement cache, which lives on
the engine, never hits (every event's ``INSERT`` is compiled again), and every transaction ends
by closing the database's last connection, on which SQLite checkpoints the whole WAL into the
database file and removes it (https://www.sqlite.org/wal.html; SQLite's ``test/nockpt.test``
checks that the WAL is gone after the close): a checkpoint and its fsync per transaction, ~0.2 s
after a step's 144 check evaluations (issue 9). :class:`BatchedSqliteEventLogStorage` keeps the
engine of each of the last :data:`ENGINES_KEPT` database files it connected to, each pooling one
idle connection. An idle connection holds no lock (other processes, e.g. ``dagster dev``'s, read
and write as before); SQLite checkpoints when the WAL reaches 1000 pages, and when the storage
is disposed. Durability is unchanged (Dagster's WAL mode, ``synchronous`` FULL: a commit is on
disk when it returns, so ``kill -9`` loses nothing committed). :meth:`wipe`, which deletes the
runs' files, first closes the connections.

Both measured in docs/PERFORMANCE.md ("A batch of events in one statement, one engine per
event-log database"): a 72-hour step's 72 materializations 130 -> 42 ms, a 1x ``bq-platform
run``'s 977 events replayed 2.2-2.4 -> 1.3 s.
"""

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import SqlEventLogStorageTable
from dagster._core.storage.sql import create_engine
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import QueuePool

#: Dagster's switch for batched event writes (``dagster/_core/instance/utils.py``): events are
#: buffered per batch until it ends or holds this many. A 7-day batch of ``bq-platform run``
#: plans 4 hourly assets x 168 hours = 672 events; one step materializes at most 168.
BATCH_SIZE_ENV = "DAGSTER_EVENT_BATCH_SIZE"
DEFAULT_BATCH_SIZE = "1000"

_ASSET_EVENTS = frozenset(
    {
        DagsterEventType.ASSET_MATERIALIZATION,
        DagsterEventType.ASSET_OBSERVATION,
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
    }
)
_CHECK_PLANNED = DagsterEventType.ASSET_CHECK_EVALUATION_PLANNED
_CHECK_EVALUATION = DagsterEventType.ASSET_CHECK_EVALUATION
#: The most check evaluations held back before they are written anyway.
_MAX_HELD = int(DEFAULT_BATCH_SIZE)
_CHECK_EVENTS = frozenset({_CHECK_PLANNED, _CHECK_EVALUATION})
_BATCHED = _ASSET_EVENTS | _CHECK_EVENTS
#: Engines kept, one per database file (the index and the most recent runs'): a process that
#: reads many runs (the webserver) keeps at most this many, and as many idle connections.
ENGINES_KEPT = 16


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` whose ``store_event_batch`` commits a batch at once.

    Same files and schema as Dagster's default (``base_dir``, e.g.
    ``$DAGSTER_HOME/history/runs``): an instance can switch to it and back. A batch costs two
    transactions whatever its length (a check's execution rows are written on the index
    transaction); so do a run's check evaluations held back until its next event (see the
    module docstring).

    Raises:
        sqlalchemy.exc.SQLAlchemyError: a database error; Dagster then stores the batch event
            by event (``handle_new_event``), and held-back check evaluations are stored one by
            one (into the index only, when the run's log already holds them). For Dagster's
            batches, an error between the run database's commit and the index database's would
            leave the batch twice in the run's log; Dagster's own ``store_event`` has the same
            two commits per event.
    """

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        self._held: list[EventLogEntry] = []  # check evaluations not yet written
        self._held_lock = threading.RLock()
        # The index transaction of a batch, for store_asset_check_event's own connections.
        self._batch_index: tuple[int, Any] | None = None
        # Schema answers that stay true (see has_table): table names, asset-key columns.
        self._tables_found: set[str] = set()
        self._asset_key_columns_found: set[str] = set()
        self._engines: OrderedDict[str, Engine] = OrderedDict()  # by shard, most recent last
        super().__init__(base_dir, inst_data=inst_data)  # opens the index: the above first
        os.environ.setdefault(BATCH_SIZE_ENV, DEFAULT_BATCH_SIZE)

    @classmethod
    def from_config_value(  # the parent's builds a SqliteEventLogStorage, not a subclass
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "BatchedSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    def store_event(self, event: EventLogEntry) -> None:
        """Store ``event``; a run's check evaluation is held back (see the module docstring),
        any other event is stored after the evaluations held before it."""
        with self._held_lock:
            if event.dagster_event_type == _CHECK_EVALUATION and event.run_id:
                self._held.append(event)
                if len(self._held) >= _MAX_HELD:
                    self.flush()
                return
            self.flush()
            super().store_event(event)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Store ``events`` as ``store_event`` would, one after the other, in two transactions.

        A batch with events of several runs, or of a type outside the batched ones (see the
        module docstring), is stored event by event.
        """
        with self._held_lock:
            self.flush()
            self._store_batch(events)

    def flush(self) -> None:
        """Write the check evaluations held back, in order, one batch per run."""
        with self._held_lock:
            held, self._held = self._held, []
            start = 0
            for end in range(1, len(held) + 1):  # runs of consecutive events of one run
                if end == len(held) or held[end].run_id != held[start].run_id:
                    self._store_batch(held[start:end])
                    start = end

    def dispose(self) -> None:
        """Write what is held back, then Dagster's ``dispose``."""
        self.flush()
        super().dispose()
        self._close_engines()

    def wipe(self) -> None:
        """Dagster's ``wipe`` (deletes the runs' database files, empties the index), after the
        kept connections are closed: none is left on a deleted file."""
        self._close_engines()
        super().wipe()

    def _close_engines(self) -> None:
        with self._db_lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.dispose()  # closes its idle connection: SQLite checkpoints the WAL

    def has_table(self, table_name: str) -> bool:
        """Dagster's answer, remembered once it is True.

        Dagster asks it for every asset event and check evaluation it stores
        (``_store_asset_event_tags``, ``supports_asset_checks``: tables a migration may not yet
        have created), and ``SqliteEventLogStorage.has_table`` opens a new engine and
        connection on the index database each time: ~1.5 s of a 1x ``bq-platform run``'s
        ~1,000 events on a slow machine (issue 9, docs/PERFORMANCE.md). A table that exists
        stays (migrations add tables, nothing here drops one), so only a missing table is
        asked again.
        """
        if table_name in self._tables_found:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables_found.add(table_name)
        return found

    def _has_asset_key_col_on_connection(self, conn: Any, column_name: str) -> bool:
        """Dagster's answer (an inspection of the asset-key table's columns on each asset
        event), remembered once it is True, as :meth:`has_table`."""
        if column_name in self._asset_key_columns_found:
            return True
        found = super()._has_asset_key_col_on_connection(conn, column_name)
        if found:
            self._asset_key_columns_found.add(column_name)
        return found

    @contextlib.contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        """Dagster's ``_connect`` (a connection to ``shard``'s database, in a transaction
        committed on exit, under the storage's lock; the database created on first use), on
        the shard's kept engine instead of a new one (see the module docstring)."""
        with self._db_lock:
            engine = self._engines.pop(shard, None)
            if engine is None:
                engine = create_engine(
                    self.conn_string_for_shard(shard),
                    poolclass=QueuePool,
                    pool_size=1,  # one idle connection kept (see the module docstring)
                    # used by one thread at a time (under _db_lock), not always the same one
                    connect_args={
                        "timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                        "check_same_thread": False,
                    },
                )
            self._engines[shard] = engine
            while len(self._engines) > ENGINES_KEPT:
                self._engines.popitem(last=False)[1].dispose()
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def index_connection(self) -> AbstractContextManager[Any]:
        """Dagster's index connection, or the open transaction of a batch on its own thread
        (``store_asset_check_event`` opens an index connection per event otherwise)."""
        batch = self._batch_index
        if batch is not None and batch[0] == threading.get_ident():
            return contextlib.nullcontext(batch[1])
        return super().index_connection()

    def _store_batch(self, events: Sequence[EventLogEntry]) -> None:
        if not events:
            return
        kinds = {event.dagster_event_type for event in events}
        if len({event.run_id for event in events}) != 1 or not kinds <= _BATCHED:
            for event in events:  # as Dagster's base class does
                super().store_event(event)
            return
        # The rows prepare_insert_event would insert, each written by one executemany.
        rows = [self._event_to_row(event) for event in events]
        run_written = False
        try:
            with self.run_connection(events[0].run_id) as conn:
                conn.execute(SqlEventLogStorageTable.insert(), rows)
            run_written = True
            self._store_index(events, rows)
        except Exception:
            if kinds != {_CHECK_EVALUATION}:
                raise  # Dagster's handle_new_event stores the batch event by event
            # Held back by us: as Dagster would, one by one; the run's log only if it was not
            # written (each event once in it, as Dagster's store_event writes it).
            for event, row in zip(events, rows, strict=True):
                if run_written:
                    self._store_index([event], [row])
                else:
                    super().store_event(event)

    def _store_index(self, events: Sequence[EventLogEntry], rows: Sequence[Any]) -> None:
        """As store_event: the events mirrored in the index database (one executemany, their
        storage IDs returned in order), then the asset events' tags, each check evaluation's
        execution row (``store_asset_check_event``, here on the same transaction: see
        :meth:`index_connection`) and each asset's row.

        An asset's row (``_store_asset_event``: its last materialization, last run, last event
        time) is written once per asset and event type, from the batch's last such event:
        Dagster writes it for every event, each write replacing the columns the one before
        wrote, so the row ends the same. With the one ``executemany``, a 72-hour step's 72
        materializations take 40-43 ms instead of 149-153 (issue 9, docs/PERFORMANCE.md).
        """
        insert = SqlEventLogStorageTable.insert().returning(
            SqlEventLogStorageTable.c.id, sort_by_parameter_order=True
        )
        with self.index_transaction() as conn:
            self._batch_index = (threading.get_ident(), conn)
            try:
                event_ids = [row[0] for row in conn.execute(insert, rows)]
                asset_events: list[EventLogEntry] = []
                asset_ids: list[int] = []
                last: dict[tuple[Any, Any], tuple[EventLogEntry, int]] = {}
                for event, event_id in zip(events, event_ids, strict=True):
                    if event.dagster_event_type in _CHECK_EVENTS:
                        self.store_asset_check_event(event, event_id)
                        continue
                    asset_events.append(event)
                    asset_ids.append(event_id)
                    kind = (event.get_dagster_event().asset_key, event.dagster_event_type)
                    last.pop(kind, None)  # re-inserted: the dict keeps the order of the lasts
                    last[kind] = (event, event_id)
                self._store_asset_event_tags(conn, asset_events, asset_ids)
                for event, event_id in last.values():
                    self._store_asset_event(conn, event, event_id)
            finally:
                self._batch_index = None
