"""The data-quality gate: the share of rejected lines per site and UTC hour.

The accounting identity holds even when every line is rejected (DESIGN.md, "Data quality is
gated, not only counted"), so each site-hour is graded by ``rate = rejected / lines`` (lines
delivered, duplicates excluded):

- ``warn``: ``rate > warn_share`` (:data:`WARN_SHARE`): worth a look, still published;
- ``error``: ``rate > max_share`` (:data:`DEFAULT_MAX_REJECTED_SHARE`, configurable) *and* at
  least :data:`MIN_REJECTED_TO_BLOCK` rejected lines: the day is not published unless the
  operator allows it for that run;
- ``ok`` otherwise.
"""

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bq_platform.lib.core.accounting import SiteHourCounts

#: Above this share of rejected lines a site-hour is worth a warning (real logs reject almost
#: nothing; a broken producer or a new ``LogFormat`` is far above it).
WARN_SHARE = 0.01
#: Default of the blocking share (``BQ_PLATFORM_MAX_REJECTED_SHARE``).
DEFAULT_MAX_REJECTED_SHARE = 0.05
#: An hour blocks only with at least this many rejected lines (one truncated last line in a
#: tiny hour is no format change).
MIN_REJECTED_TO_BLOCK = 3
#: Sample lines are cut to this many characters (a readable line in the Dagster UI).
SAMPLE_CHARS = 200
#: Reasons listed per verdict (most frequent first).
TOP_REASONS = 3
#: Sample lines kept per verdict.
MAX_SAMPLES = 3

LEVEL_OK = "ok"
LEVEL_WARN = "warn"
LEVEL_ERROR = "error"
_RANK = {LEVEL_OK: 0, LEVEL_WARN: 1, LEVEL_ERROR: 2}


@dataclasses.dataclass(frozen=True)
class RejectedShare:
    """The verdict of one site-hour.

    Attributes:
        lines: lines the share is taken of (delivered, duplicates excluded).
        rate: ``rejected / lines`` (0.0 when ``lines`` is 0).
        level: ``ok``, ``warn`` or ``error``.
        top_reasons: up to :data:`TOP_REASONS` ``(reason, lines)``, most frequent first.
        samples: up to :data:`MAX_SAMPLES` raw rejected lines, cut by :func:`cut`.
    """

    site: str
    hour: dt.datetime
    lines: int
    rejected: int
    rate: float
    level: str
    top_reasons: tuple[tuple[str, int], ...] = ()
    samples: tuple[str, ...] = ()

    def describe(self) -> str:
        """One line: ``site hour: 87.5% rejected (875 of 1000; malformed 875)``."""
        reasons = ", ".join(f"{r} {n}" for r, n in self.top_reasons)
        return (
            f"{self.site} {self.hour:%Y-%m-%dT%H}: {self.rate:.1%} rejected "
            f"({self.rejected} of {self.lines}{'; ' + reasons if reasons else ''})"
        )

    def to_metadata(self) -> dict[str, Any]:
        """JSON-ready dict for a check's metadata."""
        return {
            "site": self.site,
            "hour": f"{self.hour:%Y-%m-%dT%H}",
            "level": self.level,
            "rate": round(self.rate, 6),
            "rejected": self.rejected,
            "lines": self.lines,
            "top_reasons": dict(self.top_reasons),
            "samples": list(self.samples),
        }


def cut(line: str, limit: int = SAMPLE_CHARS) -> str:
    """``line`` cut to at most ``limit`` characters, ``...`` marking a cut."""
    return line if len(line) <= limit else line[: max(limit - 3, 0)] + "..."


def grade(
    site: str,
    hour: dt.datetime,
    lines: int,
    rejected: int,
    reasons: Mapping[str, int] | None = None,
    samples: Sequence[str] = (),
    *,
    max_share: float = DEFAULT_MAX_REJECTED_SHARE,
    warn_share: float = WARN_SHARE,
) -> RejectedShare:
    """Grade one site-hour (rules in the module docstring).

    Args:
        lines: the site-hour's delivered lines, duplicates excluded.
        reasons: rejected lines per reason code.
        samples: raw rejected lines; the first :data:`MAX_SAMPLES` are kept.
        max_share, warn_share: the blocking and warning shares, 0..1.

    Raises:
        ValueError: unless ``0 <= rejected <= lines`` and both shares are within 0..1.
    """
    if lines < 0 or rejected < 0 or rejected > lines:
        raise ValueError(f"{site} {hour}: need 0 <= rejected ({rejected}) <= lines ({lines})")
    for name, share in (("max_share", max_share), ("warn_share", warn_share)):
        if not 0.0 <= share <= 1.0:
            raise ValueError(f"{name} must be a share between 0 and 1, got {share!r}")
    rate = rejected / lines if lines else 0.0
    if rate > max_share and rejected >= MIN_REJECTED_TO_BLOCK:
        level = LEVEL_ERROR
    elif rate > min(warn_share, max_share):
        level = LEVEL_WARN
    else:
        level = LEVEL_OK
    ranked = sorted(((r, n) for r, n in (reasons or {}).items() if n), key=lambda x: (-x[1], x[0]))
    return RejectedShare(
        site=site,
        hour=hour,
        lines=lines,
        rejected=rejected,
        rate=rate,
        level=level,
        top_reasons=tuple(ranked[:TOP_REASONS]),
        samples=tuple(cut(s) for s in samples[:MAX_SAMPLES]),
    )


def grade_counts(
    counts: Iterable[SiteHourCounts], max_share: float = DEFAULT_MAX_REJECTED_SHARE
) -> list[RejectedShare]:
    """:func:`grade` every site-hour of ``counts`` (from hour manifests), in the given order."""
    return [
        grade(
            c.site,
            c.hour,
            max(c.source_lines - c.duplicates, c.rejected),
            c.rejected,
            c.rejected_reasons,
            c.rejected_samples,
            max_share=max_share,
        )
        for c in counts
    ]


def worst_level(verdicts: Iterable[RejectedShare]) -> str:
    """The most severe level among ``verdicts`` (``ok`` for none)."""
    return max((v.level for v in verdicts), key=_RANK.__getitem__, default=LEVEL_OK)


def blocking(verdicts: Iterable[RejectedShare]) -> list[RejectedShare]:
    """The verdicts at level ``error``."""
    return [v for v in verdicts if v.level == LEVEL_ERROR]
