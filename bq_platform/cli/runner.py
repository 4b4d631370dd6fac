"""Runs the pipeline's Dagster jobs in-process for ``bq-platform run`` and prints summaries.

Due days run in batches of consecutive days (:func:`~bq_platform.lib.planning.batches`): one
hourly run over the batch's hours (one Spark pass), then the daily publish; a failed batch is
redone day by day. A day whose publish records already name its current content, and whose
last daily run did not fail, is skipped (:func:`~bq_platform.lib.planning.plan_day`), so a
second ``run`` changes nothing. A day with hours to reclassify (unchanged input, another
traffic classifier) is held unless :attr:`PipelineRunner.reclassify`, which the hourly runs
then pass as the build's run config. Unless ``verbose``, Dagster's console log is off and the runner
prints one line per step and day, and each failure once, without traceback, naming where it
happened and the fix.
"""

import dataclasses
import datetime as dt
import functools
import os
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import dagster as dg

from bq_platform.cli.progress import RunProgress
from bq_platform.cli.signals import raise_if_stopped
from bq_platform.defs.publish_status import failed_publishes
from bq_platform.defs.run_tags import CLI_TRIGGER, PID_TAG, TRIGGER_TAG
from bq_platform.lib.core.hours import day_hours, hour_label, partition_day
from bq_platform.lib.core.manifest import ManifestError
from bq_platform.lib.core.reporting import CheckFailure, capped, summary_table
from bq_platform.lib.hourly_build.retention import clean_staging
from bq_platform.lib.planning import (
    Reclassification,
    batches,
    plan_day,
    reclassifications,
    scan_window,
)
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.warehouse.base import Warehouse

HOURLY_JOB = "pageviews_hourly_job"
DAILY_JOB = "pageviews_daily_job"
PUBLISH_OPS = ("warehouse__pageviews", "warehouse__pageviews_sample")
#: The hourly build's op (asset ``lake/pageview_files``), whose config ``reclassify`` allows
#: restating the traffic classification of hours with unchanged input.
BUILD_OP = "lake__pageview_files"
# -v: the console shows INFO and up; DEBUG events (every step output) stay in the instance/UI.
CONSOLE_LOGGING = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
# Default: no per-event console lines; the runner prints one line per step.
QUIET_LOGGING = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclasses.dataclass
class PipelineRunner:
    """Plans and executes runs; ``echo`` prints user-facing lines (click.echo in the CLI)."""

    load_definitions: Callable[[], dg.Definitions]
    """Loads the code location's definitions (in the CLI ``bq_platform.definitions.defs``);
    called once, when the first run is launched, so a ``run`` with nothing to do skips it."""
    store: ObjectStore
    warehouse: Warehouse
    visitor_key: str
    echo: Callable[[str], Any] = print
    instance: dg.DagsterInstance | None = None
    """Dagster instance the runs are recorded in; default ``DagsterInstance.get()``."""
    verbose: bool = False
    """Dagster's console log (INFO) and tracebacks, instead of one line per step."""
    thresholds: ClassificationThresholds | None = None
    """The traffic classification's configuration the hours are built with (None: the
    defaults); planning expects its fingerprints."""
    lookback_days: int = 0
    """Plan only the UTC days from this many days before today on; 0: every landed day."""
    reclassify: bool = False
    """Build hours whose landed input is unchanged but whose traffic classifier is not the
    installed one (``bq-platform run --reclassify``); without it their days are held."""
    held: list[Reclassification] = dataclasses.field(default_factory=list)
    """The hours :meth:`plan` held for reclassification (their days are not run)."""
    processed_days: list[dt.date] = dataclasses.field(default_factory=list)
    landed_days: list[dt.date] = dataclasses.field(default_factory=list)
    """The landed days :meth:`run` planned (a scan of every landed manifest), kept for the
    summary of a run that had nothing to do."""
    check_results: dict[dt.date, list[tuple[str, str, bool]]] = dataclasses.field(
        default_factory=dict
    )
    check_failures: dict[dt.date, list[CheckFailure]] = dataclasses.field(default_factory=dict)
    """The failed check results of this invocation's runs, per UTC day of their partition."""
    printed_failures: set[str] = dataclasses.field(default_factory=set)
    """Failure lines printed so far: each is printed once."""

    @classmethod
    def from_environment(
        cls,
        env: str,
        echo: Callable[[str], Any] = print,
        instance: dg.DagsterInstance | None = None,
        verbose: bool = False,
        reclassify: bool = False,
    ) -> "PipelineRunner":
        """Build from the code location's definitions and the resources of ``env``."""
        from bq_platform.definitions import defs
        from bq_platform.defs.resources import build_resources, resolved

        resources = {key: resolved(value) for key, value in build_resources(env).items()}
        settings = resources["settings"]
        return cls(
            load_definitions=defs,
            store=resources["object_store"].get_store(),
            warehouse=resources["warehouse"].get_warehouse(),
            visitor_key=settings.visitor_key,
            lookback_days=settings.lookback_days,
            thresholds=settings.traffic_thresholds(),
            echo=echo,
            instance=instance,
            verbose=verbose,
            reclassify=reclassify,
        )

    @functools.cached_property
    def definitions(self) -> dg.Definitions:
        """The definitions :attr:`load_definitions` gives, loaded on first use."""
        return self.load_definitions()

    def all_days(self) -> list[dt.date]:
        """The landed days it plans: all, or those of the lookback window."""
        return scan_window(self.store, self.lookback_days).days()

    def run(
        self,
        hours: Sequence[dt.datetime] | None = None,
        allow_incomplete: bool = False,
        force: bool = False,
        allow_rejected: bool = False,
    ) -> bool:
        """:meth:`plan`, then :meth:`execute`; ``allow_*`` set the publish runs' config for
        this run only. False if a run failed or hours were :attr:`held`."""
        ok = self.execute(self.plan(hours, force), allow_incomplete, allow_rejected)
        return ok and not self.held

    def plan(
        self, hours: Sequence[dt.datetime] | None = None, force: bool = False
    ) -> dict[dt.date, list[dt.datetime]]:
        """The hours to build, by UTC day: ``hours``, or those of every due landed day (each
        day's verdict echoed; ``force``: every landed day). Reads the landing zone, the
        warehouse and the days' latest publish runs in :attr:`instance` (a day whose latest
        one failed is due), then releases the warehouse file.

        Unless :attr:`reclassify`, a day with hours whose input is unchanged but whose
        classifier is not the installed one is left out, even with ``force``, and those hours
        are kept in :attr:`held`.
        """
        if hours is None:
            index = scan_window(self.store, self.lookback_days)
            if index.since is not None:
                self.echo(
                    f"planning the landed days from {index.since} on (BQ_PLATFORM_LOOKBACK_DAYS)"
                )
            days = self.landed_days = index.days()
            if not days:
                self.echo(index.empty_reason())
            failed = {}
            if days:
                failed = failed_publishes(self.instance or dg.DagsterInstance.get(), days)
            plans = [
                plan_day(
                    d,
                    index,
                    self.store,
                    self.warehouse,
                    self.visitor_key,
                    failed_publishes=failed,
                    thresholds=self.thresholds,
                    reclassify=self.reclassify,
                )
                for d in days
            ]
            for plan in plans:
                verdict = "due" if plan.due else ("forced" if force else "skip")
                if plan.held:  # the hours are named once, by the caller
                    self.held += [r for r in plan.reclassify if r.hour in plan.held]
                    self.echo(f"{plan.day}: held ({len(plan.held)} hours to reclassify)")
                    continue
                self.echo(f"{plan.day}: {verdict} ({plan.reason})")
            todo = {p.day: day_hours(p.day) for p in plans if (p.due or force) and not p.held}
        else:
            todo = {}
            for hour in hours:
                todo.setdefault(hour.date(), []).append(hour)
            if not self.reclassify:
                self.held = reclassifications(self.store, hours, self.thresholds)
                for day in sorted({r.hour.date() for r in self.held}):
                    n = sum(r.hour.date() == day for r in self.held)
                    self.echo(f"{day}: held ({n} hours to reclassify)")
                    del todo[day]
        self.warehouse.close()  # release the file: the runs open their own connections
        return todo

    def execute(
        self,
        todo: Mapping[dt.date, Sequence[dt.datetime]],
        allow_incomplete: bool = False,
        allow_rejected: bool = False,
    ) -> bool:
        """Build and publish what :meth:`plan` gave, batch by batch; True if every run
        succeeded (nothing to do: True)."""
        ok = True
        for batch in batches(todo):
            ok &= self._run_batch(batch, allow_incomplete, allow_rejected)
        return ok

    def _run_batch(
        self,
        batch: dict[dt.date, list[dt.datetime]],
        allow_incomplete: bool,
        allow_rejected: bool,
    ) -> bool:
        """One hourly run over ``batch`` (consecutive days -> hours), one daily run over its
        days; a failed multi-day run is redone day by day. True if every run succeeded."""
        days = sorted(batch)
        label = str(days[0]) if len(days) == 1 else f"{days[0]}..{days[-1]}"
        hours = [hour for day in days for hour in batch[day]]
        hourly = self._build(label, hours)
        if not hourly.success:
            failure = f"{label}: hourly run {hourly.run_id} FAILED: {self._failure(hourly)}"
            if len(days) == 1:
                self._record_checks(hourly, days[0])
                self.echo(failure)
                self.processed_days.append(days[0])
                return False
            self.echo(f"{failure}; building day by day, so a bad hour holds only its own day")
            results = [
                self._run_batch({d: batch[d]}, allow_incomplete, allow_rejected) for d in days
            ]
            return all(results)
        self._record_checks(hourly, days[0] if len(days) == 1 else None)
        self.processed_days.extend(days)
        if len(days) > 1 and self._publish(days, hourly.run_id, allow_incomplete, allow_rejected):
            return True
        if len(days) > 1:
            self.echo(f"{label}: publishing day by day, so a bad day holds only itself")
        results = [
            self._publish([day], hourly.run_id, allow_incomplete, allow_rejected) for day in days
        ]
        return all(results)

    def _build(self, label: str, hours: Sequence[dt.datetime]) -> Any:
        """The hourly job over ``hours`` (consecutive), in process; its result."""
        first, last = hour_label(hours[0]), hour_label(hours[-1])
        self.echo(f"{label}: building hours {first} .. {last}")
        instance = self.instance or dg.DagsterInstance.get()
        progress = self._progress(instance, label)
        hourly = self.definitions.resolve_job_def(HOURLY_JOB).execute_in_process(
            instance=instance,
            run_id=progress.run_id,
            tags={
                "dagster/asset_partition_range_start": first,
                "dagster/asset_partition_range_end": last,
                **self._tags(),
            },
            run_config={
                **self._logging(),
                "ops": {BUILD_OP: {"config": {"reclassify": self.reclassify}}},
            },
            raise_on_error=False,
        )
        self._echo_steps(progress, hourly)
        raise_if_stopped(hourly.run_id)  # a stop signal during the run ended it
        return hourly

    def _publish(
        self,
        days: Sequence[dt.date],
        hourly_run_id: str,
        allow_incomplete: bool,
        allow_rejected: bool,
    ) -> bool:
        """One daily run over ``days`` (consecutive: a partition range if several); prints its
        steps and each day's verdict, or a range's failure in one line."""
        label = str(days[0]) if len(days) == 1 else f"{days[0]}..{days[-1]}"
        self.echo(f"{label}: publishing")
        config = {
            "allow_incomplete_hours": allow_incomplete,
            "allow_rejected_share": allow_rejected,
        }
        tags = self._tags()
        if len(days) > 1:  # one day: partition_key
            tags["dagster/asset_partition_range_start"] = days[0].isoformat()
            tags["dagster/asset_partition_range_end"] = days[-1].isoformat()
        instance = self.instance or dg.DagsterInstance.get()
        progress = self._progress(instance, label)
        daily = self.definitions.resolve_job_def(DAILY_JOB).execute_in_process(
            instance=instance,
            run_id=progress.run_id,
            partition_key=days[0].isoformat() if len(days) == 1 else None,
            run_config={
                **self._logging(),
                "ops": {op: {"config": config} for op in PUBLISH_OPS},
            },
            tags=tags,
            raise_on_error=False,
        )
        self._echo_steps(progress, daily)
        raise_if_stopped(daily.run_id)
        if not daily.success:
            self.echo(f"{label}: publish run {daily.run_id} FAILED: {self._failure(daily)}")
            if len(days) == 1:
                self._record_checks(daily, days[0])
            return False
        self._record_checks(daily, days[0] if len(days) == 1 else None)
        for day in days:
            checks = self.check_results.get(day, [])
            failed = [c for c in checks if not c[2]]
            self.echo(
                f"{day}: done (runs {hourly_run_id[:8]}, {daily.run_id[:8]}); "
                f"{len(checks) - len(failed)}/{len(checks)} checks passed"
            )
        return True

    def clean_attempts(self) -> None:
        """Delete superseded build attempts
        (:func:`bq_platform.lib.hourly_build.retention.clean_staging`);
        never fails the command: on error the attempts wait for the next run, with one line."""
        try:
            report = clean_staging(self.store)
        except (ManifestError, OSError) as exc:
            self.echo(f"cleanup of old attempts skipped: {exc}")
            return
        if report.deleted_units or report.deleted_rollups or report.bad_records:
            self.echo(f"cleanup: {report.describe()}")

    def _tags(self) -> dict[str, str]:
        return {TRIGGER_TAG: CLI_TRIGGER, PID_TAG: str(os.getpid())}

    def _logging(self) -> dict[str, Any]:
        return CONSOLE_LOGGING if self.verbose else QUIET_LOGGING

    def _progress(self, instance: dg.DagsterInstance, label: str) -> RunProgress:
        """The progress printer of the next run (a new run ID), started unless ``verbose``
        (Dagster's console log then shows everything)."""
        progress = RunProgress(instance, str(uuid.uuid4()), label, self.echo)
        return progress if self.verbose else progress.start()

    def _echo_steps(self, progress: RunProgress, result: Any) -> None:
        """One line per materialized asset of ``result`` (not per partition), with its counts:
        the ones :class:`RunProgress` has not printed while the run ran."""
        if not self.verbose:
            progress.done(result)

    def _record_checks(self, result: Any, default: dt.date | None = None) -> None:
        """Keep the run's check results per UTC day of their partition (``check_results``, and
        the failed ones in ``check_failures``); a result without a partition counts for
        ``default`` (if given)."""
        for evaluation in result.get_asset_check_evaluations():
            day = partition_day(evaluation.partition) or default
            if day is None:
                continue
            asset = evaluation.asset_key.to_user_string()
            self.check_results.setdefault(day, []).append(
                (asset, evaluation.check_name, evaluation.passed)
            )
            if not evaluation.passed:
                self.check_failures.setdefault(day, []).append(self._check_failure(evaluation))

    def _failure(self, result: Any) -> str:
        """The first step failure's message: a failed blocking check's description (where, and
        what to do), at most :data:`~bq_platform.lib.core.reporting.MAX_FAILURE_LINES` of them,
        one line each; else the exception's message. A line printed before is not repeated.
        With ``verbose``, the traceback."""
        for event in result.all_events:
            if event.is_step_failure and event.step_failure_data and event.step_failure_data.error:
                error = event.step_failure_data.error
                if self.verbose:
                    return f"{event.step_key}: {error.to_string()}"
                checks = [f.line() for f in self._blocking_failures(result, event.step_key)]
                user = event.step_failure_data.user_failure_data
                if checks:
                    lines = capped(checks)
                elif user is not None and user.description:
                    lines = [user.description.strip()]  # a dg.Failure: our code's message
                else:  # another exception, wrapped by Dagster: the original's "Type: message"
                    lines = [(error.cause or error).message.strip()]
                lines = self._once(lines)
                if len(lines) == 1:
                    return f"{event.step_key}: {lines[0]}"
                return f"{event.step_key}:" + "".join(f"\n  {line}" for line in lines)
        return "see the run's logs (bq-platform -v run, or the Dagster UI)"

    def _once(self, lines: Sequence[str]) -> list[str]:
        """``lines`` not printed before, then ``the same failure(s) as above`` for the others;
        remembers them all as printed."""
        new = [line for line in lines if line not in self.printed_failures]
        self.printed_failures.update(lines)
        repeated = len(lines) - len(new)
        if repeated:
            new.append(f"the same {'failure' if repeated == 1 else 'failures'} as above")
        return new

    @staticmethod
    def _check_failure(evaluation: dg.AssetCheckEvaluation) -> CheckFailure:
        """A failed check evaluation as the runner prints it (its description carries where
        and what to do)."""
        return CheckFailure(
            asset=evaluation.asset_key.to_user_string(),
            check=evaluation.check_name,
            partition=evaluation.partition,
            description=evaluation.description or "",
            blocking=bool(evaluation.blocking)
            and evaluation.severity == dg.AssetCheckSeverity.ERROR,
        )

    @classmethod
    def _blocking_failures(cls, result: Any, step_key: str | None) -> list[CheckFailure]:
        """The failed blocking checks (ERROR severity) that step ``step_key`` of ``result``
        reported: what made Dagster fail that step."""
        failures = []
        for event in result.all_events:
            if (
                event.event_type_value == dg.DagsterEventType.ASSET_CHECK_EVALUATION.value
                and event.step_key == step_key
                and not event.asset_check_evaluation_data.passed
            ):
                failure = cls._check_failure(event.asset_check_evaluation_data)
                if failure.blocking:
                    failures.append(failure)
        return failures

    def print_summary(self, days: Iterable[dt.date]) -> None:
        """Per day and site: source lines, pageviews, non-page hits, rejected, duplicates,
        out of window, balanced hours, and the check results of this invocation's runs, with
        the descriptions of the failed ones not printed before."""
        days = sorted(set(days))
        if not days:
            return
        rows = {}
        for day in days:
            hours = day_hours(day)
            rows[day] = self.warehouse.audit_rows(hours[0], hours[-1] + dt.timedelta(hours=1))
        failures = {
            day: [f for f in found if f.line() not in self.printed_failures]
            for day, found in self.check_failures.items()
        }
        self.echo("")
        for line in summary_table(rows, self.check_results, failures):
            self.echo(line)
