"""``bq-platform``: land access logs and run the pipeline through Dagster from a shell.

Commands:

- ``bq-platform land --site SITE [--source NAME] FILE...``: land the new lines of log files
  (plain or gzip) into the landing zone, split by UTC hour, one manifest per object; a file
  landed again adds only what it gained, and broken landed objects are repaired.
- ``bq-platform land-tree [--workers N] DIR``: land every file of ``DIR/<site>/`` (site =
  folder name), several sites at a time in worker processes.
- ``bq-platform run [--start H --end H]``: build, stage, audit and publish every day with
  landed data not yet processed (or the given UTC hours), as Dagster runs recorded in the
  instance under ``$DAGSTER_HOME`` (default ``.bq_platform/dagster_home``), so ``dagster dev``
  shows them. Prints one line per step and day, then a summary per day and site; ``-v`` shows
  every log line. One ``run`` at a time per data folder: a second one waits for the first
  (``--wait`` seconds, default one hour; ``--wait 0`` refuses at once), see
  :mod:`bq_platform.cli.instance`.
- ``bq-platform summary``: the summary alone, from the audit table.
- ``bq-platform deadletters``: rejected and out-of-window lines of the current attempts, counts
  per reason first, then samples.
"""

import datetime as dt
import gc
import logging
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from bq_platform.cli.plan import plan as plan_command
from bq_platform import settings as environment
from bq_platform.lib.core.hours import hours_between
from bq_platform.lib.core.layout import parse_hour_label

if TYPE_CHECKING:
    from bq_platform.lib.storage.base import ObjectStore
    from bq_platform.cli.runner import PipelineRunner

log = logging.getLogger("bq_platform")

#: Loggers that print set-up chatter at INFO (dagster's SQLite migrations, the Spark gateway).
_CHATTY_LOGGERS = ("alembic", "py4j", "dagster")


def _home() -> Path:
    return environment.local_home()


def _ensure_dagster_home() -> Path:
    """Use ``$DAGSTER_HOME``, else ``<BQ_PLATFORM_HOME>/dagster_home``, with a dagster.yaml that
    has every block of :func:`bq_platform.cli.instance.instance_blocks`, its event log in this
    home (:func:`bq_platform.cli.instance.prepare_home`; its line goes to stderr)."""
    from bq_platform.cli.instance import dagster_home, prepare_home

    home = dagster_home(_home() / "dagster_home")
    try:
        moved = prepare_home(home)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    if moved:
        click.echo(moved, err=True)
    return home


def _runner(**kwargs: Any) -> "PipelineRunner":
    """The runner of ``BQ_PLATFORM_ENV``'s resources; a setting that is wrong or missing (an
    unknown environment, an unset production variable) is a one-line error naming it."""
    from bq_platform.cli.runner import PipelineRunner

    try:
        return PipelineRunner.from_environment(environment.env_name(), **kwargs)
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
        os.environ["BQ_PLATFORM_SPARK_VERBOSE"] = "1"  # read by lib/build/spark.py


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
    starts over when the file was rotated or truncated.
    """
    from bq_platform.lib.landing.producer.land import LandingError, land_file

    if source is not None and len(files) != 1:
        raise click.UsageError("--source names one file: give exactly one FILE with it")
    store = _landing_store()
    hour = _parse_hour(default_hour) if default_hour else None
    first_hour = environment.first_hour()
    landed = []
    try:
        for path in files:
            landed += land_file(
                store, site, path, source=source, default_hour=hour, first_hour=first_hour, log=log
            )
    except (LandingError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"{site}: {_landed_summary(landed)}")


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

    Sites land in parallel (:mod:`bq_platform.lib.landing.producer.tree`); one line per site, in
    name order.
    """
    from bq_platform.lib.landing.producer.land import LandingError
    from bq_platform.lib.landing.producer.tree import default_workers, land_sites, site_folders

    try:
        folders = site_folders(root)
        for site in land_sites(
            _landing_store,
            folders,
            first_hour=environment.first_hour(),
            workers=workers or default_workers(),
            log=log,
        ):
            click.echo(f"{site.site}: {site.files} files, {_landed_summary(site.landed)}")
    except (LandingError, ValueError, RuntimeError) as exc:
        raise click.ClickException(str(exc)) from exc


def _landing_store() -> "ObjectStore":
    """The environment's object store (built in each landing worker, after its fork), without
    Dagster (:mod:`bq_platform.settings`)."""
    try:
        return environment.object_store(environment.env_name())
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
    wait_seconds: float,
) -> None:
    """Process every landed day not yet published (or the hours START..END) through Dagster."""
    import dagster as dg

    from bq_platform.cli.instance import RunLockTimeout, dagster_home, fail_dead_runs, run_lock

    home = dagster_home(_home() / "dagster_home")
    hours = _hour_range(start, end)
    try:
        with run_lock(home, wait_seconds, on_wait=lambda m: click.echo(m, err=True)):
            # The config written, the instance created and its SQLite schema migrated by the
            # lock holder only (issue 7).
            _ensure_dagster_home()
            runner = _runner(
                echo=click.echo,
                verbose=ctx.obj["verbose"],
                release_spark=ctx.obj.get("release_spark", False),
            )
            started = time.monotonic()
            # Planned before the instance opens: a due build's JVM starts now (issue 9).
            todo = runner.plan(hours, force)
            with dg.DagsterInstance.get() as instance:
                for run_id in fail_dead_runs(instance):
                    click.echo(f"run {run_id} lost its process (killed?): marked failed")
                runner.instance = instance
                _run(runner, todo, started, allow_incomplete, allow_rejected)
    except RunLockTimeout as exc:
        raise click.ClickException(str(exc)) from exc


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
    if not ok:
        click.echo(
            "\nSome runs failed; see the messages above, `bq-platform -v run` for every log line, "
            "and the Dagster UI (make dev).",
            err=True,
        )
        sys.exit(1)


@main.command()
def home() -> None:
    """Prepare the Dagster home that `run` and `make dev` use, and print its path.

    Writes its dagster.yaml (or adds the blocks an older one lacks) and, after the data folder
    was moved, points its event log at the new place (one line on stderr). `make dev` runs it
    before `dagster dev`; `run` does the same by itself.
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

    Reads the dead-letter files that the hour manifests name (the current attempt of each
    hour, never a superseded one), from the lake, in both environments.
    """
    from bq_platform.lib.quality.deadletters import built_hours, cut, read_dead_letters, summarize
    from bq_platform.lib.core.layout import hour_label

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


main.add_command(plan_command)


#: The cyclic collector's thresholds of the console script (``gc.set_threshold``,
#: docs.python.org/3/library/gc.html#gc.set_threshold; CPython's default is (700, 10, 10)): a
#: youngest-generation collection every 10,000 net allocations instead of 700. With the
#: default, a 1x ``bq-platform run`` of the bench made ~910 young and 6 full collections on its
#: main thread, 0.41-0.52 s of them full ones (0.09-0.15 s each while Dagster, DuckDB and PySpark
#: are imported, and one after the build); with these, ~55 young and no full one, 0.20-0.22 s in
#: all (issue 9, docs/PERFORMANCE.md, "The collector's thresholds ..."). Reference counting
#: still frees almost every object at once; only cycles wait longer.
COLLECTOR_THRESHOLDS = (10_000, 10, 10)


def console_main() -> None:
    """The ``bq-platform`` console script: :func:`main` with :data:`COLLECTOR_THRESHOLDS` and
    ``release_spark`` in click's context object (``bq-platform run`` then stops its Spark
    session once its last build is done: ``PipelineRunner.release_spark``), then a quick
    interpreter exit. :func:`main` called in a test process (click's ``CliRunner``) leaves the
    session, which the tests share, alone.

    The command's result is :func:`main`'s (click exits with its status). Before the
    interpreter finalizes, every object is moved to the collector's permanent generation
    (``gc.freeze``, docs.python.org/3/library/gc.html#gc.freeze): objects are still freed by
    reference count at shutdown, and files, connections and ``atexit`` handlers close as
    before, but the interpreter's final collections no longer trace the ~350k objects that
    Dagster, DuckDB and PySpark leave: 0.5-0.6 s off every ``bq-platform run`` after its last
    line (issue 9, docs/PERFORMANCE.md, "Dagster's asset events in batches, and the interpreter's
    exit"). Only the console script
    does this; :func:`main` called in a test process (click's ``CliRunner``) leaves the
    collector alone.
    """
    gc.set_threshold(*COLLECTOR_THRESHOLDS)
    try:
        main(obj={"release_spark": True})
    finally:
        gc.freeze()
