"""Composing the hour manifests from the build's per-file counts (no Spark)."""

import datetime as dt

import pyarrow.parquet as pq

from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.manifest import LandedManifest
from bq_platform.lib.hourly_build.hour_manifests import SAMPLES, hour_manifests, rejected_details
from bq_platform.lib.hourly_build.outputs import (
    deadletter_arrow_schema,
    hour_folder,
    pageview_arrow_schema,
)
from bq_platform.lib.hourly_build.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
)
from bq_platform.lib.landing.deliveries import LandedDelivery
from bq_platform.lib.landing.index import hour_input_fingerprint
from bq_platform.lib.storage.local import LocalObjectStore

H0, H1 = (dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (0, 1))
SITE = "epa.gov"
PREFIXES = ("attempt=a/full", "attempt=a/sample", "dead/attempt=a")


def delivery(hour: dt.datetime, sha: str, lines: int, duplicate: bool = False) -> LandedDelivery:
    data_key = layout.landed_data_key(SITE, hour, sha * 64)
    manifest = LandedManifest(SITE, hour, data_key, lines, 100, sha * 64)
    return LandedDelivery(layout.landed_manifest_key(data_key), manifest, duplicate)


def test_counts_files_and_fingerprints_per_hour(tmp_path) -> None:
    store = LocalObjectStore(str(tmp_path))
    full = f"{hour_folder(PREFIXES[0], hour_label(H0))}/part-0.parquet"
    store.write_bytes(full, b"x" * 10)  # what Spark wrote for H0; H1 had no pages
    first, again, short = delivery(H0, "a", 5), delivery(H0, "a", 5, True), delivery(H1, "b", 4)
    per_file = {
        first.manifest.data_key: {
            "lines_read": 5,
            CATEGORY_PAGE: 2,
            CATEGORY_NON_PAGE: 1,
            CATEGORY_REJECTED: 1,
            CATEGORY_OUT_OF_WINDOW: 1,
            "sample_rows": 1,
            "rejected:malformed": 1,
            SAMPLES: {"sample:malformed": "garbage", "sample:": "garbage"},
        },
        short.manifest.data_key: {"lines_read": 3, CATEGORY_NON_PAGE: 3},
    }
    orphan = layout.landed_data_key(SITE, H1, "c" * 64)

    m0, m1 = hour_manifests(
        store,
        [H0, H1],
        [SITE],
        {(SITE, H0): [first, again], (SITE, H1): [short]},
        per_file,
        {(SITE, hour_label(H0)): (2, 1)},
        "a",
        "key",
        PREFIXES,
        orphans={(SITE, H1): [orphan]},
        classifier="classifier-1",
    )

    (c0,) = m0.counts
    assert (c0.source_lines, c0.pageviews, c0.duplicates, c0.out_of_window) == (10, 2, 5, 1)
    assert (c0.visitors, c0.sample_visitors, c0.files, c0.balanced) == (2, 1, 1, True)
    assert c0.rejected_reasons == {"malformed": 1} and c0.rejected_samples == ("garbage",)
    assert m0.full_files == (full,) and m0.full_bytes == 10 and m0.rows == 2
    assert m0.accounting_problems() == []
    # H1: a line short of its manifest, an orphan, and no rows: one empty file per output.
    assert m1.file_mismatches == (
        {"data_key": short.manifest.data_key, "manifest_lines": 4, "lines_read": 3},
    )
    assert m1.orphan_files == (orphan,) and len(m1.accounting_problems()) == 3
    assert m1.input_fingerprint == hour_input_fingerprint([short.manifest], [orphan])
    for files, schema in (
        (m1.full_files, pageview_arrow_schema()),
        (m1.sample_files, pageview_arrow_schema()),
        (m1.deadletter_files, deadletter_arrow_schema()),
    ):
        (key,) = files
        assert pq.read_schema(store.uri(key)).equals(schema)
    assert m0.fingerprint != m1.fingerprint


def test_rejected_samples_follow_the_most_frequent_reason() -> None:
    files = [
        {"rejected:malformed": 1, "rejected:bad_status": 2, SAMPLES: {"sample:malformed": "m1"}},
        {
            "rejected:bad_status": 1,
            SAMPLES: {"sample:bad_status": "b2", "sample:malformed": "m2", "sample:": "last"},
        },
    ]
    details = rejected_details(files)
    assert details["rejected_reasons"] == {"malformed": 1, "bad_status": 3}
    assert details["rejected_samples"] == ("b2", "m1", "m2")  # at most 3, "last" left out
