"""Summaries of accounting counts for logs, Dagster metadata and the CLI."""

import re
from collections.abc import Iterable

from bq_platform.lib.accounting import SiteHourCounts

COUNT_FIELDS = (
    "source_lines",
    "pageviews",
    "non_page_hits",
    "rejected",
    "duplicates",
    "out_of_window",
    "sample_rows",
)


STEP_TOTALS = "step_totals"
"""Materialization metadata key of a range step's totals (JSON: hours, rows, jobs, seconds...),
the same on each hour's materialization; the hour's own numbers are its other keys
(``bq_platform.defs.metadata.partition_results``)."""


PASS_PROGRESS = re.compile(r"^pass \d+/\d+: ")
"""The log line each Spark pass of the build starts with (``pass 2/9: hours ...``,
``bq_platform.lib.build``): ``bq-platform run`` prints these as they come
(``bq_platform.run_progress``), the only progress of a long build in its quiet output."""


def totals(counts: Iterable[SiteHourCounts]) -> dict[str, int]:
    """Sum of each count field over ``counts`` (line counts)."""
    out = dict.fromkeys(COUNT_FIELDS, 0)
    for c in counts:
        for field in COUNT_FIELDS:
            out[field] += getattr(c, field)
    return out


def counts_markdown(counts: Iterable[SiteHourCounts], max_rows: int = 200) -> str:
    """A Markdown table of non-empty site-hours (the Dagster UI renders it)."""
    rows = [c for c in counts if c.source_lines or c.accounted]
    header = "| site | hour (UTC) | " + " | ".join(COUNT_FIELDS) + " | balanced |"
    lines = [header, "|" + "---|" * (len(COUNT_FIELDS) + 3)]
    for c in rows[:max_rows]:
        values = " | ".join(str(getattr(c, f)) for f in COUNT_FIELDS)
        lines.append(
            f"| {c.site} | {c.hour:%Y-%m-%dT%H} | {values} | {'yes' if c.balanced else '**NO**'} |"
        )
    if len(rows) > max_rows:
        lines.append(f"\n{len(rows) - max_rows} more site-hours not shown")
    if not rows:
        lines.append("| (no landed data in these hours) |" + " |" * (len(COUNT_FIELDS) + 2))
    return "\n".join(lines)
