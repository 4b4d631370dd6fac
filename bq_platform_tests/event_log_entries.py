"""Dagster instances and event-log entries for the event-log tests: an instance on our batched
SQLite event log or on Dagster's own (:func:`instance_in`), one that counts the database files
it connects to (:func:`counting_instance`), the entries a run's steps write (materializations,
planned events, check evaluations), and what the UI reads back (asset rows, a check's history).
"""

import datetime as dt
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import (
    AssetMaterializationPlannedData,
    DagsterEventType,
    StepMaterializationData,
)

from bq_platform.event_log import BatchedSqliteEventLogStorage
from bq_platform.cli.instance import ensure_dagster_yaml

PLAIN_EVENT_LOG = """\
event_log_storage:
  module: dagster._core.storage.event_log
  class: SqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""


def instance_in(home: Path, plain: bool) -> dg.DagsterInstance:
    """A Dagster instance in ``home`` (created here): on our batched SQLite event log, or, with
    ``plain``, on Dagster's own in the same place."""
    home.mkdir()
    if plain:  # Dagster's own SQLite event log, in the same place
        (home / "dagster.yaml").write_text(
            PLAIN_EVENT_LOG.format(base_dir=home / "history" / "runs")
        )
    ensure_dagster_yaml(home)
    return dg.DagsterInstance.from_config(str(home))


def counting_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A batched instance and the list of database files it connects to, in order."""
    instance = instance_in(tmp_path / "home", plain=False)
    connections: list[str] = []
    connect = BatchedSqliteEventLogStorage._connect

    def counting(self, shard):
        connections.append(shard)
        return connect(self, shard)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_connect", counting)
    return instance, connections


def entry(run_id: str, event: dg.DagsterEvent | None, at: int = 0) -> dg.EventLogEntry:
    return dg.EventLogEntry(
        error_info=None,
        level="INFO",
        user_message="",
        run_id=run_id,
        timestamp=dt.datetime(2026, 1, 1, tzinfo=dt.UTC).timestamp() + at,
        dagster_event=event,
    )


def evaluation(run_id: str, hour: int, passed: bool = True) -> dg.EventLogEntry:
    """The event a step's ``dg.AssetCheckEvaluation`` for one hour becomes."""
    result = dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey("second"),
        check_name="complete",
        passed=passed,
        partition=f"2026-01-01-0{hour}:00",
    )
    event = dg.DagsterEvent(
        event_type_value=DagsterEventType.ASSET_CHECK_EVALUATION.value,
        job_name="hourly",
        event_specific_data=result,
    )
    return entry(run_id, event, at=hour)


def check_history(instance: dg.DagsterInstance) -> list[tuple[str | None, str]]:
    check = dg.AssetCheckKey(dg.AssetKey("second"), "complete")
    history = instance.event_log_storage.get_asset_check_execution_history(check, limit=100)
    return sorted((r.partition, r.status.value) for r in history)


def materialization(run_id: str, asset: str, hour: int, planned: bool = False) -> dg.EventLogEntry:
    """A step's materialization of ``asset`` for one hour, or the run's planned event for it."""
    key = f"2026-01-01-0{hour}:00"
    if planned:
        event = dg.DagsterEvent.build_asset_materialization_planned_event(
            "hourly", None, AssetMaterializationPlannedData(dg.AssetKey(asset), partition=key)
        )
        return entry(run_id, event, at=hour)
    kind = DagsterEventType.ASSET_MATERIALIZATION
    data = StepMaterializationData(dg.AssetMaterialization(asset, partition=key))
    event = dg.DagsterEvent(
        event_type_value=kind.value, job_name="hourly", event_specific_data=data
    )
    return entry(run_id, event, at=10 + hour)


def asset_rows(instance: dg.DagsterInstance) -> dict:
    """Each asset's row as the UI reads it: last materialization's partition, last run, time."""
    keys = [dg.AssetKey("first"), dg.AssetKey("second")]
    return {
        r.asset_entry.asset_key.to_user_string(): (
            r.asset_entry.last_materialization
            and r.asset_entry.last_materialization.dagster_event.partition,
            r.asset_entry.last_run_id,
            r.asset_entry.last_materialization_record
            and r.asset_entry.last_materialization_record.timestamp,
        )
        for r in instance.get_asset_records(keys)
    }
