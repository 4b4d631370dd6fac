"""Clearing an attempt's hour folders before a build writes them, in few requests."""

from bq_platform.lib.build.hour_manifests import clear_hour_folders, hour_folder
from bq_platform_tests.lib.storage.counting_store import CountingStore


def test_only_folders_that_hold_something_are_deleted(tmp_path) -> None:
    store = CountingStore(tmp_path)
    prefixes = ("attempt=a/full", "attempt=a/sample", "dead/attempt=a")
    labels = [f"1995-08-01T{h:02d}" for h in range(72 // 3)]
    left = [
        f"{hour_folder(prefixes[0], labels[3])}/part-0.parquet",
        f"{hour_folder(prefixes[0], labels[3])}/.part-0.parquet.crc",
        f"{hour_folder(prefixes[2], labels[5])}/nested/part-1.parquet",
    ]
    kept = [
        f"{hour_folder(prefixes[0], '1995-08-02T00')}/part-0.parquet",  # an hour not rebuilt
        f"{prefixes[1]}/_SUCCESS",
    ]
    for key in left + kept:
        store.write_bytes(key, b"x")
    store.calls.clear()

    assert clear_hour_folders(store, prefixes, labels) == len(left)

    assert store.calls == {"list": 3, "delete_prefix": 2}  # not 3 x 24 folder deletions
    assert store.list_keys("") == sorted(kept)
    store.calls.clear()
    assert clear_hour_folders(store, prefixes, labels) == 0
    assert store.calls == {"list": 3}
