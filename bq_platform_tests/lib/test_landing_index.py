"""The landing index reports data files that no manifest names (issue 7)."""

import datetime as dt
import gzip
import json

from bq_platform.lib import layout
from bq_platform.lib.landing import land_file
from bq_platform.lib.landing_index import find_orphans, scan_landing
from bq_platform.lib.manifest import HourManifest
from bq_platform.lib.objectstore.local import LocalObjectStore

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
