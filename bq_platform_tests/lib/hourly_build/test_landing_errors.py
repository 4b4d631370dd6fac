"""The hourly build refuses landed inputs that disagree with their manifests, naming the file and
what to do, and builds nothing then (a file with the wrong line count is reported, not raised)."""

import dataclasses
import datetime as dt
from pathlib import Path

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import LandedManifest, LandingError
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.lib.build_inputs import (
    H_EMPTY,
    H_NASA_1,
    H_NASA_2,
    KEY,
    NASA,
    ODD,
    deliver,
    land,
)

# --- landing problems: these fail before Spark reads anything -------------------------------


@pytest.fixture
def small_store(tmp_path) -> LocalObjectStore:
    store = LocalObjectStore(tmp_path / "lake")
    land(store, NASA, H_NASA_1, [ODD[2], ODD[5]])
    return store


def _only_manifest(store: LocalObjectStore) -> LandedManifest:
    (key,) = [k for k in store.list_keys(layout.LANDING_PREFIX) if k.endswith(".manifest.json")]
    return LandedManifest.from_json(store.read_text(key))


def _assert_nothing_built(store: LocalObjectStore) -> None:
    assert store.list_keys(layout.STAGING_PREFIX) == []
    assert store.list_keys(layout.DEADLETTER_PREFIX) == []


def test_corrupt_landed_file_raises_naming_it(spark, small_store) -> None:
    manifest = _only_manifest(small_store)
    data = bytearray(small_store.read_bytes(manifest.data_key))
    data[-5] ^= 0xFF  # same size, other content
    small_store.write_bytes(manifest.data_key, bytes(data))
    with pytest.raises(LandingError) as err:
        build_hours(spark, small_store, [H_NASA_1], attempt_id="x", visitor_key=KEY)
    message = str(err.value)
    assert small_store.uri(manifest.data_key) in message
    assert "SHA-256" in message and manifest.sha256 in message
    assert "bq-platform land" in message
    _assert_nothing_built(small_store)


def test_missing_and_truncated_landed_files_raise(spark, small_store) -> None:
    manifest = _only_manifest(small_store)
    small_store.write_bytes(manifest.data_key, small_store.read_bytes(manifest.data_key)[:-3])
    with pytest.raises(LandingError, match=rf"size is {manifest.bytes - 3} bytes"):
        build_hours(spark, small_store, [H_NASA_1], attempt_id="x", visitor_key=KEY)
    Path(small_store.uri(manifest.data_key)).unlink()
    with pytest.raises(LandingError, match="missing") as err:
        build_hours(spark, small_store, [H_NASA_1], attempt_id="x", visitor_key=KEY)
    assert small_store.uri(manifest.data_key) in str(err.value)
    _assert_nothing_built(small_store)


def test_a_session_given_as_a_function_is_asked_for_after_the_landing_checks(
    spark, small_store
) -> None:
    """The build step passes ``lambda: spark.spark_session`` (a lazy resource, starting on its
    own thread): the landing zone is listed and checked first, so a landing error never waits
    for the JVM, an hour without landed files needs no session, and a good hour gets it."""
    asked: list[int] = []

    def session():
        asked.append(1)
        return spark

    manifest = _only_manifest(small_store)
    good = small_store.read_bytes(manifest.data_key)
    small_store.write_bytes(manifest.data_key, good[:-1] + bytes([good[-1] ^ 0xFF]))
    with pytest.raises(LandingError, match="SHA-256"):
        build_hours(session, small_store, [H_NASA_1], attempt_id="x", visitor_key=KEY)
    assert asked == []
    (empty,) = build_hours(session, small_store, [H_EMPTY], attempt_id="e", visitor_key=KEY)
    assert asked == [] and empty.rows == 0
    small_store.write_bytes(manifest.data_key, good)
    (built,) = build_hours(session, small_store, [H_NASA_1], attempt_id="y", visitor_key=KEY)
    assert asked == [1] and built.counts[0].lines_read == 2


def test_a_landed_file_spark_cannot_read_is_a_landing_error(spark, tmp_path) -> None:
    """Size and checksums agree with the manifest, but the bytes are no gzip stream (on GCS
    the check is the listing's CRC32C, which cannot see that): Spark's read names the file."""
    store = LocalObjectStore(tmp_path / "lake")
    land(store, NASA, H_NASA_1, [ODD[0]])
    broken = b"\x1f\x8b" + b"not deflate at all" * 10  # the magic bytes, then garbage
    key = deliver(store, NASA, H_NASA_2, broken, 1, name="broken.log.gz", with_crc32c=True).data_key
    with pytest.raises(LandingError, match="could not be read as gzip text") as err:
        build_hours(spark, store, [H_NASA_1, H_NASA_2], attempt_id="x", visitor_key=KEY)
    message = str(err.value)
    assert message.startswith(f"landed file {store.uri(key)} (manifest ")
    assert "Caused by" not in message and "bq-platform land" in message
    _assert_nothing_built(store)


def test_misplaced_or_unreadable_manifest_raises(spark, small_store) -> None:
    manifest = _only_manifest(small_store)
    wrong = dataclasses.replace(manifest, hour=H_NASA_2)
    key = layout.landed_manifest_key(manifest.data_key)
    small_store.write_text(key, wrong.to_json())
    with pytest.raises(LandingError, match="1995-08-01T05") as err:
        build_hours(spark, small_store, [H_NASA_1], attempt_id="x", visitor_key=KEY)
    assert small_store.uri(key) in str(err.value)
    small_store.write_text(key, "{not json")
    with pytest.raises(LandingError, match="not valid JSON"):
        build_hours(spark, small_store, [H_NASA_1], attempt_id="x", visitor_key=KEY)
    _assert_nothing_built(small_store)


def test_file_with_wrong_line_count_is_reported_not_raised(spark, tmp_path) -> None:
    store = LocalObjectStore(tmp_path / "lake")
    lines = [ODD[2], ODD[5], ODD[0]]
    landed = land(store, NASA, H_NASA_1, lines, manifest_lines=5)
    (manifest,) = build_hours(spark, store, [H_NASA_1], attempt_id="m", visitor_key=KEY)
    assert manifest.file_mismatches == (
        {"data_key": landed.data_key, "manifest_lines": 5, "lines_read": 3},
    )
    (counts,) = manifest.counts
    assert (counts.source_lines, counts.lines_read, counts.accounted) == (5, 3, 3)
    assert not counts.balanced


def test_bad_arguments_are_refused(spark, small_store) -> None:
    with pytest.raises(ValueError, match="timezone-aware UTC"):
        build_hours(
            spark, small_store, [dt.datetime(1995, 8, 1, 4)], attempt_id="x", visitor_key=KEY
        )
    with pytest.raises(ValueError, match="attempt id"):
        build_hours(spark, small_store, [H_NASA_1], attempt_id="a/b", visitor_key=KEY)
    with pytest.raises(ValueError, match="key is empty"):
        build_hours(spark, small_store, [H_NASA_1], attempt_id="x", visitor_key="")
    assert build_hours(spark, small_store, [], attempt_id="x", visitor_key=KEY) == []
    _assert_nothing_built(small_store)
