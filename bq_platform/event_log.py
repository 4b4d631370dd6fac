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

It is configured by ``dagster.yaml`` (:func:`bq_platform.instance.ensure_dagster_yaml` writes
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
"""

import contextlib
import os
import threading
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from dagster._core.events import DagsterEventType
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._serdes import ConfigurableClassData

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
        statements = [self.prepare_insert_event(event) for event in events]
        run_written = False
        try:
            with self.run_connection(events[0].run_id) as conn:
                for statement in statements:
                    conn.execute(statement)
            run_written = True
            self._store_index(events, statements)
        except Exception:
            if kinds != {_CHECK_EVALUATION}:
                raise  # Dagster's handle_new_event stores the batch event by event
            # Held back by us: as Dagster would, one by one; the run's log only if it was not
            # written (each event once in it, as Dagster's store_event writes it).
            for event, statement in zip(events, statements, strict=True):
                if run_written:
                    self._store_index([event], [statement])
                else:
                    super().store_event(event)

    def _store_index(self, events: Sequence[EventLogEntry], statements: Sequence[Any]) -> None:
        """As store_event: each event mirrored in the index database, then its tags and the
        asset's row (asset events) or its check's execution row (``store_asset_check_event``,
        here on the same transaction: see :meth:`index_connection`)."""
        with self.index_transaction() as conn:
            self._batch_index = (threading.get_ident(), conn)
            try:
                for event, statement in zip(events, statements, strict=True):
                    event_id = conn.execute(statement).inserted_primary_key[0]
                    if event.dagster_event_type in _CHECK_EVENTS:
                        self.store_asset_check_event(event, event_id)
                    else:
                        self._store_asset_event_tags(conn, [event], [event_id])
                        self._store_asset_event(conn, event, event_id)
            finally:
                self._batch_index = None
