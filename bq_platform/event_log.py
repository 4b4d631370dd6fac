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
``ASSET_MATERIALIZATION_PLANNED`` and ``ASSET_CHECK_EVALUATION_PLANNED`` events take the
batched path; any other batch is stored event by event, as Dagster's base class does.
"""

import os
from collections.abc import Mapping, Sequence
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


class BatchedSqliteEventLogStorage(SqliteEventLogStorage):
    """``SqliteEventLogStorage`` whose ``store_event_batch`` commits a batch at once.

    Same files and schema as Dagster's default (``base_dir``, e.g.
    ``$DAGSTER_HOME/history/runs``): an instance can switch to it and back. A batch costs two
    transactions (plus one connection per planned asset check), whatever its length.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: a database error; Dagster then stores the batch event
            by event (``handle_new_event``). An error between the run database's commit and the
            index database's would leave the batch twice in the run's log; Dagster's own
            ``store_event`` has the same two commits per event.
    """

    def __init__(self, base_dir: str, inst_data: ConfigurableClassData | None = None) -> None:
        super().__init__(base_dir, inst_data=inst_data)
        os.environ.setdefault(BATCH_SIZE_ENV, DEFAULT_BATCH_SIZE)

    @classmethod
    def from_config_value(  # the parent's builds a SqliteEventLogStorage, not a subclass
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> "BatchedSqliteEventLogStorage":
        return cls(inst_data=inst_data, **config_value)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """Store ``events`` as ``store_event`` would, one after the other, in two transactions.

        A batch with events of several runs, or of a type outside the batched ones (see the
        module docstring), is stored event by event.
        """
        kinds = {event.dagster_event_type for event in events}
        if (
            not events
            or len({event.run_id for event in events}) != 1
            or not kinds <= _ASSET_EVENTS | {_CHECK_PLANNED}
        ):
            super().store_event_batch(events)
            return
        statements = [self.prepare_insert_event(event) for event in events]
        with self.run_connection(events[0].run_id) as conn:
            for statement in statements:
                conn.execute(statement)
        planned_checks = []
        # As store_event: each event mirrored in the index database, then (asset events) its
        # tags and the asset's row; a planned check's rows are written through a connection
        # of their own (store_asset_check_event opens one), so after this transaction.
        with self.index_transaction() as conn:
            for event, statement in zip(events, statements, strict=True):
                event_id = conn.execute(statement).inserted_primary_key[0]
                if event.dagster_event_type == _CHECK_PLANNED:
                    planned_checks.append((event, event_id))
                else:
                    self._store_asset_event_tags(conn, [event], [event_id])
                    self._store_asset_event(conn, event, event_id)
        for event, event_id in planned_checks:
            self.store_asset_check_event(event, event_id)
