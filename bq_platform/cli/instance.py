"""The local Dagster instance of ``bq-platform``: its config, set-up, and one run at a time.

Dagster's SQLite storage under ``$DAGSTER_HOME`` is not safe to create from two processes at
once: two ``bq-platform run`` on a fresh data folder race on the schema, and the loser can leave
two alembic heads that break every later run. So ``bq-platform run`` holds :func:`run_lock` for
its whole run: one process creates and migrates the instance, a second ``run`` waits, and a CLI
run still in progress was killed (:func:`fail_dead_runs`).
"""

import contextlib
import fcntl
import logging
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TextIO

import dagster as dg
import yaml

from bq_platform.defs.run_tags import CLI_TRIGGER, IN_PROGRESS_STATUSES, PID_TAG, TRIGGER_TAG

log = logging.getLogger(__name__)

RUN_LOCK_NAME = "bq_platform.run.lock"
#: How long a second ``bq-platform run`` waits for the first by default (seconds).
DEFAULT_LOCK_WAIT_SECONDS = 3600.0
_LOCK_POLL_SECONDS = 0.5

#: Top-level blocks of the local instance config, each added to an existing dagster.yaml that
#: lacks it. Keys: docs.dagster.io, "Dagster instance configuration", "Run monitoring" and
#: "Managing concurrency". Production values: docs/production.md.
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
_HEADER = (
    "# Local Dagster instance of bq_platform (written by bq-platform; edit freely: a block you\n"
    "# remove is added back, a value you change is kept).\n"
)
#: Top-level keys that make our ``concurrency.runs`` block invalid (dagster refuses both).
_RUN_QUEUE_CONFLICTS = ("run_queue", "run_coordinator")
#: A retired ``event_log_storage`` module that a local dagster.yaml may name; Dagster's default
#: storage reads the same files, so :func:`ensure_dagster_yaml` removes that block.
RETIRED_EVENT_LOG_MODULE = "bq_platform.event_log"
_RETIRED_BLOCK = re.compile(
    r"(?:^# .*\n)*^event_log_storage:\n(?:^[ \t].*\n|^\n)*", flags=re.MULTILINE
)


def dagster_home(default: Path) -> Path:
    """``$DAGSTER_HOME`` if set, else ``default``; created, resolved, and exported."""
    home = Path(os.environ.get("DAGSTER_HOME") or default).resolve()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def dagster_yaml() -> str:
    """The whole ``dagster.yaml`` of a new local instance."""
    return _HEADER + "".join(INSTANCE_BLOCKS.values())


def ensure_dagster_yaml(home: Path) -> list[str]:
    """Write ``home/dagster.yaml``, or append as text (comments survive) the blocks of
    :data:`INSTANCE_BLOCKS` it lacks, never changing a key; no ``concurrency`` next to
    ``run_queue`` or ``run_coordinator``, which Dagster refuses. A block naming
    :data:`RETIRED_EVENT_LOG_MODULE` is removed with the comments right above it. Returns the
    keys added; ValueError (naming the file) if it is not a YAML mapping or names the retired
    module in a form it cannot remove.
    """
    config = home / "dagster.yaml"
    if not config.exists():
        _write(config, dagster_yaml())
        return list(INSTANCE_BLOCKS)
    text, current = _read_config(config)
    block = current.get("event_log_storage")
    retired = isinstance(block, dict) and block.get("module") == RETIRED_EVENT_LOG_MODULE
    if retired:
        text, found = _RETIRED_BLOCK.subn("", text, count=1)
        if not found:
            raise ValueError(f"{config}: delete its event_log_storage block (module removed)")
        log.info("%s: removed the event_log_storage block of %s", config, RETIRED_EVENT_LOG_MODULE)
    added = [
        key
        for key in INSTANCE_BLOCKS
        if key not in current
        and not (key == "concurrency" and any(k in current for k in _RUN_QUEUE_CONFLICTS))
    ]
    if added:
        text_added = "".join(INSTANCE_BLOCKS[key] for key in added)
        text = text.rstrip("\n") + "\n\n# Added by bq-platform:\n" + text_added
        log.info("%s: added %s", config, ", ".join(added))
    if added or retired:
        _write(config, text)
    return added


def _read_config(config: Path) -> tuple[str, dict[str, Any]]:
    """The text of ``dagster.yaml`` and its settings; ValueError unless a YAML mapping."""
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
    """Hold the exclusive ``flock`` of the instance in ``home`` for the ``with`` block, waiting
    up to ``wait_seconds`` (0: refuse at once); ``on_wait`` gets one message if it is busy.
    Yields the lock file, which holds the holder's PID for messages; the kernel drops the lock
    when its holder exits or is killed. RunLockTimeout names the holder's PID.
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
    """Mark the CLI's in-progress runs failed and free their pool slots (a dead run's slot
    would block its pool for ever); the run IDs. Call only while holding :func:`run_lock`: no
    other ``bq-platform run`` is alive then. ``dagster dev``'s runs are left to the daemon."""
    runs = instance.get_runs(
        filters=dg.RunsFilter(
            statuses=list(IN_PROGRESS_STATUSES),
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
