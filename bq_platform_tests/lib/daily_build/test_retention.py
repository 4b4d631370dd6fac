"""Rollup cleanup on a real local store: the newest content of a table and day stays, older
contents go a retention after they were superseded, unfinished folders a retention after they
were first seen."""

import datetime as dt
import logging

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.daily_build.retention import RETENTION, clean_rollups, content_folders
from bq_platform.lib.daily_build.rollup_files import RollupFiles
from bq_platform.lib.hourly_build.retention import clean_staging
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.schema import DAILY_BY_PAGE_TABLE, DAILY_BY_SITE_TABLE

DAY = dt.date(1995, 8, 1)
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
HOUR = dt.timedelta(hours=1)


def write_rollup(
    store: LocalObjectStore,
    table: str,
    fingerprint: str,
    created_at: dt.datetime | None,
    day: dt.date = DAY,
) -> str:
    """A content folder as the build writes it: a Parquet part, then (unless ``created_at`` is
    None: a build that did not finish) its manifest. Returns the folder."""
    prefix = layout.rollup_prefix(table, day, fingerprint)
    part = f"{prefix}/part-00000.parquet"
    store.write_bytes(part, b"PAR1")
    store.write_bytes(f"{prefix}/.part-00000.parquet.crc", b"crc")
    if created_at is not None:
        files = RollupFiles(table, day, fingerprint, "d" * 64, (part,), 1, 1, 0, created_at)
        store.write_text(files.key, files.to_json())
    return prefix


@pytest.fixture
def lake(tmp_path) -> tuple[LocalObjectStore, dict[str, str]]:
    """By site of DAY: ``old`` (T0), ``new`` (T0 + 2 h), ``crashed`` (no manifest); by page of
    DAY: ``only``; by site of the next day: ``next``."""
    store = LocalObjectStore(tmp_path)
    folders = {
        "old": write_rollup(store, DAILY_BY_SITE_TABLE, "a" * 64, T0),
        "new": write_rollup(store, DAILY_BY_SITE_TABLE, "b" * 64, T0 + 2 * HOUR),
        "crashed": write_rollup(store, DAILY_BY_SITE_TABLE, "c" * 64, None),
        "only": write_rollup(store, DAILY_BY_PAGE_TABLE, "a" * 64, T0),
        "next": write_rollup(
            store, DAILY_BY_SITE_TABLE, "e" * 64, T0, day=DAY + dt.timedelta(days=1)
        ),
    }
    return store, folders


def remaining(store: LocalObjectStore) -> set[str]:
    return {f for group in content_folders(store).values() for f in group}


def test_superseded_contents_go_a_retention_after_the_newer_one(lake) -> None:
    store, folders = lake
    first = clean_rollups(store, now=T0 + 3 * HOUR)
    assert first.deleted_folders == [] and first.waiting == 2  # old (young), crashed (new)
    assert first.kept == 3  # new, only, next
    assert remaining(store) == set(folders.values())

    later = clean_rollups(store, now=T0 + 2 * HOUR + RETENTION)
    assert later.deleted_folders == [folders["old"]]
    assert later.deleted_objects == 3  # part, its .crc, the manifest
    assert later.waiting == 1  # crashed: first seen at T0 + 3 h

    last = clean_rollups(store, now=T0 + 3 * HOUR + RETENTION)
    assert last.deleted_folders == [folders["crashed"]] and last.waiting == 0
    assert remaining(store) == {folders["new"], folders["only"], folders["next"]}
    for name in ("new", "only", "next"):  # the current contents are whole
        assert store.exists(f"{folders[name]}/{layout.ROLLUP_MANIFEST_NAME}")
    assert clean_rollups(store, now=T0 + 10 * RETENTION).deleted_folders == []


def test_the_newest_content_is_kept_however_old(tmp_path) -> None:
    store = LocalObjectStore(tmp_path)
    newest = write_rollup(store, DAILY_BY_SITE_TABLE, "b" * 64, T0 + HOUR)
    oldest = write_rollup(store, DAILY_BY_SITE_TABLE, "f" * 64, T0)  # sorts after, written before
    report = clean_rollups(store, now=T0 + 100 * RETENTION)
    assert report.deleted_folders == [oldest] and remaining(store) == {newest}


def test_an_unreadable_manifest_keeps_its_folder_and_says_so(tmp_path, caplog) -> None:
    store = LocalObjectStore(tmp_path)
    bad = write_rollup(store, DAILY_BY_SITE_TABLE, "a" * 64, T0)
    store.write_text(f"{bad}/{layout.ROLLUP_MANIFEST_NAME}", "{not json")
    newest = write_rollup(store, DAILY_BY_SITE_TABLE, "b" * 64, T0 + HOUR)
    with caplog.at_level(logging.WARNING):
        report = clean_rollups(store, now=T0 + 10 * RETENTION)
    assert report.deleted_folders == [] and report.kept == 2
    assert remaining(store) == {bad, newest}
    (warning,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert bad in warning.getMessage() and "delete it by hand" in warning.getMessage()


def test_a_lake_without_rollups_gets_no_bookkeeping(tmp_path) -> None:
    store = LocalObjectStore(tmp_path)
    assert clean_rollups(store, now=T0).deleted_folders == []
    assert store.list_keys(layout.ROLLUPS_PREFIX) == []


def test_the_staging_cleanup_includes_the_rollups(lake) -> None:
    store, folders = lake
    clean_staging(store, now=T0 + 3 * HOUR)
    report = clean_staging(store, now=T0 + 3 * HOUR + RETENTION)
    assert report.deleted_rollups == [folders["old"], folders["crashed"]]
    assert report.deleted_objects == 3 + 2 and report.rollups_waiting == 0
    assert "deleted 2 superseded rollup folders, 0 wait" in report.describe()
