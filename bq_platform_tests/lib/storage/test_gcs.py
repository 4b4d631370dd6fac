"""GCSObjectStore against gcp-storage-emulator (GCS JSON API on loopback), official client."""

import datetime as dt

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.storage.base import ListedObject, ObjectNotFoundError, crc32c
from bq_platform.lib.storage.gcs import GCSObjectStore, gcs_client
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.emulators import GCSEmulator
from bq_platform_tests.http_recording import RecordingSession

pytestmark = pytest.mark.emulator

HOUR = dt.datetime(1995, 8, 1, 4, tzinfo=dt.UTC)


@pytest.fixture
def store(gcs_emulator: GCSEmulator, gcs_bucket: str) -> GCSObjectStore:
    return GCSObjectStore(gcs_bucket, gcs_emulator.client(), prefix="env/lake")


def test_round_trip_bytes_text_size_and_exists(store: GCSObjectStore) -> None:
    key = layout.hour_manifest_key(HOUR)
    assert not store.exists(key)
    store.write_text(key, '{"format": "x"}')
    assert store.exists(key)
    assert store.read_text(key) == '{"format": "x"}'
    assert store.size(key) == len(b'{"format": "x"}')
    store.write_bytes(key, b"\x00\xffbinary")  # replaces the whole object
    assert store.read_bytes(key) == b"\x00\xffbinary"
    assert store.size(key) == 8
    assert store.stat(key) == ListedObject(8, crc32c(b"\x00\xffbinary"))  # no download


def test_missing_objects_raise_with_the_uri(store: GCSObjectStore) -> None:
    with pytest.raises(ObjectNotFoundError, match=r"gs://.*/env/lake/nope/x\.json"):
        store.read_bytes("nope/x.json")
    with pytest.raises(ObjectNotFoundError, match="nope/y"):
        store.size("nope/y")


def test_listing_keys_and_folders(store: GCSObjectStore) -> None:
    sha = "ab" * 32
    for site in ("epa.gov", "nasa.gov"):
        data_key = layout.landed_data_key(site, HOUR, sha)
        store.write_bytes(data_key, b"gz")
        store.write_text(layout.landed_manifest_key(data_key), "{}")
    store.write_text("landing/pageviews-other/x.txt", "not under the folder")

    assert store.list_folders(layout.LANDING_PREFIX) == ["site=epa.gov", "site=nasa.gov"]
    assert store.list_folders(f"{layout.LANDING_PREFIX}/site=epa.gov") == [
        f"hour={layout.hour_label(HOUR)}"
    ]
    keys = store.list_keys(layout.LANDING_PREFIX)
    assert len(keys) == 4 and keys == sorted(keys)
    assert all(k.startswith(layout.LANDING_PREFIX + "/") for k in keys)
    assert "landing/pageviews-other/x.txt" not in keys  # folder semantics, not string prefix
    assert store.list_keys("missing/folder") == []
    assert store.list_folders("missing/folder") == []
    assert [layout.parse_landed_manifest_key(k) for k in keys if k.endswith(".json")] == [
        ("epa.gov", HOUR),
        ("nasa.gov", HOUR),
    ]


def test_a_key_range_is_one_listing_with_offsets(
    gcs_emulator: GCSEmulator, gcs_bucket: str
) -> None:
    """``list_keys(start=, end=)`` sends objects.list's ``startOffset``/``endOffset`` (GCS
    filters server-side) and applies the range itself too: gcp-storage-emulator ignores them."""
    session = RecordingSession()
    client = gcs_emulator.client(session)
    store = GCSObjectStore(gcs_bucket, client, prefix="env/lake")
    site = f"{layout.LANDING_PREFIX}/site=epa.gov"
    hours = [HOUR + dt.timedelta(hours=h) for h in range(4)]
    for hour in hours:
        store.write_text(f"{layout.landing_hour_prefix('epa.gov', hour)}/f.gz", "x")
    session.calls.clear()

    start = layout.landing_hour_prefix("epa.gov", hours[1]) + "/"
    end = layout.landing_hour_prefix("epa.gov", hours[3]) + "/"
    keys = store.list_keys(site, start=start, end=end)

    assert keys == [f"{layout.landing_hour_prefix('epa.gov', h)}/f.gz" for h in hours[1:3]]
    (call,) = session.calls
    assert call.path.endswith(f"/b/{gcs_bucket}/o")
    assert call.query["startOffset"] == f"env/lake/{start}"
    assert call.query["endOffset"] == f"env/lake/{end}"
    assert call.query["prefix"] == f"env/lake/{site}/"
    store.write_text(keys[0], "four")  # the listing carries each object's size
    assert store.list_sizes(site, start=start, end=end) == {keys[0]: 4, keys[1]: 1}
    assert len(session.calls) == 3  # the write, then one listing: no request per object


def test_crc32c_is_encoded_as_gcs_reports_it() -> None:
    # CRC-32C's check value, 0xE3069283 for b"123456789" (CRC-32/ISCSI in the CRC catalogue,
    # reveng.sourceforge.io/crc-catalogue), as base64 of its 4 big-endian bytes
    # (cloud.google.com/storage/docs/json_api/v1/objects, field crc32c).
    assert crc32c(b"123456789") == "4waSgw=="
    assert crc32c(b"") == "AAAAAA=="


def test_the_listing_carries_each_objects_crc32c(store: GCSObjectStore, tmp_path) -> None:
    data = {"sums/a.gz": b"\x1f\x8b one", "sums/b/c.gz": b"\x1f\x8b two" * 1000}
    for key, body in data.items():
        store.write_bytes(key, body)
    assert store.list_objects("sums") == {
        k: ListedObject(len(b), crc32c(b)) for k, b in data.items()
    }
    local = LocalObjectStore(tmp_path)  # a disk keeps no checksum: None, not a computed one
    local.write_bytes("sums/a.gz", data["sums/a.gz"])
    assert local.list_objects("sums") == {"sums/a.gz": ListedObject(len(data["sums/a.gz"]))}


def test_read_many_reads_side_by_side_and_maps_missing_keys(store: GCSObjectStore) -> None:
    keys = [f"many/{i:02d}.json" for i in range(20)]
    for i, key in enumerate(keys):
        store.write_text(key, str(i))
    assert store.read_threads > 1  # GCS: a request per read
    found = store.read_many([*keys, "many/missing.json"])
    assert list(found) == [*keys, "many/missing.json"]
    assert [found[k] for k in keys] == [str(i).encode() for i in range(20)]
    missing = found["many/missing.json"]
    assert isinstance(missing, ObjectNotFoundError) and "many/missing.json" in str(missing)


def test_delete_prefix_counts_and_keeps_neighbours(store: GCSObjectStore) -> None:
    attempt = layout.attempt_prefix("run-1")
    for i in range(3):
        store.write_bytes(f"{attempt}/full/part-{i}.parquet", b"p")
    store.write_bytes(f"{layout.attempt_prefix('run-10')}/full/part-0.parquet", b"p")
    assert store.delete_prefix(attempt) == 3
    assert store.list_keys(attempt) == []
    assert store.list_keys(layout.attempt_prefix("run-10")) == [
        "staging/pageviews/attempt=run-10/full/part-0.parquet"
    ]
    assert store.delete_prefix(attempt) == 0
    with pytest.raises(ValueError, match="whole store"):
        store.delete_prefix("")


def test_uri_and_key_for_uri_are_inverse(store: GCSObjectStore, gcs_bucket: str) -> None:
    key = "staging/pageviews/hour=1995-08-01T04/_MANIFEST.json"
    uri = store.uri(key)
    assert uri == f"gs://{gcs_bucket}/env/lake/{key}"
    assert store.key_for_uri(uri) == key
    with pytest.raises(ValueError, match="not inside"):
        store.key_for_uri(f"gs://{gcs_bucket}/other/{key}")
    with pytest.raises(ValueError, match="not inside"):
        store.key_for_uri(f"gs://another-bucket/env/lake/{key}")


@pytest.mark.parametrize("bad", ["/abs", "a//b", "a/../b", "a/./b", "trailing/", "", "a\nb"])
def test_malformed_keys_are_refused(store: GCSObjectStore, bad: str) -> None:
    with pytest.raises(ValueError):
        store.uri(bad)


def test_objects_land_where_bqemulator_reads_gs_uris(
    gcs_emulator: GCSEmulator, store: GCSObjectStore, gcs_bucket: str
) -> None:
    """The GCS emulator keeps ``gs://bucket/name`` at ``<data-dir>/.cloudstorage/bucket/name``."""
    store.write_bytes("a/b.bin", b"123")
    assert (gcs_emulator.storage_root / gcs_bucket / "env/lake/a/b.bin").read_bytes() == b"123"


def test_factory_honours_storage_emulator_host(
    gcs_emulator: GCSEmulator, gcs_bucket: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator.endpoint)
    client = gcs_client("bqp-emulator")
    store = GCSObjectStore(gcs_bucket, client)
    store.write_text("root-key.txt", "hi")
    assert store.uri("root-key.txt") == f"gs://{gcs_bucket}/root-key.txt"
    assert GCSObjectStore(gcs_bucket, gcs_emulator.client()).read_text("root-key.txt") == "hi"
