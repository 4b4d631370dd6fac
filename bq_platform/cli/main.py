"""``bq-platform``: land access logs and run the pipeline through Dagster from a shell.

Each command's docstring is its ``--help``. ``run`` records Dagster runs in the instance under
``$DAGSTER_HOME`` (default ``.bq_platform/dagster_home``), so ``dagster dev`` shows them; one
``run`` at a time per data folder (:mod:`bq_platform.cli.instance`).
"""

import collections
import datetime as dt
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bq_platform import settings
from bq_platform.cli.plan import plan as plan_command
from bq_platform.lib.core.hours import hours_between
from bq_platform.lib.core.layout import parse_hour_label

if TYPE_CHECKING:
    from bq_platform.cli.runner import PipelineRunner
    from bq_platform.lib.storage.base import ObjectStore

log = logging.getLogger("bq_platform")

#: Loggers that print set-up chatter at INFO (dagster's SQLite migrations, the Spark gateway).
_CHATTY_LOGGERS = ("alembic", "py4j", "dagster")


def _home() -> Path:
    return settings.local_home()


def _ensure_dagster_home() -> Path:
    """Use ``$DAGSTER_HOME``, else ``<BQ_PLATFORM_HOME>/dagster_home``, with a dagster.yaml that
    has every block of :data:`bq_platform.cli.instance.INSTANCE_BLOCKS`."""
    from bq_platform.cli.instance import dagster_home, ensure_dagster_yaml

    home = dagster_home(_home() / "dagster_home")
    try:
        ensure_dagster_yaml(home)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    return home


def _runner(**kwargs: Any) -> "PipelineRunner":
    """The runner of ``BQ_PLATFORM_ENV``'s resources; a setting that is wrong or missing (an
    unknown environment, an unset production variable) is a one-line error naming it."""
    from bq_platform.cli.runner import PipelineRunner

    try:
        return PipelineRunner.from_environment(settings.env_name(), **kwargs)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


def _parse_hour(value: str) -> dt.datetime:
    try:
        return parse_hour_label(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: use UTC hours like 1995-08-01T04") from exc


@click.group()
@click.option(
    "-v", "--verbose", is_flag=True, help="Every log line (Dagster, Spark, warehouse jobs)."
)
@click.pass_context
def main(ctx: click.Context, verbose: bool) -> None:
    """Pageview pipeline: landed access logs -> Spark -> Parquet -> warehouse tables."""
    ctx.ensure_object(dict)["verbose"] = verbose
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in _CHATTY_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO if verbose else logging.WARNING)
    if verbose:
        os.environ[settings.SPARK_VERBOSE] = "1"  # read by settings.spark_verbose


def _landed_summary(landed: Sequence[Any]) -> str:
    """``N new lines in H hours (W objects written, A already there, R repaired)``."""
    new = [f for f in landed if not f.repaired]
    return (
        f"{sum(f.manifest.lines for f in new)} new lines in "
        f"{len({f.manifest.hour for f in new})} hours ({sum(f.written for f in new)} objects "
        f"written, {sum(not f.written for f in new)} already there, "
        f"{sum(f.repaired for f in landed)} repaired)"
    )


@main.command()
@click.option("--site", required=True, help="Publisher key, e.g. epa.gov.")
@click.option(
    "--default-hour",
    default=None,
    help="UTC hour (YYYY-MM-DDTHH) for files with no readable timestamp.",
)
@click.option(
    "--source",
    default=None,
    help="Name of the source in the landing registry (default: the file name). Landing the "
    "same source again lands only its new lines; give one FILE with it.",
)
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def land(site: str, default_hour: str | None, source: str | None, files: Sequence[str]) -> None:
    """Land the new lines of log FILES of SITE into the landing zone, split by UTC hour.

    Each file is a source (site + name): landing it again lands only the lines added since
    (a growing log counts once), repairs landed objects that went missing or corrupt, and
    starts over when the file was rotated or truncated. A file that fails is named and the
    others still land; the exit status is then 1.
    """
    from bq_platform.lib.core.layout import validate_site
    from bq_platform.lib.landing.producer.land import land_all

    if source is not None and len(files) != 1:
        raise click.UsageError("--source names one file: give exactly one FILE with it")
    try:
        validate_site(site)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    store = _landing_store()
    hour = _parse_hour(default_hour) if default_hour else None
    landed, failed = land_all(
        store,
        site,
        files,
        source=source,
        default_hour=hour,
        first_hour=settings.first_hour(),
        log=log,
    )
    if len(failed) < len(files):
        click.echo(f"{site}: {_landed_summary(landed)}")
    if len(files) == 1 and failed:
        raise click.ClickException(failed[0].reason)
    for failure in failed:
        click.echo(failure.reason, err=True)
    if failed:
        raise click.ClickException(
            f"{len(failed)} of {len(files)} files did not land (above); fix them and land them "
            "again: what landed is kept, and nothing counts twice"
        )


@main.command("land-tree")
@click.argument("root", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Sites landed at once, in worker processes (default: the CPUs this process may use).",
)
def land_tree(root: str, workers: int | None) -> None:
    """Land every file under ROOT/<site>/ (the folder name is the site; each file a source).

    Sites land in parallel; one line per site, in name order. A file that fails is named on
    its site's line and the rest still lands; the exit status is then 1.
    """
    from bq_platform.lib.core.manifest import LandingError
    from bq_platform.lib.landing.producer.tree import default_workers, land_sites, site_folders

    failed_sites = []
    try:
        folders = site_folders(root)
        for site in land_sites(
            _landing_store,
            folders,
            first_hour=settings.first_hour(),
            workers=workers or default_workers(),
            log=log,
        ):
            line = f"{site.site}: {site.files} files, {_landed_summary(site.landed)}"
            if site.failed:
                failed_sites.append(site.site)
                reasons = "; ".join(f.reason for f in site.failed)
                line += f"; {len(site.failed)} FAILED: {reasons}"
            click.echo(line)
    except (LandingError, ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc
    if failed_sites:
        raise click.ClickException(
            f"{len(failed_sites)} of {len(folders)} sites have files that did not land "
            f"({', '.join(failed_sites)}: see above); fix them and run land-tree again: what "
            "landed is kept, and nothing counts twice"
        )


def _landing_store() -> "ObjectStore":
    """The environment's object store, without Dagster (built in each worker, after its fork)."""
    try:
        return settings.object_store(settings.env_name())
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


@main.command()
@click.option("--start", default=None, help="First UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--end", default=None, help="Last UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option(
    "--allow-incomplete", is_flag=True, help="Publish days even if some hours are incomplete."
)
@click.option(
    "--allow-rejected",
    is_flag=True,
    help="Publish hours whose rejected share is above BQ_PLATFORM_MAX_REJECTED_SHARE.",
)
@click.option("--force", is_flag=True, help="Re-run days that look up to date (still idempotent).")
@click.option(
    "--reclassify",
    is_flag=True,
    help="Also rebuild hours whose landed input is unchanged but whose traffic classifier "
    "(crawler list, ua-parser rules, thresholds) is not the installed one; without it they "
    "are held, named, and the exit status is 1. Preview first: bq-platform reclassify-preview.",
)
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    default=3600.0,
    show_default=True,
    help="Seconds to wait while another bq-platform run uses this data folder; 0 refuses.",
)
@click.pass_context
def run(
    ctx: click.Context,
    start: str | None,
    end: str | None,
    allow_incomplete: bool,
    allow_rejected: bool,
    force: bool,
    reclassify: bool,
    wait_seconds: float,
) -> None:
    """Process every landed day not yet published (or the hours START..END) through Dagster.

    Hours whose landed input is unchanged but whose traffic classifier is not the installed one
    are not rebuilt without --reclassify: their days are held, the hours named, and the exit
    status is 1 once the other days are done.

    SIGTERM or SIGINT stops it within seconds: its runs are marked canceled, one line names the
    signal, and the exit status is 128 + the signal's number (143, 130); a later ``run``
    continues where it stopped.
    """
    import dagster as dg

    from bq_platform.cli.instance import RunLockTimeout, dagster_home, fail_dead_runs, run_lock
    from bq_platform.cli.signals import Stopped, finish, stop_on_signals

    home = dagster_home(_home() / "dagster_home")
    hours = _hour_range(start, end)
    with stop_on_signals(echo=_echo_err):
        try:
            with run_lock(home, wait_seconds, on_wait=_echo_err):
                # The config written, the instance created and its SQLite schema migrated by
                # the lock holder only.
                _ensure_dagster_home()
                runner = _runner(echo=click.echo, verbose=ctx.obj["verbose"], reclassify=reclassify)
                started = time.monotonic()
                with dg.DagsterInstance.get() as instance:
                    try:
                        for run_id in fail_dead_runs(instance):
                            click.echo(f"run {run_id} lost its process (killed?): marked failed")
                        runner.instance = instance
                        # After fail_dead_runs: a killed publish run counts as failed in the plan.
                        todo = runner.plan(hours, force)
                        _run(runner, todo, started, allow_incomplete, allow_rejected)
                    except Stopped as stop:
                        finish(stop, instance, _echo_err)
        except Stopped as stop:  # before the instance was opened: no run to end
            finish(stop, None, _echo_err)
        except RunLockTimeout as exc:
            raise click.ClickException(str(exc)) from exc


def _echo_err(message: str) -> None:
    click.echo(message, err=True)


def _hour_range(start: str | None, end: str | None) -> list[dt.datetime] | None:
    if start or end:
        if not (start and end):
            raise click.UsageError("--start and --end go together")
        first, last = _parse_hour(start), _parse_hour(end)
        if last < first:
            raise click.UsageError("--end is before --start")
        return hours_between(first, last + dt.timedelta(hours=1))
    return None


def _run(
    runner: "PipelineRunner",
    todo: Mapping[dt.date, Sequence[dt.datetime]],
    started: float,
    allow_incomplete: bool,
    allow_rejected: bool,
) -> None:
    ok = runner.execute(todo, allow_incomplete=allow_incomplete, allow_rejected=allow_rejected)
    runner.clean_attempts()
    click.echo(f"\nfinished in {time.monotonic() - started:.1f} s")
    runner.print_summary(runner.processed_days or runner.landed_days)
    if runner.held:
        from bq_platform.lib.planning import reclassify_refusal

        click.echo(f"\nDays held: {reclassify_refusal(runner.held)}", err=True)
    if not ok:
        click.echo(
            "\nSome runs failed; see the messages above, `bq-platform -v run` for every log line, "
            "and the Dagster UI (make dev).",
            err=True,
        )
    if runner.held or not ok:
        sys.exit(1)


@main.command()
def home() -> None:
    """Prepare the Dagster home that `run` and `make dev` use, and print its path.

    Writes its dagster.yaml, or adds the blocks it lacks; `run` does the same by itself.
    """
    click.echo(_ensure_dagster_home())


@main.command()
def summary() -> None:
    """Print the accounting summary per day and site from the audit table."""
    runner = _runner(echo=click.echo)
    runner.print_summary(runner.all_days())


@main.command()
@click.option("--start", default=None, help="First UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--end", default=None, help="Last UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--reason", default=None, help="Only this reason code, e.g. malformed.")
@click.option(
    "--limit", type=click.IntRange(min=0), default=20, show_default=True, help="Sample lines."
)
def deadletters(start: str | None, end: str | None, reason: str | None, limit: int) -> None:
    """List rejected and out-of-window lines: counts per reason, then samples.

    Reads the dead-letter files the hour manifests name (current attempts only).
    """
    from bq_platform.lib.core.layout import hour_label
    from bq_platform.lib.quality.deadletters import built_hours, cut, read_dead_letters, summarize

    store = _landing_store()
    hours = _hour_range(start, end) or built_hours(store)
    report = summarize(read_dead_letters(store, hours), reason=reason, limit=limit)
    if not report.total:
        click.echo(
            f"no dead letters in {len(hours)} hours" + (f" with reason {reason}" if reason else "")
        )
        return
    click.echo(f"{report.total} dead letters in {len(hours)} hours")
    for name, count in report.counts.items():
        click.echo(f"{count:>10}  {name}")
    if report.samples:
        click.echo(f"\n{'site':<16} {'hour':<13} {'line':>7} {'reason':<16} file / raw")
    for d in report.samples:
        click.echo(
            f"{d.site:<16} {hour_label(d.hour):<13} {d.line_no:>7} {d.reason:<16} {d.data_key}"
        )
        click.echo(f"{'':<55}{cut(d.raw)}")


def _parse_day(value: str | None) -> dt.date | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: use UTC days like 2019-01-22") from exc


@main.command("reclassify-preview")
@click.option("--from", "first", default=None, help="First UTC day, YYYY-MM-DD (inclusive).")
@click.option("--to", "last", default=None, help="Last UTC day, YYYY-MM-DD (inclusive).")
def reclassify_preview(first: str | None, last: str | None) -> None:
    """Show what the installed traffic classifier would change in the published sample.

    Classifies the rows of pageviews_sample of the days again with the installed crawler list
    and the configured thresholds and prints, per day and site, the rows that would move
    between human and bot, and the user agents that move most. Writes nothing; restate with
    `bq-platform run --reclassify`. Default days: the landed ones (BQ_PLATFORM_LOOKBACK_DAYS).
    On BigQuery it runs one query over the sample's partitions of these days.
    """
    from bq_platform.lib.core.hours import day_hours
    from bq_platform.lib.core.manifest import ManifestError, read_hour_manifests
    from bq_platform.lib.planning import classifier_change
    from bq_platform.lib.quality.reclassify_preview import preview_lines, preview_sample
    from bq_platform.lib.traffic.thresholds import ClassificationThresholds
    from bq_platform.lib.traffic.version import classifier_version

    runner = _runner(echo=click.echo)
    thresholds = runner.thresholds or ClassificationThresholds()
    start, end = _parse_day(first), _parse_day(last)
    landed = runner.all_days()
    if start is None or end is None:
        if not landed and (start or end) is None:
            raise click.ClickException("nothing landed: give --from and --to")
        start = start or (landed[0] if landed else end)
        end = end or (landed[-1] if landed else start)
    if end < start:
        raise click.UsageError(f"--to {end} is before --from {start}")
    current = classifier_version(thresholds)
    hours = [h for d in landed if start <= d <= end for h in day_hours(d)]
    try:
        built = read_hour_manifests(runner.store, hours)
    except ManifestError as exc:
        raise click.ClickException(str(exc)) from exc
    published = collections.Counter(m.classifier for m in built.values() if m is not None)
    try:
        rows = runner.warehouse.published_sample_rows(start, end)
    finally:
        runner.warehouse.close()
    click.echo(f"installed classifier: {current}")
    for old, n in sorted(published.items()):
        if old == current:
            click.echo(f"{n} built hours of the landed days have the installed classifier")
        else:
            change = classifier_change(old, current)
            click.echo(f"{n} built hours of the landed days have another one: {change}")
    if not rows:
        click.echo(f"no published sample rows from {start} to {end}")
        return
    for line in preview_lines(preview_sample(rows, thresholds)):
        click.echo(line)


main.add_command(plan_command)
