"""The build as a Spark application of its own, its plain parts
(``lib/hourly_build/application.py``):
hours, attempt IDs and the error file. The entry point and its settings are tested in
``bq_platform_tests/spark_apps/test_build_hours.py``."""

import datetime as dt

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.hourly_build import application as build_job
from bq_platform_tests.lib.build_inputs import utc


def test_hours_are_a_closed_range_defaulting_to_one_hour() -> None:
    assert build_job.hour_range("1995-08-01T22", "1995-08-02T01") == [
        utc(1995, 8, 1, 22),
        utc(1995, 8, 1, 23),
        utc(1995, 8, 2, 0),
        utc(1995, 8, 2, 1),
    ]
    assert build_job.hour_range("1995-08-01T04", None) == [utc(1995, 8, 1, 4)]
    assert build_job.hour_range("1995-08-01-04:00", None) == [
        utc(1995, 8, 1, 4)
    ]  # Dagster's old keys
    with pytest.raises(ValueError, match="before the first"):
        build_job.hour_range("1995-08-01T05", "1995-08-01T04")
    with pytest.raises(ValueError, match="not a UTC hour"):
        build_job.hour_range("1995-08-01 04", None)


def test_default_attempt_ids_are_valid_distinct_and_dated() -> None:
    now = dt.datetime(2026, 11, 26, 23, 5, 9, tzinfo=dt.UTC)
    ids = {build_job.default_attempt_id(now) for _ in range(50)}
    assert len(ids) == 50
    for attempt in ids:
        assert attempt.startswith("submit-20261126T230509Z-")
        layout.attempt_prefix(attempt)  # raises if not [A-Za-z0-9_-]+


def test_the_error_file_round_trips_and_garbage_reads_as_none(tmp_path) -> None:
    path = str(tmp_path / "error.json")
    assert build_job.read_error(path) is None  # never written: the application crashed
    build_job.write_error(path, ValueError("landing/x.log.gz: gone"))
    assert build_job.read_error(path) == {
        "error": "ValueError",
        "message": "landing/x.log.gz: gone",
    }
    (tmp_path / "error.json").write_text('{"error": "LandingError"')
    assert build_job.read_error(path) is None
