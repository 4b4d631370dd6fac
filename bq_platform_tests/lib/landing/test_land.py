"""Landing: split by UTC hour, manifests last, idempotent, never drops a line."""

import base64
import dataclasses
import datetime as dt
import gzip
import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from urllib.parse import unquote

import google_crc32c
import pytest

from bq_platform.lib.core.layout import landed_manifest_key
from bq_platform.lib.core.manifest import LandedManifest, LandingError, ManifestError
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.landing.index import scan_landing
from bq_platform.lib.landing.producer import split as landing_split
from bq_platform.lib.landing.producer.land import (
    assign_hours,
    gzip_deterministic,
    land_file,
    read_lines,
)
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.emulators import GCSEmulator
from bq_platform_tests.http_recording import RecordingSession

UTC = dt.UTC
TS_RE = re.compile(rb"\[(\d\d)/Aug/1995:(\d\d):\d\d:\d\d -0400\]")


def independent_hour_counts(path: Path) -> Counter:
    """UTC hour counts computed without the lander (the logs are all EDT, -0400)."""
    counts: Counter = Counter()
    for line in gzip.decompress(path.read_bytes()).splitlines():
        m = TS_RE.search(line)
        assert m, line
        local = dt.datetime(
            1995, 8, int(m[1]), int(m[2]), tzinfo=dt.timezone(-dt.timedelta(hours=4))
        )
        counts[local.astimezone(UTC)] += 1
    return counts


@pytest.mark.parametrize(
    ("site", "pattern", "lines", "hours"),
    [
        ("epa.gov", "epa-http-*.log.gz", 47_748, 25),
        ("ksc.nasa.gov", "nasa-http-*.log.gz", 33_996, 15),
    ],
)
def test_real_logs_land_by_utc_hour(tmp_path, access_logs, site, pattern, lines, hours):
    store = LocalObjectStore(tmp_path / "lake")
    (path,) = (access_logs / site).glob(pattern)
    landed = land_file(store, site, path)
    assert sum(f.manifest.lines for f in landed) == lines
    assert len(landed) == hours
    expected = independent_hour_counts(path)
    assert {f.manifest.hour: f.manifest.lines for f in landed} == dict(expected)
    for f in landed:
        body = store.read_bytes(f.manifest.data_key)
        assert len(body) == f.manifest.bytes
        assert len(gzip.decompress(body).splitlines()) == f.manifest.lines
        assert (
            LandedManifest.from_json(store.read_bytes(landed_manifest_key(f.manifest.data_key)))
            == f.manifest
        )
        # the checksum GCS lists with every object (base64, big-endian), computed apart
        crc = base64.b64encode(google_crc32c.value(body).to_bytes(4, "big")).decode()
        assert f.manifest.crc32c == crc


def test_a_landed_manifest_crc32c_is_optional_and_checked():
    manifest = LandedManifest(
        site="epa.gov",
        hour=dt.datetime(1995, 8, 1, 4, tzinfo=dt.UTC),
        data_key="landing/pageviews/site=epa.gov/hour=1995-08-01T04/a.log.gz",
        lines=9,
        bytes=10,
        sha256="ab" * 32,
        crc32c="4waSgw==",
    )
    assert LandedManifest.from_json(manifest.to_json()) == manifest
    producer = json.loads(manifest.to_json())
    del producer["crc32c"]  # a producer that does not write it
    assert LandedManifest.from_json(json.dumps(producer)).crc32c == ""
    assert "crc32c" not in dataclasses.replace(manifest, crc32c="").to_json()
    for bad in ("e3069283", "4waSgw", "4waSgw==x", 42):
        with pytest.raises(ManifestError, match="m.json: crc32c .* is not a base64 CRC32C"):
            LandedManifest.from_json(json.dumps({**producer, "crc32c": bad}), where="m.json")


def test_landing_twice_writes_nothing_new(tmp_path, access_logs):
    store = LocalObjectStore(tmp_path / "lake")
    (path,) = (access_logs / "ksc.nasa.gov").glob("*.gz")
    first = land_file(store, "ksc.nasa.gov", path)
    keys = store.list_keys("landing")
    second = land_file(store, "ksc.nasa.gov", path)
    assert all(f.written for f in first) and not any(f.written for f in second)
    assert store.list_keys("landing") == keys
    index = scan_landing(store)
    assert sum(h.source_lines for h in index.hours()) == 33_996


def test_plain_and_gzip_inputs_land_identically(tmp_path):
    text = (
        b'a - - [01/Aug/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 10\n'
        b'b - - [01/Aug/1995:00:59:59 -0400] "GET /x HTTP/1.0" 304 -\n'
    )
    plain, gz = tmp_path / "a.log", tmp_path / "a.log.gz"
    plain.write_bytes(text)
    gz.write_bytes(gzip.compress(text))
    store = LocalObjectStore(tmp_path / "lake")
    (from_plain,) = land_file(store, "s", plain)
    (from_gzip,) = land_file(store, "s", gz)
    assert from_plain.written and not from_gzip.written  # same content, same object
    assert (
        from_plain.manifest.data_key,
        from_plain.manifest.sha256,
        from_plain.manifest.lines,
    ) == (from_gzip.manifest.data_key, from_gzip.manifest.sha256, 2)


def test_unreadable_timestamps_stay_with_neighbours(tmp_path):
    lines = [
        b"garbage before any timestamp",
        b'a - - [01/Aug/1995:05:10:00 +0000] "GET / HTTP/1.0" 200 1',
        b"",
        b'b - - [01/Aug/1995:06:00:00 +0000] "GET / HTTP/1.0" 200 1',
        b'c - - [99/Foo/1995:06:00:00 +0000] "GET / HTTP/1.0" 200 1',
    ]
    hours = assign_hours(lines)
    h5 = dt.datetime(1995, 8, 1, 5, tzinfo=UTC)
    h6 = dt.datetime(1995, 8, 1, 6, tzinfo=UTC)
    assert hours == [h5, h5, h5, h6, h6]


def test_file_without_any_timestamp_needs_a_default_hour(tmp_path):
    path = tmp_path / "junk.log"
    path.write_bytes(b"no\ntimestamps\nhere")
    store = LocalObjectStore(tmp_path / "lake")
    with pytest.raises(LandingError, match="--default-hour"):
        land_file(store, "s", path)
    hour = dt.datetime(1995, 8, 1, 7, tzinfo=UTC)
    (landed,) = land_file(store, "s", path, default_hour=hour)
    assert landed.manifest.hour == hour and landed.manifest.lines == 3


def test_truncated_last_line_and_control_bytes_are_lines(tmp_path):
    path = tmp_path / "t.log"
    path.write_bytes(
        b'a - - [01/Aug/1995:00:00:01 +0000] "GET /a\rb HTTP/1.0" 200 1\n'
        b'a - - [01/Aug/1995:00:00:02 +0000] "GET /trunc'
    )
    assert len(read_lines(path)) == 2
    store = LocalObjectStore(tmp_path / "lake")
    (landed,) = land_file(store, "s", path)
    assert landed.manifest.lines == 2


def test_corrupt_gzip_input_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.log.gz"
    path.write_bytes(gzip.compress(b"x" * 1000)[:-20])
    with pytest.raises(LandingError, match="bad.log.gz"):
        land_file(LocalObjectStore(tmp_path / "lake"), "s", path)


# --- issue 7: re-landing repairs what is landed ----------------------------------------------


def _landed_objects(store: LocalObjectStore) -> dict[str, LandedManifest]:
    out = {}
    for key in store.list_keys("landing/pageviews"):
        if key.endswith(".manifest.json"):
            manifest = LandedManifest.from_json(store.read_bytes(key))
            out[manifest.data_key] = manifest
    return out


def _intact(store: LocalObjectStore, manifest: LandedManifest) -> bool:
    data = store.read_bytes(manifest.data_key)
    return len(data) == manifest.bytes and hashlib.sha256(data).hexdigest() == manifest.sha256


@pytest.mark.parametrize("forget_registry", [False, True])
@pytest.mark.parametrize("damage", ["flip", "truncate", "delete", "manifest"])
def test_relanding_repairs_corrupt_landed_file(tmp_path, access_logs, damage, forget_registry):
    """Issue 7: `bq-platform land` of the same source said "already there" and kept the
    corrupt bytes; it must check what is landed against its manifest and replace it."""
    store = LocalObjectStore(tmp_path / "lake")
    (path,) = (access_logs / "ksc.nasa.gov").glob("*.gz")
    first = land_file(store, "ksc.nasa.gov", path)
    victim = first[3].manifest
    key = victim.data_key
    if damage == "flip":
        data = bytearray(store.read_bytes(key))
        data[-9] ^= 0xFF  # same size, other content
        store.write_bytes(key, bytes(data))
    elif damage == "truncate":
        store.write_bytes(key, store.read_bytes(key)[:-10])
    elif damage == "delete":
        Path(store.uri(key)).unlink()
    else:
        store.write_text(landed_manifest_key(key), "{broken")
    if forget_registry:  # as landed before the registry existed
        store.delete_prefix("landing/_registry")
    second = land_file(store, "ksc.nasa.gov", path)
    repaired = [f for f in second if f.written]
    assert [f.manifest.data_key for f in repaired] == [key]
    assert all(f.repaired for f in repaired) or forget_registry
    objects = _landed_objects(store)
    assert objects[key] == victim and all(_intact(store, m) for m in objects.values())
    assert sorted(objects) == sorted(f.manifest.data_key for f in first)
    assert gzip.decompress(store.read_bytes(key)).count(b"\n") == victim.lines
    assert not any(f.written for f in land_file(store, "ksc.nasa.gov", path))  # now intact


@pytest.mark.emulator
def test_relanding_on_gcs_checks_landed_objects_without_downloading_them(
    gcs_emulator: GCSEmulator, gcs_bucket: str, tmp_path
):
    """Each land of a growing source checks what its earlier deliveries landed; on GCS from
    each object's metadata (size, CRC32C), not a download of it (issue 9)."""
    session = RecordingSession()
    gcs = GCSObjectStore(gcs_bucket, gcs_emulator.client(session), prefix="reland/lake")
    path = tmp_path / "growing.log"
    line = '10.0.0.{h} - - [01/Aug/1995:0{h}:00:0{i} +0000] "GET /p{i}.html HTTP/1.0" 200 9\n'
    path.write_text("".join(line.format(h=h, i=i) for h in range(3) for i in range(4)))
    first = land_file(gcs, "epa.gov", path)
    with path.open("a") as log:  # the source grows by an hour
        log.write("".join(line.format(h=3, i=i) for i in range(4)))
    session.calls.clear()
    (grown,) = land_file(gcs, "epa.gov", path)
    assert grown.written and grown.manifest.hour.hour == 3
    data_keys = {f.manifest.data_key for f in first}
    downloaded = {unquote(c.path) for c in session.calls if c.query.get("alt") == "media"}
    assert not {k for k in data_keys if any(d.endswith(k) for d in downloaded)}, downloaded
    metadata = [c for c in session.calls if c.method == "GET" and "alt" not in c.query]
    assert sum(any(unquote(c.path).endswith(k) for k in data_keys) for c in metadata) == 3

    victim = first[1].manifest  # a byte changed on the server, same size: repaired
    data = bytearray(gcs.read_bytes(victim.data_key))
    data[-6] ^= 0xFF
    gcs.write_bytes(victim.data_key, bytes(data))
    (repaired,) = land_file(gcs, "epa.gov", path)
    assert repaired.repaired and repaired.manifest == victim
    assert gcs.read_bytes(victim.data_key) != bytes(data)


# --- issue 9: the fast split is the per-line reference ---------------------------------------

ODD_LINES = [
    b'a - - [01/Aug/1995:00:00:01 -0400] "GET / HTTP/1.0" 200 10',
    b"",
    b"garbage \xff\xfe before",
    b'www.example.com:80 1.2.3.4 - - [01/Aug/1995:05:59:59 +0000] "GET / HTTP/1.1" 200 5',
    b'b - - [01/Aug/1995:03:00:00 -0400] "GET /late HTTP/1.0" 200 1',  # out of order
    b'c - - [01/Aug/1995:09:10:11 +0530] "GET /india HTTP/1.0" 200 1',  # zone with minutes
    b'c - - [01/Aug/1995:09:40:11 +0530] "GET /india HTTP/1.0" 200 1',
    b'd - - [01/Aug/1995:07:00:60 +0000] "GET /leap HTTP/1.0" 200 1',  # bad seconds
    b'd - - [31/Feb/1995:07:00:00 +0000] "GET /feb HTTP/1.0" 200 1',  # no such day
    b"[01/Aug/1995:08:00:00 +0000]",  # a bare bracketed timestamp is read too
    b'e - - [01/aug/1995:08:30:00 +0000] "GET /lower HTTP/1.0" 200 1',
    b'f:1 g - - [01/Aug/1995:08:45:00 +0000] "GET /vhost-like HTTP/1.0" 200 1',
    b'h - - [01/Aug/1995:08:45:00 +0000 "GET /no-bracket HTTP/1.0" 200 1',
    b'i - - [01/Aug/2099:08:45:00 +0000] "GET /future HTTP/1.0" 200 1',
    b'j - - [01/Aug/1990:08:45:00 +0000] "GET /past HTTP/1.0" 200 1',
    b'a - - [01/Aug/1995:09:00:00 -0400] "GET /trunc',
]


def _fast_hours(data: bytes, window: HourWindow | None = None, default=None) -> list:
    runs = landing_split.place_runs(landing_split.hour_runs(data), window, default)
    return [hour for hour, _a, _b, n in runs for _ in range(n)]


@pytest.mark.parametrize("final_newline", [True, False])
def test_fast_split_matches_the_per_line_reference(access_logs, final_newline):
    (path,) = (access_logs / "ksc.nasa.gov").glob("*.gz")
    real = gzip.decompress(path.read_bytes()).split(b"\n")[:3000]
    lines = real[:1000] + ODD_LINES + real[1000:] + ODD_LINES[::-1]
    data = b"\n".join(lines) + (b"\n" if final_newline else b"")
    assert landing_split.split_lines(data) == lines
    window = HourWindow(dt.datetime(1995, 8, 1, tzinfo=UTC), dt.datetime(2030, 1, 1, tzinfo=UTC))
    for w in (None, window):
        assert _fast_hours(data, w) == assign_hours(lines, window=w)
    own = [h for h, _a, _b, n in landing_split.hour_runs(data) for _ in range(n)]
    assert own == [landing_split.line_hour(line) for line in lines]


def test_fast_split_handles_every_line_shape():
    lines = [b"x", b"", b"[01/Aug/1995:08:00:00 +0000]", b"y"]
    data = b"\n".join(lines)
    hour = dt.datetime(1995, 8, 1, 8, tzinfo=UTC)
    assert _fast_hours(data) == [hour] * 4
    assert landing_split.place_runs(landing_split.hour_runs(b"x\ny"), None, None) is None
    assert _fast_hours(b"", None) == []


def test_landed_gzip_is_deterministic_and_standard():
    body = b"line one\nline two\n"
    for comment in ("", "bq_platform offset 12"):
        once, again = gzip_deterministic(body, comment), gzip_deterministic(body, comment)
        assert once == again and gzip.decompress(once) == body
    assert gzip_deterministic(body) != gzip_deterministic(body, "bq_platform offset 12")


# --- issue 7: timestamps outside the partitions ----------------------------------------------


def test_lines_outside_the_partitions_land_with_their_neighbours(tmp_path):
    """A line dated 2099 created day 2099-08-01 and one dated 1990 an hour before the first
    partition; both must land in the hour of their neighbours (then counted out of window)."""
    path = tmp_path / "odd-dates.log"
    path.write_bytes(
        b'a - - [01/Aug/1990:00:00:01 +0000] "GET /past HTTP/1.0" 200 1\n'
        b'a - - [01/Aug/1995:04:00:01 +0000] "GET / HTTP/1.0" 200 1\n'
        b'a - - [01/Aug/2099:00:00:01 +0000] "GET /future HTTP/1.0" 200 1\n'
        b'a - - [01/Aug/1995:05:00:01 +0000] "GET / HTTP/1.0" 200 1\n'
        b'a - - [24/Nov/2026:05:00:01 +0000] "GET /within-skew HTTP/1.0" 200 1\n'
    )
    store = LocalObjectStore(tmp_path / "lake")
    first = dt.datetime(1995, 8, 1, tzinfo=UTC)
    now = dt.datetime(2026, 11, 24, 4, 30, tzinfo=UTC)
    landed = land_file(store, "s", path, first_hour=first, now=now)
    by_hour = {f.manifest.hour: f.manifest.lines for f in landed}
    h4, h5 = dt.datetime(1995, 8, 1, 4, tzinfo=UTC), dt.datetime(1995, 8, 1, 5, tzinfo=UTC)
    assert by_hour == {h4: 3, h5: 1, dt.datetime(2026, 11, 24, 5, tzinfo=UTC): 1}
    assert {h.hour for h in scan_landing(store).hours()} == set(by_hour)
    assert sum(by_hour.values()) == 5


def test_a_file_of_future_lines_only_needs_a_default_hour(tmp_path):
    path = tmp_path / "future.log"
    path.write_bytes(b'a - - [01/Aug/2099:00:00:01 +0000] "GET / HTTP/1.0" 200 1\n')
    store = LocalObjectStore(tmp_path / "lake")
    first = dt.datetime(1995, 8, 1, tzinfo=UTC)
    with pytest.raises(LandingError, match="inside the partitions.*--default-hour"):
        land_file(store, "s", path, first_hour=first)
    hour = dt.datetime(1995, 8, 1, 7, tzinfo=UTC)
    (landed,) = land_file(store, "s", path, first_hour=first, default_hour=hour)
    assert landed.manifest.hour == hour
