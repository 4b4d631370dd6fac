"""Runs the pipeline's Dagster jobs in-process for ``bq-platform run`` and prints summaries.

Each day is two Dagster runs recorded in the instance (``$DAGSTER_HOME``): the hourly job over
the day's hours (one Spark session, per the assets' backfill policy), then the daily publish.
A day whose publish records already name its current content is skipped (see
:mod:`bq_platform.lib.planning`), so a second ``bq-platform run`` changes nothing.

Output: by default one line per step and day with its counts, each failure once (its message,
no traceback), then the summary; Dagster's per-event console log is off (its events stay in
the instance and the UI). ``verbose`` turns the console log back on, with tracebacks.
"""

import dataclasses
import datetime as dt
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import dagster as dg

from bq_platform.instance import CLI_TRIGGER, PID_TAG, TRIGGER_TAG
from bq_platform.lib.accounting import row_balanced
from bq_platform.lib.hours import day_hours, hour_partition_key
from bq_platform.lib.landing_index import LandingIndex, scan_landing
from bq_platform.lib.manifest import ManifestError
from bq_platform.lib.objectstore.base import ObjectStore
from bq_platform.lib.planning import plan_day
from bq_platform.lib.reporting import COUNT_FIELDS
from bq_platform.lib.retention import clean_attempts
from bq_platform.lib.warehouse.base import Warehouse

HOURLY_JOB = "pageviews_hourly_job"
DAILY_JOB = "pageviews_daily_job"
PUBLISH_OPS = ("warehouse__pageviews", "warehouse__pageviews_sample")
# -v: the console shows INFO and up; DEBUG events (every step output) stay in the instance/UI.
CONSOLE_LOGGING = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
# Default: no per-event console lines; the runner prints one line per step (issue 7).
QUIET_LOGGING = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
#: Metadata shown in a step's progress line, in this order, when the step has it.
_PROGRESS_FIELDS = (
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


@dataclasses.dataclass
class PipelineRunner:
    """Plans and executes runs; ``echo`` prints user-facing lines (click.echo in the CLI)."""

    definitions: dg.Definitions
    store: ObjectStore
    warehouse: Warehouse
    visitor_key: str
    echo: Callable[[str], Any] = print
    instance: dg.DagsterInstance | None = None
    """Dagster instance the runs are recorded in; default ``DagsterInstance.get()``."""
    verbose: bool = False
    """Dagster's console log (INFO) and tracebacks, instead of one line per step."""
    processed_days: list[dt.date] = dataclasses.field(default_factory=list)
    check_results: dict[dt.date, list[tuple[str, str, bool]]] = dataclasses.field(
        default_factory=dict
    )

    @classmethod
    def from_environment(
        cls,
        env: str,
        echo: Callable[[str], Any] = print,
        instance: dg.DagsterInstance | None = None,
        verbose: bool = False,
    ) -> "PipelineRunner":
        """Build from the code location's definitions and the resources of ``env``."""
        from bq_platform.definitions import defs
        from bq_platform.defs.resources import build_resources

        resources = build_resources(env)
        settings = resources["settings"]
        return cls(
            definitions=defs(),
            store=resources["object_store"].get_store(),
            warehouse=resources["warehouse"].get_warehouse(),
            visitor_key=settings.visitor_key,
            echo=echo,
            instance=instance,
            verbose=verbose,
        )

    def index(self) -> LandingIndex:
        return scan_landing(self.store)

    def all_days(self) -> list[dt.date]:
        return self.index().days()

    def run(
        self,
        hours: Sequence[dt.datetime] | None = None,
        allow_incomplete: bool = False,
        force: bool = False,
        allow_rejected: bool = False,
    ) -> bool:
        """Process ``hours`` (grouped by day), or every due day; True if every run succeeded.

        ``allow_incomplete`` / ``allow_rejected``: the publish runs' ``allow_incomplete_hours``
        and ``allow_rejected_share`` config (the operator's decision, for this run only).
        """
        index = self.index()
        if hours is None:
            days = index.days()
            if not days:
                self.echo("the landing zone is empty: land files first (bq-platform land)")
                return True
            plans = [plan_day(d, index, self.store, self.warehouse, self.visitor_key) for d in days]
            for plan in plans:
                verdict = "due" if plan.due else ("forced" if force else "skip")
                self.echo(f"{plan.day}: {verdict} ({plan.reason})")
            todo = {p.day: day_hours(p.day) for p in plans if p.due or force}
        else:
            todo = {}
            for hour in hours:
                todo.setdefault(hour.date(), []).append(hour)
        ok = True
        self.warehouse.close()  # release the file: the runs open their own connections
        for day, day_hours_ in sorted(todo.items()):
            ok &= self._run_day(day, day_hours_, allow_incomplete, allow_rejected)
        return ok

    def _run_day(
        self,
        day: dt.date,
        hours: Sequence[dt.datetime],
        allow_incomplete: bool,
        allow_rejected: bool = False,
    ) -> bool:
        instance = self.instance or dg.DagsterInstance.get()
        first, last = hour_partition_key(hours[0]), hour_partition_key(hours[-1])
        self.echo(f"{day}: building hours {first} .. {last}")
        hourly = self.definitions.resolve_job_def(HOURLY_JOB).execute_in_process(
            instance=instance,
            tags={
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
                **self._tags(),
            },
            run_config=self._logging(),
            raise_on_error=False,
        )
        self.processed_days.append(day)
        checks = self._record_checks(day, hourly)
        self._echo_steps(day, hourly)
        if not hourly.success:
            self.echo(f"{day}: hourly run {hourly.run_id} FAILED: {self._failure(hourly)}")
            return False
        self.echo(f"{day}: publishing")
        config = {
            "allow_incomplete_hours": allow_incomplete,
            "allow_rejected_share": allow_rejected,
        }
        daily = self.definitions.resolve_job_def(DAILY_JOB).execute_in_process(
            instance=instance,
            partition_key=day.isoformat(),
            run_config={
                **self._logging(),
                "ops": {op: {"config": config} for op in PUBLISH_OPS},
            },
            tags=self._tags(),
            raise_on_error=False,
        )
        checks += self._record_checks(day, daily)
        self._echo_steps(day, daily)
        if not daily.success:
            self.echo(f"{day}: publish run {daily.run_id} FAILED: {self._failure(daily)}")
            return False
        failed = [c for c in checks if not c[2]]
        self.echo(
            f"{day}: done (runs {hourly.run_id[:8]}, {daily.run_id[:8]}); "
            f"{len(checks) - len(failed)}/{len(checks)} checks passed"
        )
        return True

    def clean_attempts(self) -> None:
        """Delete superseded build attempts (:func:`bq_platform.lib.retention.clean_attempts`).

        Never fails the command: an unreadable manifest or a storage error leaves the attempts
        for the next run, with one line saying why.
        """
        try:
            report = clean_attempts(self.store)
        except (ManifestError, OSError) as exc:
            self.echo(f"cleanup of old attempts skipped: {exc}")
            return
        if report.deleted_units:
            attempts = len({a for a, _ in report.deleted_units})
            self.echo(
                f"cleanup: deleted {report.deleted_objects} files of {attempts} superseded "
                f"attempts ({report.waiting} superseded attempt-hours kept for now)"
            )

    def _tags(self) -> dict[str, str]:
        return {TRIGGER_TAG: CLI_TRIGGER, PID_TAG: str(os.getpid())}

    def _logging(self) -> dict[str, Any]:
        return CONSOLE_LOGGING if self.verbose else QUIET_LOGGING

    def _echo_steps(self, day: dt.date, result: Any) -> None:
        """One line per materialized asset of ``result`` (not per partition): its counts."""
        if self.verbose:
            return
        shown = set()
        for event in result.all_events:
            if not event.is_step_materialization:
                continue
            materialization = event.step_materialization_data.materialization
            if materialization.asset_key in shown:
                continue  # the same metadata on each partition of a multi-partition run
            shown.add(materialization.asset_key)
            metadata = {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
            name = materialization.asset_key.to_user_string()
            self.echo(f"{day}:   {name}: {_progress(metadata)}")

    def _record_checks(self, day: dt.date, result: Any) -> list[tuple[str, str, bool]]:
        checks = [
            (e.asset_key.to_user_string(), e.check_name, e.passed)
            for e in result.get_asset_check_evaluations()
        ]
        self.check_results.setdefault(day, []).extend(checks)
        return checks

    def _failure(self, result: Any) -> str:
        """The first step failure's message, once; with ``verbose``, its traceback too."""
        for event in result.all_events:
            if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
                error = event.step_failure_data.error
                if self.verbose:
                    return f"{event.step_key}: {error.to_string()}"
                user = event.step_failure_data.user_failure_data
                if user is not None and user.description:
                    message = user.description  # a dg.Failure: the message our code wrote
                else:  # another exception, wrapped by Dagster: the original's "Type: message"
                    message = (error.cause or error).message
                return f"{event.step_key}: {message.strip()}"
        return "see the run's logs (bq-platform -v run, or the Dagster UI)"

    def print_summary(self, days: Iterable[dt.date]) -> None:
        """Per day and site: source lines, pageviews, non-page hits, rejected, duplicates,
        out of window, balanced hours, and the check results of this invocation's runs."""
        days = sorted(set(days))
        if not days:
            return
        header = (
            f"{'day':<10} {'site':<16} {'source':>8} {'pages':>8} {'non-page':>8} "
            f"{'rejected':>8} {'dupes':>6} {'out-win':>7} {'sample':>6} {'hours ok':>9}"
        )
        self.echo("\n" + header)
        self.echo("-" * len(header))
        for day in days:
            hours = day_hours(day)
            rows = self.warehouse.audit_rows(hours[0], hours[-1] + dt.timedelta(hours=1))
            by_site: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_site.setdefault(row["site"], []).append(row)
            for site, site_rows in sorted(by_site.items()):
                s = {k: sum(r[k] for r in site_rows) for k in COUNT_FIELDS}
                ok = sum(row_balanced(r) for r in site_rows)
                self.echo(
                    f"{day!s:<10} {site:<16} {s['source_lines']:>8} {s['pageviews']:>8} "
                    f"{s['non_page_hits']:>8} {s['rejected']:>8} {s['duplicates']:>6} "
                    f"{s['out_of_window']:>7} {s['sample_rows']:>6} {ok:>4}/{len(site_rows):<4}"
                )
            # One line per check, not per partition: an hourly check runs 24 times a day.
            outcomes: dict[tuple[str, str], list[bool]] = {}
            for asset, check, passed in self.check_results.get(day, []):
                outcomes.setdefault((asset, check), []).append(passed)
            for (asset, check), results in outcomes.items():
                failed = results.count(False)
                verdict = f"FAILED ({failed} of {len(results)})" if failed else "passed"
                times = f" x{len(results)}" if len(results) > 1 and not failed else ""
                self.echo(f"{'':<10} check {asset}:{check}: {verdict}{times}")


def _progress(metadata: dict[str, Any]) -> str:
    """``'24 hours, 33,996 source lines, ...'`` from a materialization's metadata."""
    parts = []
    for key, label in _PROGRESS_FIELDS:
        value = metadata.get(key)
        if value is None:
            continue
        if key == "job_action":
            parts.append(f"job {value}")
        elif key == "seconds":
            parts.append(f"{value} s")
        elif isinstance(value, int):
            parts.append(f"{value:,} {label}")
    return ", ".join(parts)
