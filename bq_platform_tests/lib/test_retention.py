"""Attempt cleanup on a real local store: superseded attempts go, named and young ones stay."""

import datetime as dt
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bq_platform.lib import layout
from bq_platform.lib.deadletters import built_hours, cut, read_dead_letters, summarize
from bq_platform.lib.manifest import HourManifest
from bq_platform.lib.objectstore.gcs import GCSObjectStore
from bq_platform.lib.objectstore.local import LocalObjectStore
from bq_platform.lib.retention import RETENTION, attempt_hours, clean_attempts, list_attempts
from bq_platform_tests.emulators import GCSEmulator
from bq_platform_tests.lib.counting_store import CountingStore

H5 = dt.datetime(1995, 8, 1, 5, tzinfo=dt.UTC)
H6 = dt.datetime(1995, 8, 1, 6, tzinfo=dt.UTC)
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def parquet(rows: list[dict]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def write_attempt(
    store: LocalObjectStore, attempt: str, hour: dt.datetime, dead: list[dict]
) -> tuple[str, str, str]:
    """Write one attempt's files for one hour, as the build does; return their keys."""
    full, sample, dead_prefix = layout.attempt_hour_prefixes(attempt, hour)
    keys = (f"{full}/part-0.parquet", f"{sample}/part-0.parquet", f"{dead_prefix}/part-0.parquet")
    store.write_bytes(keys[0], parquet([{"event_id": "a"}]))
    store.write_bytes(keys[1], parquet([{"event_id": "a"}]))
    store.write_bytes(keys[2], parquet(dead))
    return keys


def publish(store: LocalObjectStore, attempt: str, hour: dt.datetime, keys: tuple) -> None:
    """Write the hour manifest naming ``attempt``'s files (what a complete build does last)."""
    manifest = HourManifest(
        hour=hour,
        attempt_id=attempt,
        fingerprint="f" * 64,
        input_fingerprint="i" * 64,
        full_files=(keys[0],),
        sample_files=(keys[1],),
        deadletter_files=(keys[2],),
        rows=1,
        sample_rows=1,
        counts=(),
    )
    store.write_text(layout.hour_manifest_key(hour), manifest.to_json())


def dead_row(line_no: int, reason: str = "malformed", raw: str = "garbage") -> dict:
    return {
        "site": "ksc.nasa.gov",
        "data_key": "landing/x.log.gz",
        "line_no": line_no,
        "reason": reason,
        "raw": raw,
    }


def lake(tmp_path) -> LocalObjectStore:
    """Hour 5 built by 'old' (crashed, then superseded) and 'new' (named); hour 6 by 'old' and
    'running' (no manifest yet for 6 from 'running'); 'crashed' wrote only Spark's _temporary."""
    store = LocalObjectStore(tmp_path / "lake")
    write_attempt(store, "old", H5, [dead_row(1)])
    old6 = write_attempt(store, "old", H6, [dead_row(9)])
    new5 = write_attempt(store, "new", H5, [dead_row(1)])
    publish(store, "new", H5, new5)
    publish(store, "old", H6, old6)
    write_attempt(store, "running", H6, [dead_row(9)])
    store.write_bytes(f"{layout.attempt_prefix('crashed')}/full/_temporary/0/part", b"x")
    return store


def test_superseded_attempts_are_deleted_after_the_retention_only(tmp_path):
    store = lake(tmp_path)
    assert list_attempts(store) == ["crashed", "new", "old", "running"]
    assert attempt_hours(store, "old") == [H5, H6]

    first = clean_attempts(store, now=T0)
    assert first.deleted_units == [] and first.deleted_objects == 0
    assert first.waiting == 3  # old/H5, running/H6 (superseded by old's manifest), crashed

    young = clean_attempts(store, now=T0 + RETENTION - dt.timedelta(seconds=1))
    assert young.deleted_units == []

    due = clean_attempts(store, now=T0 + RETENTION)
    assert sorted(due.deleted_units) == [
        ("crashed", "*"),
        ("old", "1995-08-01T05"),
        ("running", "*"),
        ("running", "1995-08-01T06"),
    ]
    assert due.deleted_objects == 1 + 3 + 3
    assert list_attempts(store) == ["new", "old"]
    assert attempt_hours(store, "old") == [H6]  # still named by hour 6's manifest
    for hour in (H5, H6):  # every file a manifest names is still there
        manifest = HourManifest.from_json(store.read_bytes(layout.hour_manifest_key(hour)))
        for key in manifest.full_files + manifest.sample_files + manifest.deadletter_files:
            assert store.exists(key)


def test_each_hour_manifest_is_read_once_whatever_the_attempts(tmp_path):
    """Four attempts hold hours 5 and 6: one read per hour, no existence check (on GCS two
    requests in a row per hour and attempt were the cost, issue 9)."""
    store = CountingStore(tmp_path / "lake")
    for attempt in ("a", "b", "c"):
        for hour in (H5, H6):
            keys = write_attempt(store, attempt, hour, [dead_row(1)])
    publish(store, "c", H6, keys)
    store.calls.clear()
    report = clean_attempts(store, now=T0)
    # hours 5 and 6, and the registry; 2 listings of attempts, 3 of each attempt's hours
    assert store.counted() == {"read_bytes": 2 + 1, "list_folders": 2 + 3 * 3}
    assert report.waiting == 2  # a/H6 and b/H6
    assert report.kept == 3 + 1  # hour 5 has no manifest: kept for a, b, c; c/H6 is named


@pytest.mark.emulator
def test_on_gcs_the_same_units_go(gcs_emulator: GCSEmulator, gcs_bucket: str, tmp_path):
    """On GCS the attempts' hour folders are listed side by side (8 threads): same result."""
    local = lake(tmp_path)
    gcs = GCSObjectStore(gcs_bucket, gcs_emulator.client(), prefix="retention/lake")
    for key in local.list_keys(""):
        gcs.write_bytes(key, local.read_bytes(key))
    assert gcs.read_threads > 1
    for store in (local, gcs):
        clean_attempts(store, now=T0)
    due = [clean_attempts(s, now=T0 + RETENTION) for s in (local, gcs)]
    assert sorted(due[1].deleted_units) == sorted(due[0].deleted_units)
    assert len(due[1].deleted_units) == 4 and due[1].deleted_objects == due[0].deleted_objects
    assert list_attempts(gcs) == list_attempts(local) == ["new", "old"]


def test_an_attempt_named_again_is_forgotten_and_kept(tmp_path):
    store = lake(tmp_path)
    clean_attempts(store, now=T0)
    # 'running' finishes and its manifest replaces old's for hour 6.
    keys = tuple(f"{p}/part-0.parquet" for p in layout.attempt_hour_prefixes("running", H6))
    publish(store, "running", H6, keys)

    report = clean_attempts(store, now=T0 + RETENTION)

    assert ("running", "1995-08-01T06") not in report.deleted_units
    assert ("old", "1995-08-01T06") not in report.deleted_units  # first seen superseded now
    assert store.exists(keys[0])
    later = clean_attempts(store, now=T0 + 2 * RETENTION)
    assert ("old", "*") in later.deleted_units
    assert list_attempts(store) == ["new", "running"]


def test_dead_letters_come_from_the_named_files_only(tmp_path):
    store = lake(tmp_path)
    assert built_hours(store) == [H5, H6]

    letters = list(read_dead_letters(store, [H5, H6]))

    # A glob of deadletter/ finds 4 files (old, new, old, running); the manifests name two.
    assert len(store.list_keys(layout.DEADLETTER_PREFIX)) == 4
    assert [(d.hour, d.line_no) for d in letters] == [(H5, 1), (H6, 9)]
    report = summarize(letters, limit=1)
    assert report.counts == {"malformed": 2} and report.total == 2
    assert len(report.samples) == 1
    assert summarize(letters, reason="bad_status").total == 0


def test_raw_text_is_cut_to_a_readable_width():
    assert cut("a\tb\x1bc") == "a\\x09b\\x1bc"
    long = cut("x" * 500, width=20)
    assert len(long) == 20 and long.endswith("...")
