"""The local Dagster instance of ``bq-platform``: its config, set-up, and one run at a time.

Dagster keeps run history in SQLite files under ``$DAGSTER_HOME``. Creating them is not safe
to do from two processes at once: two ``bq-platform run`` on a fresh data folder raced on the
schema (``table secondary_indexes already exists``), and the loser left two alembic heads
(``Version table 'alembic_version' has more than one head present``) that broke every later
run (issue 7). So:

- :func:`ensure_dagster_yaml` writes ``dagster.yaml`` (:func:`dagster_yaml`) when missing, and
  appends the blocks an older file lacks (run monitoring, run queue and pool limits, the
  batched event log of :mod:`bq_platform.event_log`), never changing a key the operator set;
- :func:`follow_moved_home` points that block's absolute ``base_dir`` at the home again after
  the folder was moved; :func:`prepare_home` does both (``bq-platform run``, and
  ``bq-platform home``, which ``make dev`` runs before ``dagster dev``);
- :func:`run_lock` is an exclusive ``fcntl.flock`` on ``$DAGSTER_HOME/bq_platform.run.lock``:
  ``bq-platform run`` holds it for its whole run, so the instance is created and migrated by one
  process only, and a second ``run`` *waits* for the first (bounded, with a message) instead of
  racing it. The kernel releases the lock when its holder dies, even by ``kill -9``;
- :func:`fail_dead_runs`: with the lock held, no other ``bq-platform run`` is alive, so a run
  the CLI started that is still ``STARTED`` was killed. It is marked failed and its pool slots
  are freed (a slot held by a dead run would block the ``warehouse`` pool for ever).
"""

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import dagster as dg
import yaml

log = logging.getLogger(__name__)

RUN_LOCK_NAME = "bq_platform.run.lock"
#: Tag of the runs ``bq-platform run`` starts, and of the process that ran them.
TRIGGER_TAG = "bq_platform/trigger"
PID_TAG = "bq_platform/pid"
CLI_TRIGGER = "cli"
#: How long a second ``bq-platform run`` waits for the first by default (seconds).
DEFAULT_LOCK_WAIT_SECONDS = 3600.0
_LOCK_POLL_SECONDS = 0.5

#: Top-level blocks of the local instance config, each added to an existing dagster.yaml that
#: lacks it. Keys: dagster 1.13 ``dagster/_core/instance/config.py``
#: (``dagster_instance_config_schema``, ``get_concurrency_config``); docs.dagster.io,
#: "Run monitoring" and "Managing concurrency". Production values: docs/production.md.
INSTANCE_BLOCKS: dict[str, str] = {
    "telemetry": """\
telemetry:
  enabled: false
""",
    "run_monitoring": """\
# The daemon (dagster dev / dagster-daemon) marks runs whose worker died as failed. The default
# run launcher cannot probe a worker, so a dead run is caught by max_runtime_seconds (a local
# day takes minutes); `bq-platform run` marks its own killed runs failed at once (see README).
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
  max_runtime_seconds: 21600
  poll_interval_seconds: 60
  free_slots_after_run_end_seconds: 60
""",
    "concurrency": """\
# One 2-core machine: one queued run at a time (Spark uses every core), and one step at a time
# in each pool, e.g. `warehouse` (DuckDB has one writer).
concurrency:
  runs:
    max_concurrent_runs: 1
  pools:
    default_limit: 1
""",
}

#: The event log block (:mod:`bq_platform.event_log`): Dagster's SQLite event log, in the files
#: of Dagster's default (``<home>/history/runs``, ``dagster/_core/instance/ref.py``), writing a
#: batch of asset events at once.
EVENT_LOG_MODULE = "bq_platform.event_log"
EVENT_LOG_BLOCK = """\
# Dagster's SQLite event log, writing a run's planned events and a step's per-hour
# materializations in one transaction instead of one per event (bq_platform/event_log.py).
# After this folder is moved, bq-platform points base_dir at its new place.
event_log_storage:
  module: {module}
  class: BatchedSqliteEventLogStorage
  config:
    base_dir: {base_dir}
"""
_HEADER = (
    "# Local Dagster instance of bq_platform (written by bq-platform; edit freely: a block you\n"
    "# remove is added back, a value you change is kept).\n"
)
#: Top-level keys that make our ``concurrency.runs`` block invalid (dagster refuses both).
_RUN_QUEUE_CONFLICTS = ("run_queue", "run_coordinator")


def dagster_home(default: Path) -> Path:
    """``$DAGSTER_HOME`` if set, else ``default``; created, resolved, and exported."""
    home = Path(os.environ.get("DAGSTER_HOME") or default).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def instance_blocks(home: Path) -> dict[str, str]:
    """The top-level blocks of the local instance in ``home``, by key: :data:`INSTANCE_BLOCKS`
    and the ``event_log_storage`` block (:data:`EVENT_LOG_BLOCK`, with ``home``'s path)."""
    base_dir = json.dumps(str(runs_folder(home)))  # a YAML string too
    return {
        **INSTANCE_BLOCKS,
        "event_log_storage": EVENT_LOG_BLOCK.format(module=EVENT_LOG_MODULE, base_dir=base_dir),
    }


def runs_folder(home: Path) -> Path:
    """Where the local instance in ``home`` keeps its event log: ``home/history/runs``, the
    folder of Dagster's default (``dagster/_core/instance/ref.py``), resolved."""
    return Path(home).resolve() / "history" / "runs"


def dagster_yaml(home: Path) -> str:
    """The whole ``dagster.yaml`` of a new local instance in ``home``."""
    return _HEADER + "".join(instance_blocks(home).values())


def ensure_dagster_yaml(home: Path) -> list[str]:
    """Write ``home/dagster.yaml``, or add the blocks of :func:`instance_blocks` it lacks.

    Existing keys are never changed; blocks are appended as text, so comments survive. The
    ``concurrency`` block is left out when the file configures ``run_queue`` or
    ``run_coordinator`` (dagster refuses ``concurrency.runs`` next to them), and the
    ``event_log_storage`` block when it configures ``storage`` (dagster refuses both; e.g. a
    deployment's Postgres, which batches on its own).

    Returns:
        The top-level keys added (empty when the file already had them all).

    Raises:
        ValueError: if the existing file is not a YAML mapping (names the file).
    """
    config = home / "dagster.yaml"
    blocks = instance_blocks(home)
    if not config.exists():
        _write(config, dagster_yaml(home))
        return list(blocks)
    text, current = _read_config(config)
    conflicts = {"concurrency": _RUN_QUEUE_CONFLICTS, "event_log_storage": ("storage",)}
    added = [
        key
        for key in blocks
        if key not in current and not any(k in current for k in conflicts.get(key, ()))
    ]
    if added:
        text_added = "".join(blocks[key] for key in added)
        _write(config, text.rstrip("\n") + "\n\n# Added by bq-platform:\n" + text_added)
        log.info("%s: added %s", config, ", ".join(added))
    return added


def follow_moved_home(home: Path) -> str | None:
    """Point the event log of ``home/dagster.yaml`` at ``home`` again after the folder moved.

    The ``event_log_storage`` block that :func:`ensure_dagster_yaml` writes holds an absolute
    ``base_dir`` (Dagster's instance config has no path relative to its home). After the data
    folder is moved, that path names the old place: Dagster would create it again and keep the
    new runs' history there, apart from the rest. So, for a block of
    :class:`bq_platform.event_log.BatchedSqliteEventLogStorage` whose ``base_dir`` reads
    ``<other home>/history/runs``, the other home having this home's name (the block was
    written for another place, :func:`runs_folder`):

    - if that other home no longer exists and the line is as written here, the path is
      replaced by ``home``'s (the folder was moved: its history came along);
    - if it still exists (this folder is a copy), nothing changes and the line says so.

    A ``base_dir`` of another form is the operator's choice and is left alone, silently.

    Returns:
        One line for the operator (what was changed, or what to check), or None.

    Raises:
        ValueError: if the file is not a YAML mapping (names the file).
    """
    config = home / "dagster.yaml"
    if not config.exists():
        return None
    text, current = _read_config(config)
    block = current.get("event_log_storage")
    if not isinstance(block, dict) or block.get("module") != EVENT_LOG_MODULE:
        return None
    configured = (block.get("config") or {}).get("base_dir")
    expected = runs_folder(home)
    if not isinstance(configured, str) or Path(configured).resolve() == expected:
        return None
    old_home = Path(configured).parent.parent
    if (
        Path(configured).parts[-2:] != expected.parts[-2:]
        or old_home.name != expected.parent.parent.name
    ):
        return None  # not a place this module writes: the operator's
    line = f"base_dir: {json.dumps(configured)}\n"
    if not old_home.exists() and text.count(line) == 1:
        _write(config, text.replace(line, f"base_dir: {json.dumps(str(expected))}\n"))
        return f"{config}: the folder was moved; the event log now follows it ({expected})"
    return (
        f"{config}: the event log is kept in {configured}, outside this Dagster home; if this "
        f"folder is a copy, delete the event_log_storage block and the next run writes it "
        f"again for {expected}"
    )


def prepare_home(home: Path) -> str | None:
    """Make ``home`` ready for Dagster: :func:`ensure_dagster_yaml`, then
    :func:`follow_moved_home`. What ``bq-platform run`` and ``make dev`` do first, so that
    ``dagster dev`` started after the folder was moved keeps its history in the new place.

    Returns:
        :func:`follow_moved_home`'s line for the operator, or None.

    Raises:
        ValueError: if ``dagster.yaml`` is not a YAML mapping (names the file).
    """
    ensure_dagster_yaml(home)
    return follow_moved_home(home)


def _read_config(config: Path) -> tuple[str, dict[str, Any]]:
    """The text of ``dagster.yaml`` and its settings.

    Raises:
        ValueError: if it is not YAML, or not a mapping (names the file).
    """
    text = config.read_text()
    try:
        current = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{config}: not valid YAML ({exc}); fix or delete it") from exc
    if not isinstance(current, dict):
        raise ValueError(f"{config}: expected a YAML mapping of instance settings")
    return text, current


def _write(path: Path, text: str) -> None:
    """Replace ``path`` atomically: a reader (``dagster dev``) never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class RunLockTimeout(RuntimeError):
    """Another ``bq-platform run`` held the run lock for longer than we were willing to wait."""


@contextlib.contextmanager
def run_lock(
    home: Path,
    wait_seconds: float = DEFAULT_LOCK_WAIT_SECONDS,
    on_wait: Callable[[str], Any] | None = None,
) -> Iterator[Path]:
    """Hold the exclusive run lock of the instance in ``home`` for the ``with`` block.

    Args:
        home: the ``DAGSTER_HOME`` folder.
        wait_seconds: how long to wait for a holder to finish; 0 refuses at once.
        on_wait: called once with a message when the lock is busy (the CLI prints it).

    Yields:
        The lock file's path. It holds the holder's PID (for messages only; the lock is the
        ``flock``, which the kernel drops when the holder exits or is killed).

    Raises:
        RunLockTimeout: if the lock is still held after ``wait_seconds``; the message names
            the holder's PID and the lock file.
    """
    path = home / RUN_LOCK_NAME
    with open(path, "a+") as handle:
        _acquire(handle, path, wait_seconds, on_wait)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield path
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)


def _acquire(
    handle: TextIO, path: Path, wait_seconds: float, on_wait: Callable[[str], Any] | None
) -> None:
    deadline = time.monotonic() + wait_seconds
    told = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "?"
            if time.monotonic() >= deadline:
                raise RunLockTimeout(
                    f"another bq-platform run (pid {holder}) is using this data folder "
                    f"(lock {path}); gave up after {wait_seconds:.0f} s. Wait for it to finish, "
                    "or raise --wait."
                ) from None
            if not told and on_wait is not None:
                on_wait(
                    f"another bq-platform run (pid {holder}) is using this data folder: waiting "
                    f"up to {wait_seconds:.0f} s for it to finish"
                )
                told = True
            time.sleep(_LOCK_POLL_SECONDS)


def fail_dead_runs(instance: dg.DagsterInstance) -> list[str]:
    """Mark the CLI's runs that are still in progress as failed, and free their pool slots.

    Call only while holding :func:`run_lock`: then no other ``bq-platform run`` is alive, so
    an in-progress run tagged ``bq_platform/trigger=cli`` lost its process (``kill -9``, power
    loss). Runs started by ``dagster dev`` are left to the daemon's run monitoring.

    Returns:
        The run IDs marked failed.
    """
    runs = instance.get_runs(
        filters=dg.RunsFilter(
            statuses=[
                dg.DagsterRunStatus.STARTED,
                dg.DagsterRunStatus.STARTING,
                dg.DagsterRunStatus.NOT_STARTED,
                dg.DagsterRunStatus.CANCELING,
            ],
            tags={TRIGGER_TAG: CLI_TRIGGER},
        )
    )
    failed = []
    for run in runs:
        pid = run.tags.get(PID_TAG, "?")
        instance.report_run_failed(
            run,
            f"The bq-platform process that ran this run (pid {pid}) is gone (killed or crashed); "
            "marked failed by the next bq-platform run.",
        )
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        failed.append(run.run_id)
    return failed
