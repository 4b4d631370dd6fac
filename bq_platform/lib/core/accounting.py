"""The accounting identity of the pipeline, per site and UTC hour.

``source_lines = pageviews + non_page_hits + rejected + duplicates + out_of_window``

- ``source_lines``: lines the producers' manifests announce for the hour, summed over every
  delivered file (a file delivered twice counts twice here, and once more in ``duplicates``).
- ``pageviews``: page requests stored in ``pageviews`` (see :mod:`bq_platform.lib.core.pages`).
- ``non_page_hits``: well-formed requests that are not pages (images, errors, POSTs...):
  counted, not stored.
- ``rejected``: lines that cannot be parsed; kept in the dead-letter area with a reason code.
- ``duplicates``: lines of a file whose content (checksum) was already delivered for the
  same site and hour (at-least-once delivery).
- ``out_of_window``: parseable lines whose timestamp is not in the partition's hour; kept in
  the dead-letter area with reason ``out_of_window``.

The rule comes from DESIGN.md ("Accounting identity"); the audit table stores one
:class:`SiteHourCounts` per site and hour.
"""

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from bq_platform.lib.core.hours import hour_label

if TYPE_CHECKING:  # manifest.py imports this module
    from bq_platform.lib.core.manifest import HourManifest

#: Longest raw sample line a manifest keeps (characters); the UI shows fewer.
MAX_SAMPLE_CHARS = 1000


@dataclasses.dataclass(frozen=True)
class SiteHourCounts:
    """Line counts of one site in one UTC hour (all counts are line counts, >= 0).

    ``rejected_reasons`` (reason code -> lines, summing to ``rejected``) and
    ``rejected_samples`` (a few raw rejected lines, each at most
    :data:`MAX_SAMPLE_CHARS` characters) feed the rejected-share check
    (:mod:`bq_platform.lib.quality.rejected_share`); manifests written before they existed read as empty.
    """

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
    rejected_reasons: Mapping[str, int] = dataclasses.field(default_factory=dict)
    rejected_samples: tuple[str, ...] = ()

    @property
    def accounted(self) -> int:
        """Lines explained by a category: the right-hand side of the identity."""
        return sum(getattr(self, field) for field in CATEGORY_FIELDS)

    @property
    def balanced(self) -> bool:
        """True when ``source_lines`` equals the sum of the categories."""
        return self.source_lines == self.accounted

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict; ``hour`` as ``YYYY-MM-DDTHH:00:00+00:00``.

        Field by field, not ``dataclasses.asdict`` (which deep-copies every value: 85 us a
        site-hour, 0.3 s for the 3,600 of the 1x bench's hour manifests, written after Spark's
        last job; issue 9)."""
        data = {name: getattr(self, name) for name in _COUNTS_FIELDS}
        data["hour"] = self.hour.isoformat()
        data["rejected_reasons"] = dict(self.rejected_reasons)
        data["rejected_samples"] = list(self.rejected_samples)
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


def accounting_problems(manifest: "HourManifest") -> list[str]:
    """What does not add up in one hour: unbalanced sites, landed files whose line count
    differs from their manifest, and data files without a manifest (an incomplete delivery,
    issue 7), one line each, naming the site or the file."""
    label = hour_label(manifest.hour)
    return (
        [
            f"{c.site} {label}: source_lines {c.source_lines} != accounted {c.accounted}"
            for c in manifest.counts
            if not c.balanced
        ]
        + [
            f"{m['data_key']}: manifest says {m['manifest_lines']} lines, "
            f"file has {m['lines_read']}"
            for m in manifest.file_mismatches
        ]
        + [
            f"{key}: data file without a manifest (incomplete delivery: its lines are not counted; "
            "have the producer write the manifest, or land the file again)"
            for key in manifest.orphan_files
        ]
    )
