"""Attempt cleanup on a real local store: superseded attempts go, named and young ones stay."""

import datetime as dt
import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.hourly_build.retention import (
    FULL_PASS_EVERY,
    RETENTION,
    attempt_hours,
    clean_attempts,
    clean_staging,
    clean_superseded,
    list_attempts,
)
from bq_platform.lib.hourly_build.superseded import read_records, record_superseded
from bq_platform.lib.quality.deadletters import built_hours, cut, read_dead_letters, summarize
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.emulators import GCSEmulator
from bq_platform_tests.lib.storage.counting_store import CountingStore

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


def manifest_of(
    attempt: str, hour: dt.datetime, keys: tuple | None = None, created_at: dt.datetime = T0
) -> HourManifest:
    """An hour manifest of ``attempt`` naming ``keys`` (default: one file in each of its three
    folders of ``hour``, as :func:`write_attempt` writes them), written at ``created_at``."""
    keys = keys or tuple(f"{p}/part-0.parquet" for p in layout.attempt_hour_prefixes(attempt, hour))
    return HourManifest(
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
        created_at=created_at,
    )


def publish(
    store: LocalObjectStore,
    attempt: str,
    hour: dt.datetime,
    keys: tuple,
    created_at: dt.datetime = T0,
) -> None:
    """Write the hour manifest naming ``attempt``'s files (what a complete build does last)."""
    manifest = manifest_of(attempt, hour, keys, created_at)
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


def recorded_lake(store: LocalObjectStore, history: int = 0) -> LocalObjectStore:
    """'old' built hours 5 and 6, then 'new' rebuilt hour 5 and recorded old/05 as superseded
    at T0; ``history`` earlier attempts, each superseded for hour 6 long ago, no record."""
    for n in range(history):
        write_attempt(store, f"h{n:03d}", H6, [dead_row(n)])
    old5 = write_attempt(store, "old", H5, [dead_row(1)])
    publish(store, "old", H6, write_attempt(store, "old", H6, [dead_row(9)]))
    publish(store, "old", H5, old5)
    publish(store, "new", H5, write_attempt(store, "new", H5, [dead_row(1)]))
    record_superseded(store, "new", [("old", "1995-08-01T05")], now=T0)
    return store


def test_recorded_units_go_after_the_retention_whatever_the_history(tmp_path):
    """The record pass's requests follow the records, not the attempts ever written (issue
    9): 50 old attempts change nothing, and no folder is listed."""
    store = recorded_lake(CountingStore(tmp_path / "lake"), history=50)
    store.calls.clear()

    young = clean_superseded(store, now=T0 + RETENTION - dt.timedelta(seconds=1))

    assert young.deleted_units == [] and young.waiting == 1 and young.records == 0
    assert store.counted() == {"list": 1, "read_bytes": 1}  # the records; no manifest yet
    due = clean_superseded(store, now=T0 + RETENTION)
    assert due.deleted_units == [("old", "1995-08-01T05")] and due.deleted_objects == 3
    assert due.records == 1 and due.kept == 0 and due.waiting == 0
    # the records' listing and read, hour 5's manifest, old/05's 3 folders and the record
    assert store.counted() == {"list": 1, "read_bytes": 2, "delete_prefix": 3 + 1}
    assert read_records(store) == {}
    assert attempt_hours(store, "old") == [H6]  # named by hour 6's manifest
    assert attempt_hours(store, "new") == [H5]
    assert len(list_attempts(store)) == 2 + 50  # the unrecorded history waits for a full pass
    assert clean_superseded(store, now=T0 + 2 * RETENTION).deleted_units == []


def test_a_recorded_unit_named_again_is_kept(tmp_path):
    store = recorded_lake(LocalObjectStore(tmp_path / "lake"))
    keys = tuple(f"{p}/part-0.parquet" for p in layout.attempt_hour_prefixes("old", H5))
    publish(store, "old", H5, keys)  # hour 5's manifest names old's files again

    report = clean_superseded(store, now=T0 + RETENTION)

    assert report.deleted_units == [] and report.kept == 1 and report.records == 1
    assert all(store.exists(k) for k in keys)


def test_an_unreadable_record_is_kept_and_named(tmp_path, caplog):
    store = recorded_lake(LocalObjectStore(tmp_path / "lake"))
    bad = "staging/pageviews/_SUPERSEDED/attempt=torn/units.json"
    store.write_text(bad, '{"format": "bq_platform.superseded/1", "units": [')

    report = clean_superseded(store, now=T0 + RETENTION)

    assert report.bad_records == [bad] and store.exists(bad)
    assert report.deleted_units == [("old", "1995-08-01T05")]
    assert store.uri(bad) in caplog.text and "delete it by hand" in caplog.text


def test_the_full_pass_runs_first_then_once_every_full_pass_every(tmp_path):
    store = recorded_lake(LocalObjectStore(tmp_path / "lake"))
    store.write_text(layout.ATTEMPT_REGISTRY_KEY, '{"old/1995-08-01T06": "2025-01-01T00:00:00"}')
    write_attempt(store, "crashed", H6, [dead_row(5)])  # no manifest will ever name it

    first = clean_staging(store, now=T0)  # a registry of the first format: no full pass known
    assert first.full_pass and first.waiting == 1 + 1  # the record's unit, crashed/06
    day = clean_staging(store, now=T0 + RETENTION)
    assert not day.full_pass and day.deleted_units == [("old", "1995-08-01T05")]
    forced = clean_staging(store, now=T0 + RETENTION, full=True)
    assert forced.full_pass
    assert forced.deleted_units == [("crashed", "1995-08-01T06"), ("crashed", "*")]
    assert list_attempts(store) == ["new", "old"]
    last = T0 + RETENTION  # the forced pass
    assert not clean_staging(store, now=last + FULL_PASS_EVERY - dt.timedelta(seconds=1)).full_pass
    assert clean_staging(store, now=last + FULL_PASS_EVERY).full_pass


def test_settled_attempts_are_not_visited_again_and_records_still_clean_them(tmp_path):
    """An attempt whose every hour is named by a manifest a retention old is settled: later
    full passes send it no request (issue 9: their cost follows the new attempts, not the
    history), and a recorded build that displaces it still gets its unit deleted."""
    store = CountingStore(tmp_path / "lake")
    for hour in (H5, H6):
        publish(store, "a", hour, write_attempt(store, "a", hour, [dead_row(1)]))
    H7 = H6 + dt.timedelta(hours=1)
    later = T0 + RETENTION
    publish(store, "young", H7, write_attempt(store, "young", H7, []), created_at=later)

    first = clean_attempts(store, now=later)
    assert first.kept == 3 and first.settled == 0 and first.deleted_units == []
    store.calls.clear()
    second = clean_attempts(store, now=later + dt.timedelta(hours=1))
    assert second.settled == 1 and second.kept == 1  # young/H7 only: its manifest is young
    # 2 listings of attempts, young's 3; its hour's manifest and the registry
    assert store.counted() == {"list_folders": 2 + 3, "read_bytes": 1 + 1}
    assert clean_attempts(store, now=later + RETENTION).settled == 1  # young settles now
    store.calls.clear()
    assert clean_attempts(store, now=later + RETENTION).settled == 2
    assert store.counted() == {"list_folders": 2, "read_bytes": 1}  # nothing per attempt

    # A build displaces a/H5: its record comes first, its manifest after
    # (lib/hourly_build/build.py).
    record_superseded(store, "b", [("a", "1995-08-01T05")], now=later + RETENTION)
    publish(store, "b", H5, write_attempt(store, "b", H5, []), created_at=later + RETENTION)
    due = clean_staging(store, now=later + 2 * RETENTION)
    assert due.deleted_units == [("a", "1995-08-01T05")]
    assert attempt_hours(store, "a") == [H6]


def test_a_settled_attempt_emptied_by_records_is_gone_and_forgotten(tmp_path):
    """The record pass takes every hour of a settled attempt: its folders go with its last
    unit, and the next full pass drops it from the settled attempts."""
    store = LocalObjectStore(tmp_path / "lake")
    publish(store, "a", H5, write_attempt(store, "a", H5, []))
    assert clean_attempts(store, now=T0 + RETENTION).kept == 1  # a settles
    record_superseded(store, "b", [("a", "1995-08-01T05")], now=T0 + RETENTION)
    publish(store, "b", H5, write_attempt(store, "b", H5, []), created_at=T0 + RETENTION)

    daily = clean_staging(store, now=T0 + 2 * RETENTION)  # the record pass only
    assert not daily.full_pass and daily.deleted_units == [("a", "1995-08-01T05")]
    assert list_attempts(store) == ["b"]
    full = clean_staging(store, now=T0 + 2 * RETENTION, full=True)
    assert full.settled == 0 and full.deleted_units == []
    registry = json.loads(store.read_text(layout.ATTEMPT_REGISTRY_KEY))
    assert registry["settled"] == ["b"]  # a is gone; b's manifest is a retention old


def test_a_crash_between_the_record_and_the_manifests_loses_nothing(tmp_path):
    """The build records what it displaces before its manifests: killed in between, its
    record names units the manifests still name (kept), and its own files, which no manifest
    names, are the full pass's."""
    store = LocalObjectStore(tmp_path / "lake")
    a5 = write_attempt(store, "a", H5, [dead_row(1)])
    publish(store, "a", H5, a5)
    clean_attempts(store, now=T0 + RETENTION)  # a settles
    write_attempt(store, "killed", H5, [])
    record_superseded(store, "killed", [("a", "1995-08-01T05")], now=T0 + RETENTION)

    report = clean_staging(store, now=T0 + 2 * RETENTION, full=True)
    assert report.records == 1 and report.deleted_units == [] and report.settled == 1
    assert all(store.exists(k) for k in a5)
    assert read_records(store) == {}
    gone = clean_staging(store, now=T0 + 3 * RETENTION, full=True)
    assert gone.deleted_units == [("killed", "1995-08-01T05"), ("killed", "*")]
    assert all(store.exists(k) for k in a5) and list_attempts(store) == ["a"]


def test_the_loser_of_a_race_for_an_hour_is_not_settled(tmp_path):
    """Two builds of one hour at once: the first manifest is overwritten by the second's
    without a record. A full pass in between sees a manifest younger than the retention, so
    the loser is not settled and a later full pass deletes it."""
    store = LocalObjectStore(tmp_path / "lake")
    publish(store, "loser", H5, write_attempt(store, "loser", H5, []), created_at=T0)
    early = clean_attempts(store, now=T0 + dt.timedelta(hours=1))
    assert early.kept == 1
    publish(store, "winner", H5, write_attempt(store, "winner", H5, []), created_at=T0)
    seen = clean_attempts(store, now=T0 + RETENTION)
    assert seen.settled == 0 and seen.waiting == 1  # loser/05, first seen superseded now
    gone = clean_attempts(store, now=T0 + 2 * RETENTION)
    assert ("loser", "1995-08-01T05") in gone.deleted_units
    assert list_attempts(store) == ["winner"]


def test_a_registry_of_the_previous_format_settles_nothing(tmp_path):
    store = LocalObjectStore(tmp_path / "lake")
    publish(store, "a", H5, write_attempt(store, "a", H5, []))
    previous = '{"format": "bq_platform.attempt_registry/2", "last_full_pass": null, '
    store.write_text(layout.ATTEMPT_REGISTRY_KEY, previous + '"first_seen": {}}')
    assert clean_attempts(store, now=T0 + RETENTION).settled == 0
    assert clean_attempts(store, now=T0 + RETENTION).settled == 1


@pytest.mark.emulator
def test_on_gcs_the_recorded_units_go(gcs_emulator: GCSEmulator, gcs_bucket: str, tmp_path):
    local = recorded_lake(LocalObjectStore(tmp_path / "lake"), history=3)
    gcs = GCSObjectStore(gcs_bucket, gcs_emulator.client(), prefix="retention/recorded")
    for key in local.list_keys(""):
        gcs.write_bytes(key, local.read_bytes(key))

    due = [clean_superseded(s, now=T0 + RETENTION) for s in (local, gcs)]

    assert due[1] == due[0] and due[1].deleted_units == [("old", "1995-08-01T05")]
    assert read_records(gcs) == {} and attempt_hours(gcs, "old") == [H6]
    assert list_attempts(gcs) == list_attempts(local)


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
