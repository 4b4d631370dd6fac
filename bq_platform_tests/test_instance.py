"""The local Dagster instance: its config, the run lock, and runs whose process died."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.test_utils import create_run_for_test

from bq_platform.event_log import BatchedSqliteEventLogStorage
from bq_platform.instance import (
    CLI_TRIGGER,
    PID_TAG,
    RUN_LOCK_NAME,
    TRIGGER_TAG,
    RunLockTimeout,
    dagster_yaml,
    ensure_dagster_yaml,
    fail_dead_runs,
    instance_blocks,
    run_lock,
)


def open_instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home))


def test_fresh_config_enables_run_monitoring_and_limits_runs_and_pools(tmp_path):
    assert ensure_dagster_yaml(tmp_path) == list(instance_blocks(tmp_path))
    assert (tmp_path / "dagster.yaml").read_text() == dagster_yaml(tmp_path)

    with open_instance(tmp_path) as instance:
        assert type(instance.event_log_storage) is BatchedSqliteEventLogStorage
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_max_runtime_seconds == 21600
        config = instance.get_concurrency_config()
        assert config.run_queue_config.max_concurrent_runs == 1
        assert config.pool_config.default_pool_limit == 1


def test_existing_config_gets_missing_blocks_and_keeps_its_own_values(tmp_path):
    config = tmp_path / "dagster.yaml"
    config.write_text("# mine\ntelemetry:\n  enabled: true\n")

    assert ensure_dagster_yaml(tmp_path) == ["run_monitoring", "concurrency", "event_log_storage"]
    assert ensure_dagster_yaml(tmp_path) == []  # idempotent

    text = config.read_text()
    assert text.startswith("# mine\n")
    loaded = yaml.safe_load(text)
    assert loaded["telemetry"] == {"enabled": True}
    assert loaded["run_monitoring"]["enabled"] is True
    with open_instance(tmp_path) as instance:
        assert instance.run_monitoring_enabled


def test_run_queue_config_is_not_contradicted(tmp_path):
    (tmp_path / "dagster.yaml").write_text("run_queue:\n  max_concurrent_runs: 3\n")

    assert "concurrency" not in ensure_dagster_yaml(tmp_path)

    with open_instance(tmp_path) as instance:  # dagster refuses run_queue + concurrency.runs
        assert instance.get_concurrency_config().run_queue_config.max_concurrent_runs == 3


def test_a_storage_config_keeps_its_own_event_log(tmp_path):
    runs = tmp_path / "mine"
    (tmp_path / "dagster.yaml").write_text(f"storage:\n  sqlite:\n    base_dir: {runs}\n")

    assert "event_log_storage" not in ensure_dagster_yaml(tmp_path)

    with open_instance(tmp_path) as instance:  # dagster refuses storage + event_log_storage
        assert type(instance.event_log_storage) is not BatchedSqliteEventLogStorage


def test_an_older_instance_keeps_its_event_log_files(tmp_path):
    with open_instance(tmp_path) as instance:  # no dagster.yaml: Dagster's defaults
        instance.report_runless_asset_event(dg.AssetMaterialization("old"))
    ensure_dagster_yaml(tmp_path)  # an upgrade adds the batched event log, same files

    with open_instance(tmp_path) as instance:
        assert type(instance.event_log_storage) is BatchedSqliteEventLogStorage
        assert instance.get_latest_materialization_event(dg.AssetKey("old")) is not None


def test_broken_config_is_named(tmp_path):
    (tmp_path / "dagster.yaml").write_text("- a list\n")
    with pytest.raises(ValueError, match="dagster.yaml"):
        ensure_dagster_yaml(tmp_path)


def test_second_lock_holder_waits_then_gives_up_naming_the_holder(tmp_path):
    messages: list[str] = []
    with run_lock(tmp_path):
        started = time.monotonic()
        with pytest.raises(RunLockTimeout, match=rf"pid {os.getpid()}"):
            with run_lock(tmp_path, wait_seconds=1.0, on_wait=messages.append):
                pass
        assert time.monotonic() - started >= 1.0
    assert len(messages) == 1 and "waiting up to 1 s" in messages[0]
    with run_lock(tmp_path, wait_seconds=0):  # released
        pass


HOLD_LOCK = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from bq_platform.instance import run_lock
    with run_lock(Path(sys.argv[1])):
        print("locked", flush=True)
        time.sleep(600)
    """
)


def test_lock_of_a_killed_holder_is_released(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunLockTimeout, match=rf"pid {holder.pid}"):
            with run_lock(tmp_path, wait_seconds=0):
                pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        with run_lock(tmp_path, wait_seconds=5):
            assert (tmp_path / RUN_LOCK_NAME).read_text().strip() == str(os.getpid())
    finally:
        holder.kill()
        holder.wait(timeout=30)


def test_cli_runs_left_started_are_marked_failed_and_free_their_slots():
    with dg.instance_for_test(
        overrides={"concurrency": {"pools": {"default_limit": 1}}}
    ) as instance:
        dead = create_run_for_test(
            instance,
            status=dg.DagsterRunStatus.STARTED,
            tags={TRIGGER_TAG: CLI_TRIGGER, PID_TAG: "4242"},
        )
        other = create_run_for_test(instance, status=dg.DagsterRunStatus.STARTED)
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default("warehouse")
        assert storage.claim_concurrency_slot("warehouse", dead.run_id, "step").is_claimed

        assert fail_dead_runs(instance) == [dead.run_id]

        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(other.run_id).status == dg.DagsterRunStatus.STARTED
        assert storage.claim_concurrency_slot("warehouse", "next-run", "step").is_claimed
        assert fail_dead_runs(instance) == []
