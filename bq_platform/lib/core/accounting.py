"""The accounting identity, per site and UTC hour (DESIGN.md, "Accounting identity"):

``source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window``

- ``source_lines``: lines the producers' manifests announce, summed over every delivered file
  (a file delivered twice counts twice here, and once in ``duplicates``);
- ``pageviews``: page requests stored in ``pageviews`` (:mod:`bq_platform.lib.core.pages`);
- ``non_page_hits``: well-formed requests that are not pages: counted, not stored;
- ``rejected``: lines that cannot be parsed; dead-lettered with a reason code;
- ``duplicates``: lines of a file whose checksum was already delivered for the site and hour;
- ``out_of_window``: parseable lines outside the partition's hour; dead-lettered.

The pages split by traffic class (:mod:`bq_platform.lib.traffic.classes`), apart from the
identity: ``pageviews = human_pageviews + bot_pageviews``, ``bot_pageviews`` counting the
``bot`` and ``suspected_bot`` rows.
"""

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

#: Longest raw sample line a manifest keeps (characters); the UI shows fewer.
MAX_SAMPLE_CHARS = 1000


@dataclasses.dataclass(frozen=True)
class SiteHourCounts:
    """Line counts (>= 0) of one site in one UTC hour. ``rejected_reasons`` (reason -> lines,
    summing to ``rejected``) and ``rejected_samples`` (raw lines of at most
    :data:`MAX_SAMPLE_CHARS`) feed the rejected-share check; ``bot_reasons`` (``bot_reason`` ->
    pages, summing to ``bot_pageviews``) says why the pages are not human. Each is empty when
    absent from a document."""

    site: str
    hour: dt.datetime
    source_lines: int = 0
    pageviews: int = 0
    non_page_hits: int = 0
    rejected: int = 0
    duplicates: int = 0
    out_of_window: int = 0
    lines_read: int = 0
    sample_rows: int = 0
    visitors: int = 0
    sample_visitors: int = 0
    files: int = 0
    human_pageviews: int = 0
    bot_pageviews: int = 0
    rejected_reasons: Mapping[str, int] = dataclasses.field(default_factory=dict)
    rejected_samples: tuple[str, ...] = ()
    bot_reasons: Mapping[str, int] = dataclasses.field(default_factory=dict)

    @property
    def accounted(self) -> int:
        """Lines explained by a category: the right-hand side of the identity."""
        return sum(getattr(self, field) for field in CATEGORY_FIELDS)

    @property
    def classes_balanced(self) -> bool:
        """True when every page has a traffic class: ``pageviews = human_pageviews +
        bot_pageviews``."""
        return self.pageviews == self.human_pageviews + self.bot_pageviews

    @property
    def balanced(self) -> bool:
        """True when ``source_lines`` equals the sum of the categories."""
        return self.source_lines == self.accounted

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict, the fields in order, ``hour`` as ``YYYY-MM-DDTHH:00:00+00:00``: the
        document ``dataclasses.asdict`` gives (hour fingerprints cover it), without its deep
        copies."""
        data = {name: getattr(self, name) for name in _COUNTS_FIELDS}
        data["hour"] = self.hour.isoformat()
        data["rejected_reasons"] = dict(self.rejected_reasons)
        data["rejected_samples"] = list(self.rejected_samples)
        data["bot_reasons"] = dict(self.bot_reasons)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "SiteHourCounts":
        """Inverse of :meth:`to_json`; unknown keys are ignored (forward compatible)."""
        values = {k: v for k, v in data.items() if k in _COUNTS_FIELDS}
        values["hour"] = dt.datetime.fromisoformat(values["hour"]).astimezone(dt.UTC)
        values["rejected_reasons"] = {
            str(k): int(v) for k, v in dict(values.get("rejected_reasons") or {}).items()
        }
        values["rejected_samples"] = tuple(str(x) for x in values.get("rejected_samples") or ())
        values["bot_reasons"] = {
            str(k): int(v) for k, v in dict(values.get("bot_reasons") or {}).items()
        }
        return cls(**values)


#: :class:`SiteHourCounts`' fields in order (the keys of its JSON).
_COUNTS_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SiteHourCounts))

AUDIT_COLUMNS: tuple[str, ...] = (
    "site",
    "hour",
    "event_date",
    "source_lines",
    "pageviews",
    "non_page_hits",
    "rejected",
    "duplicates",
    "out_of_window",
    "sample_rows",
    "visitors",
    "sample_visitors",
    "files",
    "fingerprint",
    "run_id",
    "human_pageviews",
    "bot_pageviews",
)


def audit_records(
    counts: Iterable[SiteHourCounts], fingerprint: str, run_id: str
) -> list[dict[str, Any]]:
    """Rows for the ``pageviews_audit`` table, in :data:`AUDIT_COLUMNS` order."""
    rows = []
    for c in sorted(counts, key=lambda c: (c.hour, c.site)):
        rows.append(
            {
                "site": c.site,
                "hour": c.hour,
                "event_date": c.hour.date(),
                "source_lines": c.source_lines,
                "pageviews": c.pageviews,
                "non_page_hits": c.non_page_hits,
                "rejected": c.rejected,
                "duplicates": c.duplicates,
                "out_of_window": c.out_of_window,
                "sample_rows": c.sample_rows,
                "visitors": c.visitors,
                "sample_visitors": c.sample_visitors,
                "files": c.files,
                "fingerprint": fingerprint,
                "run_id": run_id,
                "human_pageviews": c.human_pageviews,
                "bot_pageviews": c.bot_pageviews,
            }
        )
    return rows


CATEGORY_FIELDS: tuple[str, ...] = (
    "pageviews",
    "non_page_hits",
    "rejected",
    "duplicates",
    "out_of_window",
)
"""The right-hand side of the identity: every line falls in exactly one of these."""


def row_balanced(row: Mapping[str, Any]) -> bool:
    """The identity for a ``pageviews_audit`` row (or any mapping with the count fields)."""
    return row["source_lines"] == sum(row[field] for field in CATEGORY_FIELDS)


def unbalanced(counts: Iterable[SiteHourCounts]) -> list[SiteHourCounts]:
    """The (site, hour) counts for which the identity does not hold."""
    return [c for c in counts if not c.balanced]


def category_totals(counts: Iterable[SiteHourCounts]) -> dict[str, int]:
    """Lines per category of :data:`CATEGORY_FIELDS`, summed over ``counts``."""
    totals = dict.fromkeys(CATEGORY_FIELDS, 0)
    for c in counts:
        for field in CATEGORY_FIELDS:
            totals[field] += getattr(c, field)
    return totals
