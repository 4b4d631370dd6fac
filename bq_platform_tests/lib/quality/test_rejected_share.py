"""The rejected-share gate (bq_platform.lib.quality.rejected_share): table tests, no Spark."""

import datetime as dt
import json

import pytest

from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.quality import rejected_share as quality

HOUR = dt.datetime(1995, 8, 1, 6, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("lines", "rejected", "max_share", "level"),
    [
        (0, 0, 0.05, "ok"),  # an empty hour
        (1000, 0, 0.05, "ok"),
        (1000, 10, 0.05, "ok"),  # exactly 1% is not above 1%
        (1000, 11, 0.05, "warn"),
        (100, 2, 0.05, "warn"),  # 2% garbage: a warning, still published
        (1000, 50, 0.05, "warn"),  # exactly 5% is not above 5%
        (1000, 51, 0.05, "error"),
        (1000, 875, 0.05, "error"),  # a LogFormat change upstream
        (1906, 1906, 0.05, "error"),  # issue 7: every line of a security dataset rejected
        (1000, 51, 0.10, "warn"),  # the blocking share is configurable
        (1000, 101, 0.10, "error"),
        (1000, 5, 0.0, "error"),  # share 0: any 3 or more rejected lines block
        (10, 1, 0.05, "warn"),  # one truncated last line in a small hour: 10% but warns only
        (10, 2, 0.05, "warn"),
        (10, 3, 0.05, "error"),  # three bad lines above the share block
        (3, 3, 1.0, "warn"),  # share 1.0 never blocks
    ],
)
def test_levels(lines: int, rejected: int, max_share: float, level: str) -> None:
    verdict = quality.grade("s", HOUR, lines, rejected, max_share=max_share)
    assert verdict.level == level
    assert verdict.rate == (rejected / lines if lines else 0.0)


def test_thresholds_are_the_documented_defaults() -> None:
    assert quality.WARN_SHARE == 0.01
    assert quality.DEFAULT_MAX_REJECTED_SHARE == 0.05
    assert quality.MIN_REJECTED_TO_BLOCK == 3


def test_top_reasons_and_samples_are_cut() -> None:
    long = "x" * 500
    verdict = quality.grade(
        "epa.gov",
        HOUR,
        1000,
        900,
        {"malformed": 850, "bad_status": 30, "empty_line": 0, "bad_bytes": 10, "bad_timestamp": 10},
        [long, "short", "third", "fourth"],
    )
    assert verdict.top_reasons == (("malformed", 850), ("bad_status", 30), ("bad_bytes", 10))
    assert verdict.samples == ("x" * 197 + "...", "short", "third")
    assert all(len(s) <= quality.SAMPLE_CHARS for s in verdict.samples)
    assert verdict.describe() == (
        "epa.gov 1995-08-01T06: 90.0% rejected (900 of 1000; malformed 850, bad_status 30, "
        "bad_bytes 10)"
    )
    meta = verdict.to_metadata()
    assert json.loads(json.dumps(meta)) == meta
    assert meta["top_reasons"] == {"malformed": 850, "bad_status": 30, "bad_bytes": 10}
    assert meta["rate"] == 0.9 and meta["level"] == "error"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [("abc", 3, "abc"), ("abcd", 3, "..."), ("abcdef", 5, "ab..."), ("", 200, "")],
)
def test_cut(text: str, limit: int, expected: str) -> None:
    assert quality.cut(text, limit) == expected


@pytest.mark.parametrize(
    ("lines", "rejected", "max_share"),
    [(-1, 0, 0.05), (5, 6, 0.05), (5, -1, 0.05), (5, 1, 1.5), (5, 1, -0.1)],
)
def test_bad_arguments_raise(lines: int, rejected: int, max_share: float) -> None:
    with pytest.raises(ValueError):
        quality.grade("s", HOUR, lines, rejected, max_share=max_share)


def test_grade_counts_excludes_duplicates_and_reads_the_manifest_fields() -> None:
    counts = [
        SiteHourCounts(
            site="a",
            hour=HOUR,
            source_lines=200,
            duplicates=100,
            rejected=4,
            non_page_hits=96,
            rejected_reasons={"malformed": 4},
            rejected_samples=("garbage",),
        ),
        SiteHourCounts(site="b", hour=HOUR, source_lines=100, pageviews=100),
    ]
    first, second = quality.grade_counts(counts, max_share=0.03)
    assert (first.lines, first.rate, first.level) == (100, 0.04, "error")
    assert first.top_reasons == (("malformed", 4),) and first.samples == ("garbage",)
    assert second.level == "ok"
    assert quality.worst_level([first, second]) == "error"
    assert quality.worst_level([second]) == "ok" == quality.worst_level([])
    assert quality.blocking([first, second]) == [first]


def test_old_manifests_without_the_fields_still_load() -> None:
    """Hour manifests written before the gate have no rejected_reasons/samples: they read as
    empty, and the gate then sees the rejected count with no reasons."""
    new = SiteHourCounts(
        site="a",
        hour=HOUR,
        source_lines=3,
        rejected=3,
        rejected_reasons={"malformed": 3},
        rejected_samples=("x", "y"),
    )
    manifest = HourManifest(
        hour=HOUR,
        attempt_id="a1",
        fingerprint="f" * 64,
        input_fingerprint="e" * 64,
        full_files=(),
        sample_files=(),
        deadletter_files=(),
        rows=0,
        sample_rows=0,
        counts=(new,),
    )
    assert HourManifest.from_json(manifest.to_json()) == manifest
    data = json.loads(manifest.to_json())
    for c in data["counts"]:
        del c["rejected_reasons"], c["rejected_samples"]
    (old,) = HourManifest.from_json(json.dumps(data)).counts
    assert (old.rejected, old.rejected_reasons, old.rejected_samples) == (3, {}, ())
    (verdict,) = quality.grade_counts([old])
    assert (verdict.level, verdict.top_reasons, verdict.samples) == ("error", (), ())
