"""``bq-platform``: land access logs and run the pipeline through Dagster from a shell.

Commands:

- ``bq-platform land --site SITE FILE...``: land log files (plain or gzip) into the landing
  zone, split by UTC hour, one manifest per file.
- ``bq-platform land-tree DIR``: land every file of ``DIR/<site>/`` (site = folder name).
- ``bq-platform run [--start H --end H]``: build, stage, audit and publish every day with
  landed data not yet processed (or the given UTC hours), as Dagster runs recorded in the
  instance under ``$DAGSTER_HOME`` (default ``.bq_platform/dagster_home``), so ``dagster dev``
  shows them. Prints a summary per day and site.
- ``bq-platform summary``: the summary alone, from the audit table.
"""

import datetime as dt
import logging
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click

from bq_platform.lib.hours import hours_between
from bq_platform.lib.layout import parse_hour_label

log = logging.getLogger("bq_platform")

DAGSTER_YAML = """\
# Local Dagster instance of bq_platform (written by bq-platform; edit freely).
telemetry:
  enabled: false
"""


def _home() -> Path:
    from bq_platform.defs.resources import local_home

    return local_home()


def _ensure_dagster_home() -> Path:
    """Use ``$DAGSTER_HOME``, else ``<BQ_PLATFORM_HOME>/dagster_home`` with a dagster.yaml."""
    home = Path(os.environ.get("DAGSTER_HOME") or _home() / "dagster_home").resolve()
    home.mkdir(parents=True, exist_ok=True)
    config = home / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(home)
    return home


def _env() -> str:
    return os.environ.get("BQ_PLATFORM_ENV", "local")


def _resources() -> dict[str, Any]:
    from bq_platform.defs.resources import build_resources

    return build_resources(_env())


def _parse_hour(value: str) -> dt.datetime:
    try:
        return parse_hour_label(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r}: use UTC hours like 1995-08-01T04") from exc


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """Pageview pipeline: landed access logs -> Spark -> Parquet -> warehouse tables."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


@main.command()
@click.option("--site", required=True, help="Publisher key, e.g. epa.gov.")
@click.option(
    "--default-hour",
    default=None,
    help="UTC hour (YYYY-MM-DDTHH) for files with no readable timestamp.",
)
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
def land(site: str, default_hour: str | None, files: Sequence[str]) -> None:
    """Land log FILES of SITE into the landing zone, split by UTC hour."""
    from bq_platform.lib.landing import LandingError, land_files

    store = _resources()["object_store"].get_store()
    hour = _parse_hour(default_hour) if default_hour else None
    try:
        landed = land_files(store, site, files, default_hour=hour, log=log)
    except (LandingError, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"{site}: {sum(f.manifest.lines for f in landed)} lines landed in "
        f"{len({f.manifest.hour for f in landed})} hours ({sum(f.written for f in landed)} new "
        f"objects, {sum(not f.written for f in landed)} already there)"
    )


@main.command("land-tree")
@click.argument("root", type=click.Path(exists=True, file_okay=False))
def land_tree(root: str) -> None:
    """Land every file under ROOT/<site>/ (the folder name is the site)."""
    from bq_platform.lib.landing import LandingError, land_files

    store = _resources()["object_store"].get_store()
    sites = sorted(p for p in Path(root).iterdir() if p.is_dir())
    if not sites:
        raise click.ClickException(f"{root} has no site folders (expected {root}/<site>/<files>)")
    for site_dir in sites:
        files = sorted(p for p in site_dir.iterdir() if p.is_file() and not p.name.startswith("."))
        try:
            landed = land_files(store, site_dir.name, files, log=log)
        except (LandingError, ValueError) as exc:
            raise click.ClickException(str(exc)) from exc
        click.echo(
            f"{site_dir.name}: {len(files)} files, {sum(f.manifest.lines for f in landed)} lines "
            f"in {len({f.manifest.hour for f in landed})} hours "
            f"({sum(f.written for f in landed)} new objects)"
        )


@main.command()
@click.option("--start", default=None, help="First UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option("--end", default=None, help="Last UTC hour, YYYY-MM-DDTHH (inclusive).")
@click.option(
    "--allow-incomplete", is_flag=True, help="Publish days even if some hours are incomplete."
)
@click.option("--force", is_flag=True, help="Re-run days that look up to date (still idempotent).")
def run(start: str | None, end: str | None, allow_incomplete: bool, force: bool) -> None:
    """Process every landed day not yet published (or the hours START..END) through Dagster."""
    from bq_platform.runner import PipelineRunner

    _ensure_dagster_home()
    runner = PipelineRunner.from_environment(_env(), echo=click.echo)
    if start or end:
        if not (start and end):
            raise click.UsageError("--start and --end go together")
        first, last = _parse_hour(start), _parse_hour(end)
        if last < first:
            raise click.UsageError("--end is before --start")
        hours = hours_between(first, last + dt.timedelta(hours=1))
    else:
        hours = None
    started = time.monotonic()
    ok = runner.run(hours=hours, allow_incomplete=allow_incomplete, force=force)
    click.echo(f"\nfinished in {time.monotonic() - started:.1f} s")
    runner.print_summary(runner.processed_days or runner.all_days())
    if not ok:
        click.echo(
            "\nSome runs failed; see the messages above and the Dagster UI (make dev).", err=True
        )
        sys.exit(1)


@main.command()
def summary() -> None:
    """Print the accounting summary per day and site from the audit table."""
    from bq_platform.runner import PipelineRunner

    runner = PipelineRunner.from_environment(_env(), echo=click.echo)
    runner.print_summary(runner.all_days())
