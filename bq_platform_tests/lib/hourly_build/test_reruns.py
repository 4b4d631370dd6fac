"""The hourly build run again over a built slice (:mod:`bq_platform_tests.lib.built_slice`):
a new attempt gives the same outputs and records what it supersedes, a retry of the same
attempt replaces its files, a torn hour manifest is replaced, another key changes the
fingerprint and visitors, several passes build what one pass builds, and a large sample is
written by Spark as the driver writes a small one. The tests run in file order over one build.
"""

import logging

import pyarrow.parquet as pq
import pytest

from bq_platform.lib.core import job_ids as jobids
from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS, key_id
from bq_platform.lib.hourly_build import build as build_module
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.hourly_build.outputs import pageview_arrow_schema
from bq_platform.lib.hourly_build.superseded import read_records, superseded_record_key
from bq_platform.lib.hourly_build.transform import TRANSFORM_VERSION
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.version import classifier_version
from bq_platform_tests.lib.build_inputs import (
    EPA,
    H_EMPTY,
    H_EPA_1,
    H_EPA_2,
    H_NASA_1,
    H_NASA_2,
    KEY,
)
from bq_platform_tests.lib.built_slice import HOURS, Built, build_slice, read_parquet


@pytest.fixture(scope="module")
def built(spark, access_logs, tmp_path_factory) -> Built:
    return build_slice(spark, access_logs, tmp_path_factory.mktemp("lake"))


def test_rerun_with_new_attempt_is_identical(spark, built) -> None:
    hours = [H_NASA_1, H_EPA_2]
    again = {
        m.hour: m
        for m in build_hours(spark, built.store, hours, attempt_id="attempt-2", visitor_key=KEY)
    }
    for hour in hours:
        first, second = built.manifests[hour], again[hour]
        assert second.fingerprint == first.fingerprint
        assert second.input_fingerprint == first.input_fingerprint
        assert second.counts == first.counts
        assert all("attempt=attempt-2/" in k for k in second.full_files)
        ids_1 = sorted(read_parquet(built.store, first.full_files).column("event_id").to_pylist())
        ids_2 = sorted(read_parquet(built.store, second.full_files).column("event_id").to_pylist())
        assert ids_1 == ids_2 and ids_1
        assert (
            HourManifest.from_json(built.store.read_text(layout.hour_manifest_key(hour))) == second
        )
    # the fingerprint is the documented function of input, code version, key and sample rate
    m = again[H_EPA_2]
    assert m.fingerprint == jobids.hour_fingerprint(
        m.input_fingerprint,
        TRANSFORM_VERSION,
        key_id(KEY),
        SAMPLE_MODULUS,
        classifier_version(ClassificationThresholds()),
    )
    assert m.input_fingerprint == jobids.input_fingerprint([(EPA, built.duplicate.sha256)])
    # the first attempt's files are untouched (its manifest may still be in use by a loader),
    # and recorded as superseded, for the cleanup after the retention
    # (lib/hourly_build/superseded.py)
    assert all(built.store.exists(k) for k in built.manifests[H_NASA_1].full_files)
    record = read_records(built.store)[superseded_record_key("attempt-2")]
    assert record.attempt_id == "attempt-2"
    assert record.units == tuple(sorted(("attempt-1", layout.hour_label(h)) for h in hours))


def test_same_attempt_twice_replaces_its_files(spark, built) -> None:
    first = build_hours(spark, built.store, [H_NASA_2], attempt_id="attempt-3", visitor_key=KEY)
    second = build_hours(spark, built.store, [H_NASA_2], attempt_id="attempt-3", visitor_key=KEY)
    prefix = layout.attempt_prefix("attempt-3")
    on_disk = [k for k in built.store.list_keys(prefix) if k.endswith(".parquet")]
    assert sorted(on_disk) == sorted((*second[0].full_files, *second[0].sample_files))
    assert first[0].rows == second[0].rows
    # the retry displaced nothing more: the first try's record stands
    records = read_records(built.store)
    assert records[superseded_record_key("attempt-3")].units == (
        ("attempt-1", layout.hour_label(H_NASA_2)),
    )


def test_an_unreadable_hour_manifest_is_replaced_and_left_to_the_full_cleanup(
    spark, built, caplog
) -> None:
    caplog.set_level(logging.WARNING, logger="bq_platform.lib.hourly_build.build")
    key = layout.hour_manifest_key(H_EMPTY)
    built.store.write_text(key, '{"format": "bq_platform.hour/1", "hour"')

    (manifest,) = build_hours(spark, built.store, [H_EMPTY], attempt_id="torn", visitor_key=KEY)

    assert HourManifest.from_json(built.store.read_text(key)) == manifest
    assert superseded_record_key("torn") not in read_records(built.store)
    assert built.store.uri(key) in caplog.text and "full cleanup pass" in caplog.text


def test_another_key_changes_fingerprint_and_visitors(spark, built) -> None:
    (other,) = build_hours(spark, built.store, [H_EPA_1], attempt_id="k2", visitor_key="other")
    first = built.manifests[H_EPA_1]
    assert other.fingerprint != first.fingerprint
    assert other.input_fingerprint == first.input_fingerprint
    ids_1 = set(read_parquet(built.store, first.full_files).column("visitor_id").to_pylist())
    ids_2 = set(read_parquet(built.store, other.full_files).column("visitor_id").to_pylist())
    assert ids_1 and not ids_1 & ids_2


def test_several_passes_build_what_one_pass_builds(spark, built, caplog) -> None:
    """Driver memory stays flat with the data because a build reads at most lines_per_pass
    lines per Spark pass (issue 9); the outputs are the same as one pass's."""
    caplog.set_level(logging.INFO, logger="bq_platform.lib.hourly_build.build")
    several = {
        m.hour: m
        for m in build_hours(
            spark, built.store, HOURS, attempt_id="passes", visitor_key=KEY, lines_per_pass=1
        )
    }
    for hour in HOURS:
        one, many = built.manifests[hour], several[hour]
        assert (many.counts, many.rows, many.sample_rows) == (one.counts, one.rows, one.sample_rows)
        assert many.fingerprint == one.fingerprint
        assert many.file_mismatches == one.file_mismatches
        rows = read_parquet(built.store, many.full_files).sort_by("event_id")
        assert rows.equals(read_parquet(built.store, one.full_files).sort_by("event_id"))
    # progress: one line per pass, each counting that pass's lines only
    passes_logged = [r.getMessage() for r in caplog.records if r.getMessage().startswith("pass ")]
    assert [m.split(":")[0] for m in passes_logged] == [
        "pass 1/4",
        "pass 2/4",
        "pass 3/4",
        "pass 4/4",
    ]
    read = [
        int(r.getMessage().split()[3])
        for r in caplog.records
        if r.getMessage().startswith("read and classified")
    ]
    assert sum(read) == sum(c.lines_read for m in several.values() for c in m.counts)


def test_a_large_sample_is_written_by_spark_as_the_driver_writes_a_small_one(
    spark, built, monkeypatch
) -> None:
    """Up to ``DRIVER_SAMPLE_ROWS`` sample rows a pass are collected and written by pyarrow;
    above it one Spark task writes them (the driver never holds a huge sample). Both give one
    file per hour, of the same schema, rows and manifests."""
    assert sum(m.sample_rows for m in built.manifests.values()) > 0  # the fixture has a sample
    monkeypatch.setattr(build_module, "DRIVER_SAMPLE_ROWS", 0)
    by_spark = build_hours(spark, built.store, HOURS, attempt_id="spark-sample", visitor_key=KEY)
    for manifest in by_spark:
        driver = built.manifests[manifest.hour]
        assert (manifest.counts, manifest.fingerprint) == (driver.counts, driver.fingerprint)
        assert len(manifest.sample_files) == len(driver.sample_files) == 1
        if driver.sample_rows:
            assert driver.sample_files[0].endswith("/part-00000.parquet")  # pyarrow's
            assert not manifest.sample_files[0].endswith("/part-00000.parquet")  # Spark's
        for key in (*manifest.sample_files, *driver.sample_files):
            assert pq.read_schema(built.store.uri(key)).equals(pageview_arrow_schema()), key
        spark_rows = read_parquet(built.store, manifest.sample_files).sort_by("event_id")
        driver_rows = read_parquet(built.store, driver.sample_files).sort_by("event_id")
        assert spark_rows.equals(driver_rows)
        assert spark_rows.num_rows == manifest.sample_rows
