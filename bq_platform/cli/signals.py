"""How ``bq-platform run`` stops on SIGTERM or SIGINT: within seconds, its runs ended, 128+N.

A service manager stops a process with SIGTERM (systemd's default ``KillSignal``, Kubernetes'
pod termination), an operator with Ctrl-C (SIGINT, to the whole process group). While
:func:`stop_on_signals` is active, either signal is a request to stop:

- outside a Dagster run, the handler raises :class:`Stopped` in the main thread;
- during an in-process Dagster run, Dagster's own handler replaces ours and interrupts the
  running step, which fails without a retry and ends the run canceled
  (:func:`bq_platform.defs.errors.fail_fast`). CPython writes the number of every signal it
  handles to the file descriptor of :func:`signal.set_wakeup_fd`, whichever handler runs, so
  the signal is recorded here all the same, and the runner calls :func:`raise_if_stopped`
  after each run.

The command then calls :func:`finish`: this process's runs left in progress are marked
canceled, one line names the signal and the runs, the Spark session is stopped and the exit
status is 128 + the signal number, the shell's convention (143 for SIGTERM, 130 for SIGINT).
If that has not happened :data:`GRACE_SECONDS` after the signal, a watchdog thread marks the
runs, prints the line and exits at once. The data is then as after ``kill -9`` at the same
moment, which the next ``run`` continues from.
"""

import contextlib
import dataclasses
import logging
import os
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import dagster as dg

from bq_platform.defs.run_tags import CLI_TRIGGER, IN_PROGRESS_STATUSES, PID_TAG, TRIGGER_TAG

log = logging.getLogger(__name__)

#: The signals that stop ``bq-platform run``.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds from a stop signal to the watchdog's exit, if the command has not ended by then
#: (below Kubernetes' default termination grace period, 30 s, and systemd's stop timeout).
GRACE_SECONDS = 20.0
#: Seconds :func:`stop_spark` waits for ``SparkSession.stop()``.
SPARK_STOP_SECONDS = 10.0
#: How a run that a stop signal interrupted ended, by its status.
_ENDED = {
    dg.DagsterRunStatus.CANCELED: "canceled",
    dg.DagsterRunStatus.FAILURE: "ended failed (interrupted)",
}
_WATCH_SECONDS = 0.5


class Stopped(KeyboardInterrupt):
    """A stop signal (``signum``) ended the command, during or after the run ``run_id`` if
    known. Like KeyboardInterrupt, which it is, ``except Exception`` does not catch it."""

    def __init__(self, signum: int, run_id: str | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.run_id = run_id

    @property
    def name(self) -> str:
        """``SIGTERM`` or ``SIGINT``."""
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process that a signal ended."""
        return 128 + self.signum

    def message(self, ended: dict[str, str]) -> str:
        """The one line naming the signal, the runs it ended (run ID -> how) and what to do."""
        runs = "; ".join(f"run {run_id} {how}" for run_id, how in ended.items())
        return (
            f"stopped by {self.name}: {runs or 'no run was in progress'}; "
            "run `bq-platform run` again to continue"
        )


@dataclasses.dataclass
class _Received:
    """This process's stop request: the first stop signal, read from the wakeup socket."""

    signum: int | None = None
    raised: bool = False
    reported: bool = False
    reader: socket.socket | None = None
    lock: threading.RLock = dataclasses.field(default_factory=threading.RLock)


_received = _Received()


def received() -> int | None:
    """The first stop signal received while :func:`stop_on_signals` is active, else None."""
    _drain()
    return _received.signum


def raise_if_stopped(run_id: str | None = None) -> None:
    """Raise :class:`Stopped` if a stop signal has arrived, one a Dagster run's handler took
    included; for the points between runs (``run_id``: the run that has just returned)."""
    signum = received()
    if signum is not None:
        _received.raised = True
        raise Stopped(signum, run_id)


@contextlib.contextmanager
def stop_on_signals(echo: Callable[[str], Any], grace: float = GRACE_SECONDS) -> Iterator[None]:
    """Turn SIGTERM and SIGINT into :class:`Stopped` for the ``with`` block (main thread only;
    the previous handlers come back after it). If the block has not ended ``grace`` seconds
    after a stop signal, a watchdog marks this process's runs canceled (in the instance of
    ``$DAGSTER_HOME``), prints the line through ``echo`` and exits at once."""
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    ended = threading.Event()
    with _received.lock:  # a new request: what an earlier block received is over
        _received.signum, _received.raised, _received.reported = None, False, False
        _received.reader = reader
    watchdog = threading.Thread(
        target=_watch, args=(ended, echo, grace), name="stop-signals", daemon=True
    )
    try:
        for signum in STOP_SIGNALS:
            signal.signal(signum, _handle)
        watchdog.start()
        yield
    finally:
        ended.set()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        signal.set_wakeup_fd(old_fd)
        with _received.lock:  # outside the block, no stop signal is pending
            _received.reader = None
            _received.signum, _received.raised, _received.reported = None, False, False
        writer.close()
        reader.close()


def finish(
    stop: Stopped, instance: dg.DagsterInstance | None, echo: Callable[[str], Any]
) -> NoReturn:
    """End the command that ``stop`` interrupted: mark this process's runs in progress
    canceled in ``instance`` (None: no instance was opened yet), print the line naming the
    signal and the runs once, stop the Spark session, exit with :attr:`Stopped.exit_code`."""
    _report(stop, instance, echo)
    stop_spark()
    sys.exit(stop.exit_code)


def end_runs(instance: dg.DagsterInstance, stop: Stopped) -> dict[str, str]:
    """Mark this process's runs that have not ended canceled and free their pool slots (the
    CLI tags its runs with the PID of the process that runs them). Returns how each run the
    stop ended did: those, and ``stop.run_id`` unless it succeeded."""
    ended = {}
    if stop.run_id is not None:
        run = instance.get_run_by_id(stop.run_id)
        if run is not None and run.status in _ENDED:
            ended[run.run_id] = _ENDED[run.status]
    tags = {TRIGGER_TAG: CLI_TRIGGER, PID_TAG: str(os.getpid())}
    for run in instance.get_runs(
        filters=dg.RunsFilter(statuses=list(IN_PROGRESS_STATUSES), tags=tags)
    ):
        instance.report_run_canceled(
            run, f"bq-platform run (pid {os.getpid()}) was stopped by a signal"
        )
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        ended[run.run_id] = "marked canceled"
    return ended


def stop_spark(timeout: float = SPARK_STOP_SECONDS) -> None:
    """Stop the SparkSession of this process, if PySpark started one, with the public
    ``SparkSession.stop()``, waiting at most ``timeout`` seconds. It runs on a thread of its
    own: after an interrupt, the main thread's connection to the driver may be in the middle
    of a command. A driver that is already gone (its JVM killed) is left as it is."""
    if "pyspark.sql.session" not in sys.modules:  # no session was ever started
        return
    from pyspark.sql import SparkSession

    def stop() -> None:
        try:
            SparkSession.active().stop()
        except Exception as exc:  # noqa: BLE001 - no session, or its driver is gone
            log.debug("Spark session not stopped: %s", exc)

    thread = threading.Thread(target=stop, name="spark-stop", daemon=True)
    thread.start()
    thread.join(timeout)


def _report(stop: Stopped, instance: dg.DagsterInstance | None, echo: Callable[[str], Any]) -> None:
    """Mark the runs and print the line, unless the other thread has."""
    with _received.lock:
        if _received.reported:
            return
        _received.reported = True
        try:
            ended = end_runs(instance, stop) if instance is not None else {}
        except Exception as exc:  # noqa: BLE001 - the instance is out of reach: say so, once
            echo(
                f"stopped by {stop.name}: its runs could not be marked canceled ({exc}); run "
                "`bq-platform run` again: it marks them failed and continues"
            )
            return
        echo(stop.message(ended))


def _handle(signum: int, _frame: Any) -> None:
    """The handler outside Dagster runs: record ``signum``; raise :class:`Stopped` once (a
    second signal while the command stops is only recorded)."""
    with _received.lock:
        if _received.signum is None:
            _received.signum = signum
        if _received.raised:
            return
        _received.raised = True
    raise Stopped(_received.signum)


def _drain() -> None:
    """Record the first stop signal among the numbers waiting on the wakeup socket."""
    with _received.lock:
        reader = _received.reader
        while reader is not None:
            try:
                data = reader.recv(64)
            except OSError:  # nothing waiting (BlockingIOError), or closed
                return
            if not data:
                return
            for signum in data:
                if signum in STOP_SIGNALS and _received.signum is None:
                    _received.signum = signum


def _watch(ended: threading.Event, echo: Callable[[str], Any], grace: float) -> None:
    """Record stop signals as they come; after the first, give the command ``grace`` seconds
    to end, then mark its runs, print the line and exit the process."""
    while received() is None:
        reader = _received.reader
        if ended.is_set() or reader is None:
            return
        try:
            select.select([reader], [], [], _WATCH_SECONDS)
        except (OSError, ValueError):  # closed: the block has ended
            return
    if ended.wait(grace):
        return
    stop = Stopped(received() or signal.SIGTERM)
    try:
        instance = dg.DagsterInstance.get() if os.environ.get("DAGSTER_HOME") else None
    except Exception as exc:  # noqa: BLE001 - exit all the same; the next run ends the runs
        log.debug("no instance to mark the runs in: %s", exc)
        instance = None
    try:
        _report(stop, instance, echo)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stop.exit_code)
