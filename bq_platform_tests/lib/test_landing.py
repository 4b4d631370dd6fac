"""Landing: split by UTC hour, manifests last, idempotent, never drops a line."""

import datetime as dt
import gzip
import re
from collections import Counter
from pathlib import Path

import pytest

from bq_platform.lib.landing import LandingError, assign_hours, land_file, read_lines
from bq_platform.lib.landing_index import scan_landing
from bq_platform.lib.layout import landed_manifest_key
from bq_platform.lib.manifest import LandedManifest
from bq_platform.lib.objectstore.local import LocalObjectStore

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
