"""What a build reads before Spark: the landed deliveries of its hours, in few requests.

On GCS each listing and each read is a request (~20-100 ms), so the listing of a batch's
landed manifests is one per site, not one per site and hour, and a landed file is checked with
one download, not a metadata request first (docs/PERFORMANCE.md, issue 9). The store below
counts the calls an object store would send as requests.
"""

import pytest

from bq_platform.lib import layout
from bq_platform.lib.deliveries import landed_hour, landed_hours, list_sites, verify_landed
from bq_platform.lib.landing import LandingError
from bq_platform.lib.objectstore.local import LocalObjectStore
from bq_platform_tests.lib.counting_store import CountingStore
from bq_platform_tests.lib.test_build import land, utc

EPA, NASA = "epa.gov", "ksc.nasa.gov"
HOURS = [utc(1995, 8, 1, h) for h in range(4)]


@pytest.fixture
def store(tmp_path) -> CountingStore:
    """Two sites x four hours, one line each; EPA's 01:00 delivered twice, NASA's 02:00 has a
    data file without a manifest, and a file one folder too deep that is nobody's."""
    store = CountingStore(tmp_path / "lake")
    for site in (EPA, NASA):
        for hour in HOURS:
            land(store, site, hour, [f"{site} {hour:%H}".encode()])
    land(store, EPA, HOURS[1], [b"epa.gov 01"], name="again.log.gz")
    store.write_bytes(f"{layout.landing_hour_prefix(NASA, HOURS[2])}/lost.log.gz", b"\x1f\x8b")
    store.write_bytes(f"{layout.landing_hour_prefix(EPA, HOURS[3])}/deeper/x.gz", b"x")
    store.calls.clear()
    return store


def test_one_listing_per_site_for_a_range_of_hours(store: CountingStore) -> None:
    asked = [HOURS[0], HOURS[1], HOURS[3]]  # 02:00 lies inside the listed range, not asked
    found = landed_hours(store, [EPA, NASA], asked)

    assert store.calls == {"list": 2, "read_bytes": 2 * 3 + 1}  # manifests only
    assert sorted(found) == sorted((s, h) for s in (EPA, NASA) for h in asked)
    for (site, hour), (deliveries, orphans) in found.items():
        assert all(d.manifest.site == site and d.manifest.hour == hour for d in deliveries)
        assert orphans == []
    epa_01, _ = found[(EPA, HOURS[1])]
    assert [d.duplicate for d in epa_01] == [False, True]  # same checksum, by key order
    assert len(found[(NASA, HOURS[0])][0]) == 1


def test_landed_hour_is_the_same_answer_for_one_hour(store: CountingStore) -> None:
    both = landed_hours(store, [NASA], HOURS)
    deliveries, orphans = landed_hour(store, NASA, HOURS[2])
    assert (deliveries, orphans) == both[(NASA, HOURS[2])]
    assert orphans == [f"{layout.landing_hour_prefix(NASA, HOURS[2])}/lost.log.gz"]
    assert landed_hours(store, [EPA], []) == {}


def test_verify_downloads_each_file_once_and_reports_a_wrong_size(store: CountingStore) -> None:
    found = landed_hours(store, list_sites(store), HOURS)
    every = [d for deliveries, _ in found.values() for d in deliveries]
    store.calls.clear()
    verify_landed(store, every)
    assert store.calls == {"read_bytes": len(every)}  # no metadata request before it

    victim = found[(NASA, HOURS[3])][0][0].manifest
    store.write_bytes(victim.data_key, b"\x1f\x8b" + b"0" * (victim.bytes + 5))
    with pytest.raises(LandingError, match=rf"size is {victim.bytes + 7} bytes, the manifest"):
        verify_landed(store, every)


def test_an_unreadable_manifest_is_named(store: CountingStore) -> None:
    (delivery,), _ = landed_hour(store, NASA, HOURS[0])
    store.write_text(delivery.manifest_key, "{not json")
    with pytest.raises(LandingError, match=delivery.manifest_key.rsplit("/", 1)[-1]):
        landed_hours(store, [EPA, NASA], HOURS)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (None, None, ["a/1", "a/b/2", "a/c/3", "a/c/d/4"]),
        ("a/b/", "a/c/", ["a/b/2"]),
        ("a/c/", None, ["a/c/3", "a/c/d/4"]),
        (None, "a/c/d", ["a/1", "a/b/2", "a/c/3"]),
        ("a/c/d/4", "a/c/d/5", ["a/c/d/4"]),
        ("a/z", None, []),
    ],
)
def test_local_listing_of_a_key_range(tmp_path, start, end, expected) -> None:
    store = LocalObjectStore(tmp_path)
    every = ["a/1", "a/b/2", "a/c/3", "a/c/d/4", "other/5"]
    for key in every:
        store.write_bytes(key, b"x")
    assert store.list_keys("a", start=start, end=end) == expected
    in_range = [k for k in every if (start is None or k >= start) and (end is None or k < end)]
    assert store.list_keys("", start=start, end=end) == in_range
