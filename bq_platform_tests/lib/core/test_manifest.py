"""Hour manifests (:mod:`bq_platform.lib.core.manifest`): what does not add up in one, and reading
them back: one read per hour, and a manifest read again with the same text is not parsed again;
a rewritten one is."""

import dataclasses
import datetime as dt
import json

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.manifest import (
    UNCLASSIFIED,
    HourManifest,
    ManifestError,
    parse_hour_manifest,
    read_hour_manifests,
)
from bq_platform.lib.storage.local import LocalObjectStore

HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in range(3)]


def manifest(hour: dt.datetime, attempt: str) -> HourManifest:
    return HourManifest(
        hour=hour,
        attempt_id=attempt,
        fingerprint=f"{hour.hour:02d}" * 32,
        input_fingerprint="ab" * 32,
        full_files=(f"staging/pageviews/attempt={attempt}/full/part-0.parquet",),
        sample_files=(),
        deadletter_files=(),
        rows=10,
        sample_rows=0,
        counts=(SiteHourCounts(site="epa.gov", hour=hour, source_lines=10, pageviews=10),),
    )


def test_a_manifest_read_again_is_parsed_once_and_a_rewritten_one_again(tmp_path) -> None:
    store = LocalObjectStore(str(tmp_path / "lake"))
    for hour in HOURS[:2]:
        store.write_text(layout.hour_manifest_key(hour), manifest(hour, "run1-0").to_json())
    parse_hour_manifest.cache_clear()

    first = read_hour_manifests(store, HOURS)
    again = read_hour_manifests(store, HOURS)

    assert first[HOURS[2]] is None and again[HOURS[2]] is None  # never built
    assert [(first[h].hour, first[h].attempt_id) for h in HOURS[:2]] == [
        (h, "run1-0") for h in HOURS[:2]
    ]
    assert all(again[h] is first[h] for h in HOURS[:2])  # the same objects: not parsed again
    assert parse_hour_manifest.cache_info().misses == 2

    rebuilt = dataclasses.replace(manifest(HOURS[1], "run2-0"), rows=11)
    store.write_text(layout.hour_manifest_key(HOURS[1]), rebuilt.to_json())
    latest = read_hour_manifests(store, HOURS)
    assert latest[HOURS[0]] is first[HOURS[0]]
    assert (latest[HOURS[1]].attempt_id, latest[HOURS[1]].rows) == ("run2-0", 11)


def test_a_broken_manifest_raises_every_time(tmp_path) -> None:
    store = LocalObjectStore(str(tmp_path / "lake"))
    key = layout.hour_manifest_key(HOURS[0])
    store.write_text(key, '{"format": "something else"}')
    for _ in range(2):
        with pytest.raises(ManifestError, match="expected format"):
            read_hour_manifests(store, HOURS[:1])


def test_accounting_problems_name_the_unbalanced_site() -> None:
    balanced = manifest(HOURS[0], "run1-0")
    assert balanced.accounting_problems() == []
    off = SiteHourCounts(site="nasa.gov", hour=HOURS[0], source_lines=10, pageviews=9)
    unbalanced = dataclasses.replace(balanced, counts=(*balanced.counts, off))
    assert unbalanced.accounting_problems() == [
        "nasa.gov 1995-08-01T00: source_lines 10 != accounted 9"
    ]


def test_the_classifier_is_recorded_and_a_manifest_without_it_reads_as_unclassified() -> None:
    built = dataclasses.replace(manifest(HOURS[0], "a1"), classifier="crawler-user-agents==1.0")
    assert HourManifest.from_json(built.to_json()).classifier == "crawler-user-agents==1.0"

    document = json.loads(built.to_json())
    del document["classifier"]  # written by a build without traffic classification
    assert HourManifest.from_json(json.dumps(document)).classifier == UNCLASSIFIED
