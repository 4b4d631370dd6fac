"""The data-quality gate: the share of rejected lines per site and UTC hour.

The accounting identity (:mod:`bq_platform.lib.core.accounting`) holds even when every line is
rejected, so a change of ``LogFormat`` upstream would empty the warehouse with every accounting
check green (issue 7, "A data-quality gate"; DESIGN.md, "Data quality is gated, not only
counted"). This module grades each site-hour by its rejected share::

    rate = rejected / lines      (lines: the site-hour's delivered lines, duplicates excluded)

- ``ok``: ``rate <= warn_share``;
- ``warn``: ``rate > warn_share`` (default :data:`WARN_SHARE`, 1%): worth a look, publishes;
- ``error``: ``rate > max_share`` (default :data:`DEFAULT_MAX_REJECTED_SHARE`, 5%, configurable)
  *and* at least :data:`MIN_REJECTED_TO_BLOCK` rejected lines: the day is not published unless
  the operator allows it for that run.

Each verdict carries the rate, the top reasons with their counts and a few raw sample lines cut
to :data:`SAMPLE_CHARS` characters, for the asset check's metadata and the gate's message.
Plain Python: the Spark build records the inputs in the hour manifest
(:class:`~bq_platform.lib.core.accounting.SiteHourCounts` ``rejected_reasons`` and
``rejected_samples``).
"""

import dataclasses
import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bq_platform.lib.core.accounting import SiteHourCounts

#: Above this share of rejected lines a site-hour is worth a warning. Real logs reject almost
#: nothing (0 of the 81,744 bundled lines); the odd truncated last line of a rotated file is
#: well under 1% of any busy hour, a broken producer or a new ``LogFormat`` is far above it.
WARN_SHARE = 0.01
#: Default of the blocking share (``PipelineSettings.max_rejected_share``,
#: ``BQ_PLATFORM_MAX_REJECTED_SHARE``): issue 7 asks for 5%. Five times the warning level, so
#: a noisy hour warns long before it blocks a day.
DEFAULT_MAX_REJECTED_SHARE = 0.05
#: An hour blocks only with at least this many rejected lines: one truncated last line in an
#: hour of 10 lines is 10%, but not a format change; three or more bad lines above the share are.
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
        site, hour: the site and UTC hour.
        lines: lines the share is taken of (delivered, duplicates excluded).
        rejected: rejected lines.
        rate: ``rejected / lines`` (0.0 when ``lines`` is 0).
        level: ``ok``, ``warn`` or ``error``.
        top_reasons: up to :data:`TOP_REASONS` ``(reason, lines)``, most frequent first.
        samples: up to :data:`MAX_SAMPLES` raw rejected lines, each cut to
            :data:`SAMPLE_CHARS` characters (``...`` marks a cut).
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
        site, hour: the site and UTC hour (for messages).
        lines: the site-hour's delivered lines, duplicates excluded (>= 0).
        rejected: its rejected lines (0..lines).
        reasons: rejected lines per reason code (:data:`bq_platform.lib.core.logformat.REASONS`).
        samples: raw rejected lines, in any number; the first :data:`MAX_SAMPLES` are kept.
        max_share: the blocking share, 0..1.
        warn_share: the warning share, 0..1 (a ``max_share`` below it also warns).

    Raises:
        ValueError: for a negative count, more rejected lines than lines, or a share outside
            0..1.
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
