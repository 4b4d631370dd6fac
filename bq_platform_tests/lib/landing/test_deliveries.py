"""What a build reads before Spark: the landed deliveries of its hours, in few requests.

On GCS each listing and each read is a request (~20-100 ms), so the listing of a batch's
landed manifests is one per site, not one per site and hour, and a landed file is checked from
the listing's CRC32C when its manifest has one, else with one download, never a metadata
request first (docs/PERFORMANCE.md, issue 9). The store below counts the calls an object store
would send as requests.
"""

import dataclasses
import threading

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import LandedManifest, LandingError
from bq_platform.lib.landing.deliveries import (
    LandedDelivery,
    landed_hour,
    landed_hours,
    unreadable_landed_file,
    verify_landed,
)
from bq_platform.lib.landing.index import list_sites
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.storage.base import ListedObject, crc32c
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.emulators import GCSEmulator
from bq_platform_tests.http_recording import RecordingSession
from bq_platform_tests.lib.build_inputs import land, utc
from bq_platform_tests.lib.storage.counting_store import CountingStore

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


class _ThreadRecordingStore(CountingStore):
    """Records the thread of each read; ``read_threads`` set per test."""

    threads: set[int] = set()  # replaced per test before the reads that count

    def read_bytes(self, key: str) -> bytes:
        self.threads.add(threading.get_ident())
        return super().read_bytes(key)


@pytest.mark.parametrize("read_threads", [1, 8])
def test_verify_downloads_on_the_stores_read_threads(tmp_path, read_threads) -> None:
    # A local disk: the calling thread only (threads were 3-4x slower for the 1x bench's 3,600
    # files, issue 9); GCS (8): side by side, a request each.
    store = _ThreadRecordingStore(tmp_path / "lake")
    store.read_threads = read_threads
    for hour in HOURS:
        for name in ("a.log.gz", "b.log.gz", "c.log.gz"):
            land(store, EPA, hour, [f"{hour:%H} {name}".encode()], name=name)
    every = [d for ds, _ in landed_hours(store, [EPA], HOURS).values() for d in ds]
    store.threads = set()
    verify_landed(store, every)
    if read_threads == 1:
        assert store.threads == {threading.get_ident()}
    else:
        assert threading.get_ident() not in store.threads and len(store.threads) > 1
    assert store.calls["read_bytes"] >= len(every) == 12


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


class ListingChecksumStore(CountingStore):
    """A counting local store whose listing carries each object's CRC32C, as GCS's does
    (objects.list, field ``crc32c``: cloud.google.com/storage/docs/json_api/v1/objects).
    The GCS adapter itself is tested on the emulator below."""

    def list_objects(self, prefix, *, start=None, end=None):
        listed = super().list_objects(prefix, start=start, end=end)
        return {
            key: ListedObject(obj.size, crc32c(LocalObjectStore.read_bytes(self, key)))
            for key, obj in listed.items()
        }


def _with_crc32c(store: LocalObjectStore) -> None:
    """Rewrite every landed manifest with its file's CRC32C, as ``bq-platform land`` writes it."""
    for key in store.list_keys(layout.LANDING_PREFIX):
        if layout.parse_landed_manifest_key(key) is None:
            continue
        manifest = LandedManifest.from_json(LocalObjectStore.read_bytes(store, key))
        data = LocalObjectStore.read_bytes(store, manifest.data_key)
        store.write_text(key, dataclasses.replace(manifest, crc32c=crc32c(data)).to_json())


@pytest.fixture
def listed_store(tmp_path) -> ListingChecksumStore:
    """Two sites x two hours landed with CRC32C in their manifests, on a store whose listing
    carries it."""
    store = ListingChecksumStore(tmp_path / "lake")
    for site in (EPA, NASA):
        for hour in HOURS[:2]:
            land(store, site, hour, [f"{site} {hour:%H}".encode()] * 3)
    _with_crc32c(store)
    store.calls.clear()
    return store


def _deliveries(store) -> list[LandedDelivery]:
    found = landed_hours(store, list_sites(store), HOURS[:2])
    store.calls.clear()
    return [d for deliveries, _ in found.values() for d in deliveries]


def test_verify_from_the_listing_sends_no_request(listed_store: ListingChecksumStore) -> None:
    every = _deliveries(listed_store)
    assert all(d.data_object is not None and d.data_object.crc32c for d in every)
    verify_landed(listed_store, every)
    assert listed_store.counted() == {}  # the listing of landed_hours said it all

    victim = every[-1]  # same size, other bytes: only the checksum can tell
    data = LocalObjectStore.read_bytes(listed_store, victim.manifest.data_key)
    listed_store.write_bytes(victim.manifest.data_key, data[:-1] + bytes([data[-1] ^ 1]))
    again = _deliveries(listed_store)
    with pytest.raises(LandingError) as err:
        verify_landed(listed_store, again)
    assert listed_store.counted() == {}
    message = str(err.value)
    assert f"CRC32C is {crc32c(data[:-1] + bytes([data[-1] ^ 1]))}" in message
    assert f"the manifest says {victim.manifest.crc32c}" in message
    assert listed_store.uri(victim.manifest.data_key) in message
    assert message.startswith("1 landed file(s) disagree") and "bq-platform land" in message


def test_verify_downloads_what_the_listing_cannot_prove(listed_store) -> None:
    every = _deliveries(listed_store)
    producer = dataclasses.replace(every[0].manifest, crc32c="")  # a manifest without it
    unlisted = dataclasses.replace(every[1], data_object=None)  # the listing did not have it
    mixed = [dataclasses.replace(every[0], manifest=producer), unlisted, *every[2:]]
    verify_landed(listed_store, mixed)
    assert listed_store.counted() == {"read_bytes": 2}

    # the download path checks the manifest's CRC32C too
    wrong = dataclasses.replace(every[1].manifest, crc32c="AAAAAA==")
    with pytest.raises(LandingError, match="CRC32C is .*, the manifest says AAAAAA=="):
        verify_landed(listed_store, [dataclasses.replace(unlisted, manifest=wrong)])


def test_a_local_listing_has_no_checksum_so_files_are_downloaded(tmp_path) -> None:
    store = CountingStore(tmp_path / "lake")
    land(store, EPA, HOURS[0], [b"x"])
    _with_crc32c(store)
    (delivery,), _ = landed_hour(store, EPA, HOURS[0])
    assert delivery.data_object == ListedObject(delivery.manifest.bytes, None)
    store.calls.clear()
    verify_landed(store, [delivery])
    assert store.counted() == {"read_bytes": 1}


def test_a_file_spark_cannot_read_is_a_landing_error(listed_store) -> None:
    every = _deliveries(listed_store)
    uri = f"file://{listed_store.uri(every[2].manifest.data_key)}"
    spark_error = RuntimeError(
        "An error occurred while calling o30.collectToPython.\n: org.apache.spark.SparkException"
        f": [FAILED_READ_FILE.NO_HINT] Encountered error while reading file {uri}.  SQLSTATE: "
        "KD001\n\tat org.apache.spark...\nCaused by: java.io.IOException: not a gzip file\n"
    )
    error = unreadable_landed_file(spark_error, listed_store, every)
    assert isinstance(error, LandingError)
    assert str(error).startswith(f"landed file {listed_store.uri(every[2].manifest.data_key)} ")
    assert listed_store.uri(every[2].manifest_key) in str(error)
    assert "java.io.IOException: not a gzip file" in str(error) and "bq-platform land" in str(error)
    assert unreadable_landed_file(RuntimeError("Java heap space"), listed_store, every) is None
    other = RuntimeError(spark_error.args[0].replace(uri, "file:///elsewhere/x.gz"))
    assert unreadable_landed_file(other, listed_store, every) is None


@pytest.mark.emulator
def test_on_gcs_a_build_checks_landed_files_from_the_listing(
    gcs_emulator: GCSEmulator, gcs_bucket: str, tmp_path
) -> None:
    """``bq-platform land`` writes the CRC32C; GCS lists it; the build downloads no landed file."""
    session = RecordingSession()
    gcs = GCSObjectStore(gcs_bucket, gcs_emulator.client(session), prefix="crc/lake")
    log = tmp_path / "access.log"
    line = '10.0.0.{h} - - [01/Aug/1995:0{h}:00:0{i} +0000] "GET /p{i}.html HTTP/1.0" 200 9\n'
    log.write_text("".join(line.format(h=h, i=i) for h in range(3) for i in range(4)))
    landed = land_file(gcs, EPA, log)
    assert len(landed) == 3
    assert all(f.manifest.crc32c == crc32c(gcs.read_bytes(f.manifest.data_key)) for f in landed)
    hours = [f.manifest.hour for f in landed]

    session.calls.clear()
    found = landed_hours(gcs, list_sites(gcs), hours)
    every = [d for deliveries, _ in found.values() for d in deliveries]
    verify_landed(gcs, every)
    listings = [c for c in session.calls if c.method == "GET" and c.path.endswith("/o")]
    downloads = [c.path for c in session.calls if c.query.get("alt") == "media"]  # objects.get
    assert len(listings) == 2  # the sites, then the one site's hours
    assert len(downloads) == 3 and all(p.endswith(".manifest.json") for p in downloads), downloads
    assert len(session.calls) == 2 + 3  # nothing else: no size request, no landed file

    victim = every[1].manifest  # one byte changed on the server: same size
    data = bytearray(gcs.read_bytes(victim.data_key))
    data[-5] ^= 0xFF
    gcs.write_bytes(victim.data_key, bytes(data))
    found = landed_hours(gcs, list_sites(gcs), hours)
    with pytest.raises(LandingError, match=f"CRC32C is {crc32c(bytes(data))}, the manifest says"):
        verify_landed(gcs, [d for deliveries, _ in found.values() for d in deliveries])
