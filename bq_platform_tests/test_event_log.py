"""The batched SQLite event log: what Dagster reads back is what its own SQLite log gives, and a
run's planned events and a step's per-partition materializations are written as batches."""

import os
from collections import Counter
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import (
    DagsterEventType,
    StepMaterializationData,
)

from bq_platform.defs.check_events import PartitionCheck, report
from bq_platform.event_log import BATCH_SIZE_ENV, BatchedSqliteEventLogStorage
from bq_platform_tests.event_log_entries import (
    entry,
    instance_in,
)

HOURS = dg.HourlyPartitionsDefinition(start_date="2026-01-01-00:00")
RANGE = ("2026-01-01-00:00", "2026-01-01-05:00")  # 6 hours, one run


def hourly_job(fail: bool = False) -> dg.JobDefinition:
    """Two hourly assets over a range of hours in one run (like the hourly job), the second with
    a partitioned asset check; ``fail``: the second raises."""

    @dg.asset(partitions_def=HOURS, backfill_policy=dg.BackfillPolicy.single_run())
    def first(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
        for key in context.partition_keys:
            context.add_asset_metadata({"hour": key}, partition_key=key)
        return dg.MaterializeResult(
            metadata={"hours": len(context.partition_keys)}, data_version=dg.DataVersion("v1")
        )

    @dg.asset(
        partitions_def=HOURS,
        deps=[first],
        backfill_policy=dg.BackfillPolicy.single_run(),
        check_specs=[dg.AssetCheckSpec("complete", asset="second", partitions_def=HOURS)],
    )
    def second(context: dg.AssetExecutionContext):
        if fail:
            raise RuntimeError("hour failed")
        checks = [
            PartitionCheck("complete", key, passed=key != RANGE[1], description=key)
            for key in context.partition_keys
        ]
        return report(context, dg.MaterializeResult(), checks)

    defs = dg.Definitions(assets=[first, second], jobs=[dg.define_asset_job("hourly", "*")])
    return defs.resolve_job_def("hourly")


def run_range(instance: dg.DagsterInstance, fail: bool = False) -> dg.ExecuteInProcessResult:
    return hourly_job(fail).execute_in_process(
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": RANGE[0],
            "dagster/asset_partition_range_end": RANGE[1],
        },
        raise_on_error=False,
    )


def what_dagster_reads(instance: dg.DagsterInstance, run_id: str) -> dict:
    """Everything the UI shows of the run and its assets, without IDs and timestamps."""
    keys = HOURS.get_partition_keys_in_range(dg.PartitionKeyRange(*RANGE))
    out: dict = {
        "log": [
            (e.dagster_event_type, e.step_key, e.dagster_event and e.dagster_event.partition)
            for e in instance.all_logs(run_id)
        ]
    }
    for name in ("first", "second"):
        key = dg.AssetKey(name)
        records = instance.fetch_materializations(key, limit=100).records
        (entry,) = [r.asset_entry for r in instance.get_asset_records([key])]
        last = entry.last_materialization
        out[name] = {
            "last": (last.dagster_event.partition if last else None, entry.last_run_id == run_id),
            # indexed tags: the data version (second's is derived from storage IDs, so not here)
            "tags": instance.event_log_storage.get_event_tags_for_asset(key)
            if name == "first"
            else None,
            "materialized": sorted(instance.get_materialized_partitions(key)),
            "status": instance.get_status_by_partition(key, keys, HOURS),
            "records": sorted(
                (r.partition_key, dict(r.asset_materialization.metadata)) for r in records
            ),
            "planned": sorted(
                r.partition_key
                for r in instance.fetch_planned_materializations(key, limit=100).records
            ),
        }
    check = dg.AssetCheckKey(dg.AssetKey("second"), "complete")
    history = instance.event_log_storage.get_asset_check_execution_history(check, limit=100)
    out["checks"] = sorted((r.partition, r.status.value) for r in history)
    return out


@pytest.mark.parametrize("fail", [False, True], ids=["succeeds", "fails"])
def test_what_dagster_reads_back_is_what_its_own_sqlite_log_gives(tmp_path, monkeypatch, fail):
    monkeypatch.delenv(BATCH_SIZE_ENV, raising=False)  # conftest restores what the test changes
    batched = instance_in(tmp_path / "batched", plain=False)  # sets DAGSTER_EVENT_BATCH_SIZE
    plain = instance_in(tmp_path / "plain", plain=True)
    assert type(batched.event_log_storage) is BatchedSqliteEventLogStorage
    assert type(plain.event_log_storage) is not BatchedSqliteEventLogStorage
    stored_one_by_one: Counter = Counter()
    one_by_one = BatchedSqliteEventLogStorage.store_event

    def store_event(self, event):
        stored_one_by_one[event.dagster_event_type] += 1
        return one_by_one(self, event)

    monkeypatch.setattr(BatchedSqliteEventLogStorage, "store_event", store_event)

    results = run_range(batched, fail), run_range(plain, fail)

    assert [r.success for r in results] == [not fail, not fail]
    seen = [what_dagster_reads(i, r.run_id) for i, r in zip((batched, plain), results, strict=True)]
    assert seen[0] == seen[1]
    second = seen[0]["second"]
    if fail:  # one planned event per hour, so a failed run marks each hour failed
        assert set(second["status"].values()) == {dg.AssetPartitionStatus.FAILED}
        assert seen[0]["first"]["materialized"] == [f"2026-01-01-0{h}:00" for h in range(6)]
    else:
        assert second["materialized"] == [f"2026-01-01-0{h}:00" for h in range(6)]
        assert ("2026-01-01-05:00", "FAILED") in seen[0]["checks"]
        assert len(seen[0]["first"]["records"]) == 6
        assert seen[0]["first"]["last"] == ("2026-01-01-05:00", True)
    assert seen[0]["first"]["tags"] == [{"dagster/data_version": "v1"}] * 6
    assert len(second["planned"]) == 6
    # The planned events and the per-hour materializations took the batched path.
    assert stored_one_by_one[DagsterEventType.ASSET_MATERIALIZATION_PLANNED] == 0
    assert stored_one_by_one[DagsterEventType.ASSET_MATERIALIZATION] == 0
    assert stored_one_by_one[DagsterEventType.STEP_START] >= 1  # the rest: one by one


def test_a_batch_is_two_transactions_whatever_its_length(counted):
    instance, connections = counted
    storage = instance.event_log_storage
    events = [
        entry(
            "run-1",
            dg.DagsterEvent(
                event_type_value=DagsterEventType.ASSET_MATERIALIZATION.value,
                job_name="hourly",
                event_specific_data=StepMaterializationData(
                    dg.AssetMaterialization("first", partition=key)
                ),
            ),
            at=i,
        )
        for i, key in enumerate(HOURS.get_partition_keys_in_range(dg.PartitionKeyRange(*RANGE)))
    ]

    storage.store_event_batch(events)

    assert connections == ["run-1", "index"]
    assert sorted(instance.get_materialized_partitions(dg.AssetKey("first"))) == [
        f"2026-01-01-0{h}:00" for h in range(6)
    ]
    assert len(storage.get_logs_for_run("run-1")) == 6


def test_the_instance_turns_dagsters_batches_on_unless_the_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv(BATCH_SIZE_ENV, "7")
    instance_in(tmp_path / "a", plain=False).event_log_storage  # noqa: B018
    assert os.environ[BATCH_SIZE_ENV] == "7"
    monkeypatch.delenv(BATCH_SIZE_ENV)
    instance_in(tmp_path / "b", plain=False).event_log_storage  # noqa: B018
    assert os.environ[BATCH_SIZE_ENV] == "1000"


def test_schema_questions_are_asked_once_per_storage_and_a_missing_table_again(
    tmp_path, monkeypatch
):
    # Dagster asks has_table (a new engine each time) and inspects the asset-key columns for
    # every asset event and check evaluation; the storage remembers a True (issue 9).
    asked: Counter = Counter()
    has_table = dg._core.storage.event_log.SqliteEventLogStorage.has_table  # noqa: SLF001
    has_column = dg._core.storage.event_log.SqliteEventLogStorage._has_asset_key_col_on_connection  # noqa: SLF001
    missing = {"asset_event_tags"}  # as if a migration had not created it yet

    def counting_has_table(self, name):
        asked[name] += 1
        return False if name in missing else has_table(self, name)

    def counting_has_column(self, conn, name):
        asked[f"column {name}"] += 1
        return has_column(self, conn, name)

    monkeypatch.setattr(
        dg._core.storage.event_log.SqliteEventLogStorage, "has_table", counting_has_table
    )
    monkeypatch.setattr(
        dg._core.storage.event_log.SqliteEventLogStorage,
        "_has_asset_key_col_on_connection",
        counting_has_column,
    )
    instance = instance_in(tmp_path / "home", plain=False)
    asked.clear()

    run_range(instance)
    once = {k: v for k, v in asked.items() if k not in missing}
    assert once and set(once.values()) == {1}  # each True answer asked once
    assert asked["asset_event_tags"] > 1  # a False is asked again every time
    missing.clear()  # "migrated": found, then remembered
    asked.clear()
    run_range(instance)
    assert asked == {"asset_event_tags": 1}
    tags = instance.event_log_storage.get_event_tags_for_asset(dg.AssetKey("first"))
    assert tags == [{"dagster/data_version": "v1"}] * 6  # written once the table "exists"


def test_each_database_keeps_one_engine_and_the_least_recent_are_let_go(tmp_path, monkeypatch):
    import bq_platform.event_log as event_log

    instance = instance_in(tmp_path / "home", plain=False)
    storage = instance.event_log_storage
    created: list[str] = []
    create_engine = event_log.create_engine

    def counting(url, **kwargs):
        created.append(Path(str(url).removeprefix("sqlite:///")).stem)
        return create_engine(url, **kwargs)

    monkeypatch.setattr(event_log, "create_engine", counting)
    runs = [f"run-{i}" for i in range(event_log.ENGINES_KEPT + 1)]
    for _ in range(3):
        storage.store_event(entry(runs[0], None))
    assert created.count(runs[0]) == 1  # three transactions, one engine
    for run_id in runs[1:]:
        storage.store_event(entry(run_id, None))
    storage.store_event(entry(runs[0], None))  # the least recent was let go: a new engine
    assert created.count(runs[0]) == 2
    assert [len(storage.get_logs_for_run(r)) for r in runs] == [4] + [1] * (len(runs) - 1)

    instance.wipe()  # deletes the runs' databases: the next event creates one again
    storage.store_event(entry(runs[0], None))
    assert len(storage.get_logs_for_run(runs[0])) == 1
    storage.dispose()


def test_a_transaction_leaves_the_connection_open_and_another_process_sees_its_events(tmp_path):
    """A transaction's end no longer closes the database's last connection (on which SQLite
    checkpoints and removes the WAL); what it committed is read by another instance at once,
    and what that one writes is read here; dispose closes the connections."""
    home = tmp_path / "home"
    instance = instance_in(home, plain=False)
    storage = instance.event_log_storage
    wal = home / "history" / "runs" / "run-1.db-wal"

    storage.store_event(entry("run-1", None))

    assert wal.exists()  # the connection is kept: no checkpoint-on-close
    other = dg.DagsterInstance.from_config(str(home))  # e.g. dagster dev's webserver
    assert len(other.event_log_storage.get_logs_for_run("run-1")) == 1
    other.event_log_storage.store_event(entry("run-1", None, at=1))
    assert len(storage.get_logs_for_run("run-1")) == 2
    other.event_log_storage.dispose()
    storage.dispose()
    assert not wal.exists()  # the last connection closed: checkpointed into run-1.db
    reopened = dg.DagsterInstance.from_config(str(home))
    assert len(reopened.event_log_storage.get_logs_for_run("run-1")) == 2
