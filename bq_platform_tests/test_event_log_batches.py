"""The batched SQLite event log's writes of a step's events: a run's check evaluations are held
and written together before its next event (or one by one when their batch fails), and a batch
writes each asset's row once per event type, as Dagster's own log ends it. What Dagster reads
back, transactions and engines: ``test_event_log.py``.
"""

from collections import Counter

import dagster as dg
import pytest
from dagster._core.events import (
    DagsterEventType,
)

from bq_platform.event_log import BatchedSqliteEventLogStorage
from bq_platform_tests.event_log_entries import (
    asset_rows,
    check_history,
    entry,
    evaluation,
    instance_in,
    materialization,
)


def test_a_runs_check_evaluations_are_written_together_before_its_next_event(counted):
    instance, connections = counted
    storage = instance.event_log_storage
    for hour in range(6):
        storage.store_event(evaluation("run-1", hour, passed=hour != 5))
    assert connections == []  # held back
    assert storage.get_logs_for_run("run-1") == []
    connections.clear()

    storage.store_event(entry("run-1", None, at=10))  # e.g. the step's STEP_SUCCESS

    # The six in two transactions (the run's log, the index with the checks' rows), then the
    # event itself: three connections against 3 x 6 + 1 one by one.
    assert connections == ["run-1", "index", "run-1"]
    logs = storage.get_logs_for_run("run-1")
    assert [e.dagster_event_type for e in logs] == [DagsterEventType.ASSET_CHECK_EVALUATION] * 6 + [
        None
    ]
    assert [e.timestamp for e in logs] == sorted(e.timestamp for e in logs)
    assert check_history(instance) == [(f"2026-01-01-0{h}:00", "SUCCEEDED") for h in range(5)] + [
        ("2026-01-01-05:00", "FAILED")
    ]


def test_held_evaluations_are_written_by_a_batch_or_dispose_and_runless_ones_at_once(
    counted, tmp_path
):
    instance, connections = counted
    storage = instance.event_log_storage
    storage.store_event(evaluation("run-1", 0))
    storage.store_event(evaluation("run-2", 1))
    storage.store_event_batch([evaluation("run-3", 2)])  # any batch writes what is held first
    assert connections[:4] == ["run-1", "index", "run-2", "index"]
    storage.store_event(evaluation("run-4", 3))
    storage.store_event(evaluation("", 4))  # runless (reported from outside a run): not held
    assert check_history(instance) == [(f"2026-01-01-0{h}:00", "SUCCEEDED") for h in range(5)]
    storage.store_event(evaluation("run-5", 5))
    assert len(check_history(instance)) == 5
    storage.dispose()
    reopened = dg.DagsterInstance.from_config(str(tmp_path / "home"))
    assert check_history(reopened) == [(f"2026-01-01-0{h}:00", "SUCCEEDED") for h in range(6)]


@pytest.mark.parametrize("failing", ["run_connection", "index_transaction"])
def test_held_evaluations_are_stored_one_by_one_when_their_batch_fails(
    counted, monkeypatch, failing
):
    """Whichever database's transaction fails, each evaluation ends up once in the run's log
    and once in the check's history."""
    instance, _ = counted
    storage = instance.event_log_storage
    failures = []
    transaction = getattr(BatchedSqliteEventLogStorage, failing)

    def failing_once(self, *args):
        if not failures:
            failures.append(1)
            raise RuntimeError("database is locked")
        return transaction(self, *args)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, failing, failing_once)
    for hour in range(3):
        storage.store_event(evaluation("run-1", hour))

    storage.flush()

    assert failures == [1]
    assert check_history(instance) == [(f"2026-01-01-0{h}:00", "SUCCEEDED") for h in range(3)]
    assert len(storage.get_logs_for_run("run-1")) == 3  # the run's log written once


def test_a_batch_writes_each_assets_row_once_per_event_type_as_dagster_ends_it(
    tmp_path, monkeypatch
):
    batched = instance_in(tmp_path / "batched", plain=False)
    plain = instance_in(tmp_path / "plain", plain=True)
    writes: Counter = Counter()
    store_asset_event = BatchedSqliteEventLogStorage._store_asset_event

    def counting(self, conn, event, event_id):
        writes[(event.dagster_event.asset_key.to_user_string(), event.dagster_event_type)] += 1
        return store_asset_event(self, conn, event, event_id)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "_store_asset_event", counting)
    planned = [
        materialization("run-1", a, h, planned=True) for h in range(3) for a in ("first", "second")
    ]
    done = [materialization("run-1", a, h) for h in (2, 0, 1) for a in ("second", "first")]

    for instance in (batched, plain):
        instance.event_log_storage.store_event_batch(planned)
        instance.event_log_storage.store_event_batch(done)

    # 12 events, 4 asset rows written: one per asset and event type, from the last of each.
    assert sum(writes.values()) == 4 and set(writes.values()) == {1}
    assert asset_rows(batched) == asset_rows(plain)
    assert asset_rows(batched)["first"][:2] == ("2026-01-01-01:00", "run-1")
    for key in ("first", "second"):
        asset = dg.AssetKey(key)
        assert sorted(batched.get_materialized_partitions(asset)) == [
            f"2026-01-01-0{h}:00" for h in range(3)
        ]
        ids = [r.storage_id for r in batched.fetch_materializations(asset, limit=10).records]
        assert ids == sorted(ids, reverse=True) and len(set(ids)) == 3  # each its own ID
