"""The ``bq-platform`` command lines that error messages and check descriptions tell an operator
to run, built in one place so that every message quotes a valid command.

The hours and days are UTC (``YYYY-MM-DDTHH``, as ``bq-platform run --start/--end`` takes
them); site and file names are shell-quoted when they need it.
"""

import datetime as dt
import shlex

from bq_platform.lib.core.hours import day_hours, hour_label

CLI = "bq-platform"
#: What stands for the folder of a source file in :func:`land` (the landing zone does not know it).
FOLDER = "<folder>"
#: What stands for a source file whose name the landing zone does not know.
UNKNOWN_SOURCE = "<its log file>"
#: :func:`land` for a message about several sites and files.
LAND_TEMPLATE = f"{CLI} land --site <site> <file>"
#: The ``run`` flag that rebuilds hours whose landed input is unchanged but whose traffic
#: classifier is not the installed one (a restatement of their classification).
RECLASSIFY_FLAG = "--reclassify"
#: ``bq-platform run --reclassify``.
RUN_RECLASSIFY = f"{CLI} run {RECLASSIFY_FLAG}"
#: The hourly build asset's run config that allows the same (Dagster UI, launchpad).
RECLASSIFY_RUN_CONFIG = "ops: lake__pageview_files: config: reclassify: true"
#: The command that shows, before any restatement, what the installed classifier would change
#: in the published sample.
RECLASSIFY_PREVIEW = f"{CLI} reclassify-preview"


def land(site: str, source: str = "") -> str:
    """``bq-platform land --site <site> <folder>/<source>``: lands the source file again; only its
    new lines count, and its landed files that are missing, corrupt or without their manifest
    are written again. ``source``: the file name the landing registry knows (``""``: unknown,
    shown as :data:`UNKNOWN_SOURCE`)."""
    path = f"{FOLDER}/{shlex.quote(source)}" if source else UNKNOWN_SOURCE
    return f"{CLI} land --site {shlex.quote(site)} {path}"


def run_hours(first: dt.datetime, last: dt.datetime | None = None, *flags: str) -> str:
    """``bq-platform run --start <first> --end <last> [flags]``: builds and publishes these
    UTC hours (and publishes their days) again; ``last`` defaults to ``first``."""
    args = [CLI, "run", "--start", hour_label(first), "--end", hour_label(last or first), *flags]
    return " ".join(args)


def run_day(day: dt.date, *flags: str) -> str:
    """:func:`run_hours` over the 24 hours of UTC ``day``, e.g. ``--allow-incomplete``."""
    hours = day_hours(day)
    return run_hours(hours[0], hours[-1], *flags)


def deadletters(first: dt.datetime, last: dt.datetime | None = None) -> str:
    """``bq-platform deadletters --start <first> --end <last>``: the dead letters (rejected and
    out-of-window lines, with reasons and samples) of these UTC hours."""
    return f"{CLI} deadletters --start {hour_label(first)} --end {hour_label(last or first)}"


def reclassify_preview(first: dt.date | None = None, last: dt.date | None = None) -> str:
    """``bq-platform reclassify-preview [--from <first>] [--to <last>]``: per UTC day and site,
    the published sample rows the installed classifier would move between human and bot."""
    args = [RECLASSIFY_PREVIEW]
    if first is not None:
        args += ["--from", first.isoformat()]
    if last is not None:
        args += ["--to", last.isoformat()]
    return " ".join(args)
