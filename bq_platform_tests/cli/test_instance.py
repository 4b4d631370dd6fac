"""The local Dagster instance: its config, the run lock, and runs whose process died."""

import hashlib
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

from bq_platform.cli.instance import (
    INSTANCE_BLOCKS,
    RETIRED_EVENT_LOG_MODULE,
    RUN_LOCK_NAME,
    RunLockTimeout,
    dagster_yaml,
    ensure_dagster_yaml,
    fail_dead_runs,
    run_lock,
)
from bq_platform.defs.run_tags import CLI_TRIGGER, PID_TAG, TRIGGER_TAG


def open_instance(home: Path) -> dg.DagsterInstance:
    return dg.DagsterInstance.from_config(str(home))


def test_fresh_config_enables_run_monitoring_and_limits_runs_and_pools(tmp_path):
    assert ensure_dagster_yaml(tmp_path) == list(INSTANCE_BLOCKS)
    assert (tmp_path / "dagster.yaml").read_text() == dagster_yaml()

    with open_instance(tmp_path) as instance:
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_max_runtime_seconds == 21600
        config = instance.get_concurrency_config()
        assert config.run_queue_config.max_concurrent_runs == 1
        assert config.pool_config.default_pool_limit == 1


def test_existing_config_gets_missing_blocks_and_keeps_its_own_values(tmp_path):
    config = tmp_path / "dagster.yaml"
    config.write_text("# mine\ntelemetry:\n  enabled: true\n")

    assert ensure_dagster_yaml(tmp_path) == ["run_monitoring", "concurrency"]
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


#: The block older versions of bq-platform appended to dagster.yaml (before the run monitoring).
RETIRED_BLOCK = f"""\
# Dagster's SQLite event log, writing a run's planned events and a step's per-hour
# materializations in one transaction instead of one per event (bq_platform/event_log.py).
# After this folder is moved, bq-platform points base_dir at its new place.
event_log_storage:
  module: {RETIRED_EVENT_LOG_MODULE}
  class: BatchedSqliteEventLogStorage
  config:
    base_dir: "{{runs}}"
"""


def test_an_older_instance_drops_the_retired_event_log_and_keeps_its_history(tmp_path):
    """A dagster.yaml of an older bq-platform names an event log module that no longer exists
    (Dagster could not open the instance); its block goes, and Dagster's own storage reads the
    history from the same files. The operator's other lines stay."""
    with open_instance(tmp_path) as instance:  # Dagster's default files
        instance.report_runless_asset_event(dg.AssetMaterialization("old"))
    config = tmp_path / "dagster.yaml"
    mine = "# mine\ntelemetry:\n  enabled: true\n"
    retired = RETIRED_BLOCK.format(runs=tmp_path / "history" / "runs")
    config.write_text(mine + retired + INSTANCE_BLOCKS["concurrency"])

    assert ensure_dagster_yaml(tmp_path) == ["run_monitoring"]

    text = config.read_text()
    assert text.startswith(mine + INSTANCE_BLOCKS["concurrency"])
    assert "event_log" not in text and "event log" not in text
    with open_instance(tmp_path) as instance:
        assert instance.get_latest_materialization_event(dg.AssetKey("old")) is not None
    assert ensure_dagster_yaml(tmp_path) == [] and config.read_text() == text


def test_a_moved_home_keeps_its_history(tmp_path):
    """Dagster's default storage keeps its files relative to the home: after the folder is
    moved, the history recorded before is read from the new place, and the old one is not
    created again."""
    old, new = tmp_path / "old" / "dagster_home", tmp_path / "new" / "dagster_home"
    old.mkdir(parents=True)
    ensure_dagster_yaml(old)
    with open_instance(old) as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("before_the_move"))
    old.parent.rename(tmp_path / "new")

    assert ensure_dagster_yaml(new) == []
    with open_instance(new) as instance:
        assert instance.get_latest_materialization_event(dg.AssetKey("before_the_move"))
        instance.report_runless_asset_event(dg.AssetMaterialization("after_the_move"))
    assert not (tmp_path / "old").exists()


def test_a_copied_home_writes_its_history_into_the_copy_only(tmp_path):
    """A data folder copied with ``cp -a`` (as the README says) is independent: the copy reads
    the history recorded before, and what it records never reaches the original's files."""
    original, copy = tmp_path / "original", tmp_path / "copy"
    (original / "dagster_home").mkdir(parents=True)
    ensure_dagster_yaml(original / "dagster_home")
    with open_instance(original / "dagster_home") as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization("before_the_copy"))
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    before = folder_digest(original)

    with open_instance(copy / "dagster_home") as instance:
        assert instance.get_latest_materialization_event(dg.AssetKey("before_the_copy"))
        for n in range(50):
            instance.report_runless_asset_event(dg.AssetMaterialization(f"in_the_copy_{n}"))
    assert str(original) not in (copy / "dagster_home" / "dagster.yaml").read_text()
    assert folder_digest(original) == before
    with open_instance(original / "dagster_home") as instance:
        assert instance.get_latest_materialization_event(dg.AssetKey("before_the_copy"))
        assert not instance.get_latest_materialization_event(dg.AssetKey("in_the_copy_0"))


def folder_digest(root) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``root``."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


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


def started_run(instance: dg.DagsterInstance, tags: dict[str, str]) -> dg.DagsterRun:
    return instance.add_run(
        dg.DagsterRun(job_name="job", status=dg.DagsterRunStatus.STARTED, tags=tags)
    )


def test_cli_runs_left_started_are_marked_failed_and_free_their_slots():
    with dg.instance_for_test(
        overrides={"concurrency": {"pools": {"default_limit": 1}}}
    ) as instance:
        dead = started_run(instance, {TRIGGER_TAG: CLI_TRIGGER, PID_TAG: "4242"})
        other = started_run(instance, {})
        storage = instance.event_log_storage
        storage.initialize_concurrency_limit_to_default("warehouse")
        assert storage.claim_concurrency_slot("warehouse", dead.run_id, "step").is_claimed

        assert fail_dead_runs(instance) == [dead.run_id]

        assert instance.get_run_by_id(dead.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(other.run_id).status == dg.DagsterRunStatus.STARTED
        assert storage.claim_concurrency_slot("warehouse", "next-run", "step").is_claimed
        assert fail_dead_runs(instance) == []
