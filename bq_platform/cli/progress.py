"""Progress lines of an in-process Dagster run whose console log is off, printed as it runs:
the build's pass lines and one line per asset, from the run's new event-log records. Best
effort: a failed read skips that poll; :meth:`RunProgress.done` prints each asset's line anyway.
"""

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import dagster as dg

from bq_platform.lib.core.reporting import PASS_PROGRESS, STEP_TOTALS

#: Seconds between two reads of the run's new records.
POLL_SECONDS = 1.0
#: Metadata shown in a step's line, in this order, when the step has it.
PROGRESS_FIELDS = (
    ("days", "days"),
    ("hours", "hours"),
    ("source_lines", "source lines"),
    ("pageviews", "pageviews"),
    ("rejected", "rejected"),
    ("out_of_window", "out of window"),
    ("duplicates", "duplicates"),
    ("rows", "rows"),
    ("jobs_submitted", "jobs submitted"),
    ("jobs_skipped", "skipped"),
    ("job_action", "job"),
    ("seconds", "s"),
)


def step_line(metadata: Mapping[str, Any]) -> str:
    """``'24 hours, 33,996 source lines, ...'`` from a materialization's metadata values (an
    hourly step's :data:`~bq_platform.lib.core.reporting.STEP_TOTALS` when it has them)."""
    metadata = metadata.get(STEP_TOTALS) or metadata
    parts = []
    for key, label in PROGRESS_FIELDS:
        value = metadata.get(key)
        if value is None:
            continue
        if key == "job_action":
            parts.append(f"job {value}")
        elif key == "seconds":
            parts.append(f"{value} s")
        elif key == "pageviews" and isinstance(value, int) and _apart(metadata):
            human, bot = metadata["human_pageviews"], metadata["bot_pageviews"]
            parts.append(f"{value:,} pageviews (human {human:,}, bot {bot:,})")
        elif isinstance(value, int):
            parts.append(f"{value:,} {label}")
    return ", ".join(parts)


def _apart(metadata: Mapping[str, Any]) -> bool:
    """Whether ``metadata`` has the pages by traffic class, as whole numbers."""
    return all(isinstance(metadata.get(k), int) for k in ("human_pageviews", "bot_pageviews"))


@dataclasses.dataclass
class RunProgress:
    """Prints the progress of the run ``run_id`` as ``'<label>:   <line>'`` through ``echo``:
    :meth:`start` before the run is launched, :meth:`done` with its result after it returned."""

    instance: dg.DagsterInstance
    run_id: str
    label: str
    echo: Callable[[str], Any]
    poll_seconds: float = POLL_SECONDS
    _shown: set[dg.AssetKey] = dataclasses.field(default_factory=set, init=False, repr=False)
    _cursor: str | None = dataclasses.field(default=None, init=False, repr=False)
    _stop: threading.Event = dataclasses.field(
        default_factory=threading.Event, init=False, repr=False
    )
    _thread: threading.Thread | None = dataclasses.field(default=None, init=False, repr=False)

    def start(self) -> "RunProgress":
        """Start polling on a daemon thread; returns self."""
        self._thread = threading.Thread(target=self._poll, name="run-progress", daemon=True)
        self._thread.start()
        return self

    def done(self, result: Any) -> None:
        """Stop polling, then print what the polls have not (from ``result``'s own events)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._read()
        for event in result.all_events:
            if event.is_step_materialization:
                self._materialized(event.step_materialization_data.materialization)

    def _poll(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            self._read()

    def _read(self) -> None:
        try:
            while True:
                page = self.instance.get_records_for_run(self.run_id, cursor=self._cursor)
                self._cursor = page.cursor
                self._show(record.event_log_entry for record in page.records)
                if not page.has_more:
                    return
        except Exception:  # noqa: BLE001 - progress is best effort; done() prints the steps
            return

    def _show(self, entries: Iterable[Any]) -> None:
        for entry in entries:
            event = entry.dagster_event
            if event is None:
                if entry.step_key and PASS_PROGRESS.match(entry.user_message or ""):
                    self.echo(f"{self.label}:   {entry.user_message}")
            elif event.is_step_materialization:
                self._materialized(event.step_materialization_data.materialization)

    def _materialized(self, materialization: Any) -> None:
        if materialization.asset_key in self._shown:
            return  # one line per asset: a range step's totals are on each partition
        self._shown.add(materialization.asset_key)
        values = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
        name = materialization.asset_key.to_user_string()
        self.echo(f"{self.label}:   {name}: {step_line(values)}")
