"""The local Dagster instance: its config, the run lock, and runs whose process died."""

import os
import shutil
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
from bq_platform.cli.instance import (
    CLI_TRIGGER,
    PID_TAG,
    RUN_LOCK_NAME,
    TRIGGER_TAG,
    RunLockTimeout,
    dagster_yaml,
    ensure_dagster_yaml,
    fail_dead_runs,
    follow_moved_home,
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


def _runs_folder(instance: dg.DagsterInstance) -> Path:
    return Path(instance.event_log_storage._base_dir)  # noqa: SLF001 - where the log is kept


def test_a_moved_home_keeps_its_event_log_with_it(tmp_path):
    """The event log block names an absolute folder; after the home is moved (the old folder
    gone), the next run points it at the new place, and the history recorded before the move
    is read from there. Without this, Dagster recreated the old folder for the new runs."""
    old, new = tmp_path / "old" / "dagster_home", tmp_path / "new" / "dagster_home"
    old.mkdir(parents=True)
    ensure_dagster_yaml(old)
    with open_instance(old) as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("before_the_move"))
    old.parent.rename(tmp_path / "new")

    message = follow_moved_home(new)

    assert message is not None and "moved" in message and str(new / "history" / "runs") in message
    assert yaml.safe_load((new / "dagster.yaml").read_text())["event_log_storage"]["config"] == {
        "base_dir": str(new / "history" / "runs")
    }
    assert (new / "dagster.yaml").read_text() == dagster_yaml(new)  # comments kept
    with open_instance(new) as instance:
        assert _runs_folder(instance) == new / "history" / "runs"
        assert instance.get_latest_materialization_event(dg.AssetKey("before_the_move"))
        instance.report_runless_asset_event(dg.AssetMaterialization("after_the_move"))
    assert not (tmp_path / "old").exists()
    assert follow_moved_home(new) is None  # once


def test_a_copied_home_is_named_and_a_chosen_folder_left_alone(tmp_path):
    original = tmp_path / "a" / "dagster_home"
    original.mkdir(parents=True)
    ensure_dagster_yaml(original)
    with open_instance(original) as instance:  # its history/runs exists: a copy, not a move
        instance.report_runless_asset_event(dg.AssetMaterialization("original"))
    copy = tmp_path / "b" / "dagster_home"
    shutil.copytree(original, copy)
    before = (copy / "dagster.yaml").read_text()

    message = follow_moved_home(copy)

    assert message is not None and str(original / "history" / "runs") in message
    assert "delete the event_log_storage block" in message
    assert (copy / "dagster.yaml").read_text() == before
    assert follow_moved_home(original) is None
    chosen = tmp_path / "d" / "dagster_home"
    chosen.mkdir(parents=True)
    ensure_dagster_yaml(chosen)
    config = chosen / "dagster.yaml"
    config.write_text(config.read_text().replace(str(chosen / "history"), str(tmp_path / "logs")))
    before = config.read_text()
    assert follow_moved_home(chosen) is None  # the operator's folder, not there yet: kept
    assert config.read_text() == before
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    assert follow_moved_home(tmp_path / "c") is None  # no event log block: Dagster's default


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
    from bq_platform.cli.instance import run_lock
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
