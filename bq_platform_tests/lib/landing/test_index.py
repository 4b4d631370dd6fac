"""The landing index: data files that no manifest names (issue 7), and a lookback window
whose cost follows the window, not the landing zone's history (issue 9)."""

import datetime as dt
import gzip
import json

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.landing.index import find_orphans, scan_landing
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.planning import lookback_start
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.emulators import GCSEmulator
from bq_platform_tests.http_recording import RecordingSession
from bq_platform_tests.lib.build_inputs import land
from bq_platform_tests.lib.storage.counting_store import CountingStore

UTC = dt.UTC
H4 = dt.datetime(1995, 8, 1, 4, tzinfo=UTC)
H9 = dt.datetime(1995, 8, 1, 9, tzinfo=UTC)
LINE = b'a - - [01/Aug/1995:04:00:01 +0000] "GET / HTTP/1.0" 200 1\n'


def test_data_file_without_manifest_is_an_orphan_of_its_hour(tmp_path):
    store = LocalObjectStore(tmp_path / "lake")
    path = tmp_path / "a.log"
    path.write_bytes(LINE * 3)
    land_file(store, "s", path)
    before = scan_landing(store).get(H4)
    assert before.orphans == ()
    orphan = f"{layout.landing_hour_prefix('s', H4)}/late-delivery.log.gz"
    store.write_bytes(orphan, gzip.compress(LINE * 5))  # its manifest never came
    lonely = f"{layout.landing_hour_prefix('t', H9)}/alone.log.gz"
    store.write_bytes(lonely, gzip.compress(LINE))
    index = scan_landing(store)
    after = index.get(H4)
    assert after.orphans == (orphan,)
    assert after.source_lines == before.source_lines == 3  # its lines count nowhere yet
    assert after.input_fingerprint != before.input_fingerprint  # the hour changed: rebuild
    assert index.get(H9).orphans == (lonely,) and index.get(H9).manifests == ()
    assert H9 in {h.hour for h in index.hours()}


def test_find_orphans_ignores_manifests_and_named_files():
    prefix = layout.landing_hour_prefix("s", H4)
    keys = [f"{prefix}/a.log.gz", f"{prefix}/a.manifest.json", f"{prefix}/b.log.gz", "other/x"]

    class Named:
        data_key = f"{prefix}/a.log.gz"

    assert find_orphans(keys, [Named()]) == [f"{prefix}/b.log.gz"]


def test_hour_manifest_without_orphan_field_still_loads():
    manifest = HourManifest(
        hour=H4,
        attempt_id="a",
        fingerprint="f" * 64,
        input_fingerprint="i" * 64,
        full_files=(),
        sample_files=(),
        deadletter_files=(),
        rows=0,
        sample_rows=0,
        counts=(),
        orphan_files=("landing/pageviews/site=s/hour=1995-08-01T04/x.log.gz",),
    )
    assert HourManifest.from_json(manifest.to_json()) == manifest
    old = json.loads(manifest.to_json())
    del old["orphan_files"]  # written before issue 7
    assert HourManifest.from_json(json.dumps(old)).orphan_files == ()


def test_a_lookback_window_reads_only_its_days(tmp_path):
    """Two sites x five days; a window of the last two reads their manifests only, with one
    listing per site from its first hour in the window (and the sites' folders)."""
    store = CountingStore(tmp_path / "lake")
    days = [dt.date(1995, 8, d) for d in range(1, 6)]
    for site in ("epa.gov", "ksc.nasa.gov"):
        for day in days:
            for hour in (0, 23):
                at = dt.datetime.combine(day, dt.time(hour), tzinfo=UTC)
                land(store, site, at, [f"{site} {day} {hour}".encode()])
    h7 = dt.datetime(1995, 8, 5, 7, tzinfo=UTC)
    orphan = f"{layout.landing_hour_prefix('epa.gov', h7)}/x.log.gz"
    store.write_bytes(orphan, gzip.compress(LINE))
    whole = scan_landing(store)
    store.calls.clear()

    window = scan_landing(store, since=days[3])

    assert window.days() == days[3:] and window.since == days[3]
    assert store.counted() == {"list_folders": 1, "list": 2, "read_bytes": 2 * 2 * 2}
    assert window.by_hour == {h: v for h, v in whole.by_hour.items() if h.date() >= days[3]}
    assert window.get(h7).orphans == (orphan,)
    later = scan_landing(store, since=dt.date(1995, 9, 1))
    assert later.days() == [] and "nothing landed from 1995-09-01 on" in later.empty_reason()
    assert whole.since is None and "land files first" in whole.empty_reason()


def test_lookback_start_is_a_whole_utc_day():
    now = dt.datetime(2026, 11, 24, 0, 30, tzinfo=dt.timezone(dt.timedelta(hours=2)))  # 22:30 UTC
    assert lookback_start(now, 0) is None  # the default: every landed day
    assert lookback_start(now, 1) == dt.date(2026, 11, 22)
    assert lookback_start(now, 7) == dt.date(2026, 11, 16)
    for bad, message in ((-1, "lookback_days"), (None, "timezone-aware")):
        with pytest.raises(ValueError, match=message):
            if bad is None:
                lookback_start(now.replace(tzinfo=None), 3)
            else:
                lookback_start(now, bad)


@pytest.mark.emulator
def test_on_gcs_a_window_listing_starts_at_its_first_hour(
    gcs_emulator: GCSEmulator, gcs_bucket: str
) -> None:
    """The production store sends each site's listing with the window's first hour folder as
    ``startOffset`` (GCS then lists from there; the emulator lists all and the store filters)."""
    session = RecordingSession()
    gcs = GCSObjectStore(gcs_bucket, gcs_emulator.client(session), prefix="window/lake")
    for site in ("epa.gov", "ksc.nasa.gov"):
        for day in (1, 2, 3):
            land(gcs, site, dt.datetime(1995, 8, day, 10, tzinfo=UTC), [b"line"])
    session.calls.clear()
    window = scan_landing(gcs, since=dt.date(1995, 8, 3))
    assert window.days() == [dt.date(1995, 8, 3)] and len(window.hours()[0].manifests) == 2
    starts = sorted(c.query.get("startOffset", "") for c in session.calls if c.path.endswith("/o"))
    assert starts == [
        "",  # the sites' folders
        "window/lake/landing/pageviews/site=epa.gov/hour=1995-08-03T00/",
        "window/lake/landing/pageviews/site=ksc.nasa.gov/hour=1995-08-03T00/",
    ]
