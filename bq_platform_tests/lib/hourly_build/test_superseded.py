"""Superseded records (``lib/hourly_build/superseded.py``): which attempts a build displaced, per
hour."""

import dataclasses
import datetime as dt
import json

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import HourManifest, ManifestError
from bq_platform.lib.hourly_build.superseded import (
    SupersededRecord,
    named_attempts,
    read_records,
    record_superseded,
    superseded_record_key,
    superseded_units,
)
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.lib.hourly_build.test_retention import H5, H6, T0, manifest_of

L5, L6 = layout.hour_label(H5), layout.hour_label(H6)


def test_a_manifest_names_its_attempt_and_the_attempts_of_the_files_it_names():
    own = manifest_of("new", H5)
    assert named_attempts(own) == {"new"}
    reused = dataclasses.replace(
        own, full_files=(*own.full_files, *manifest_of("old", H5).full_files)
    )
    assert named_attempts(reused) == {"new", "old"}
    dead = dataclasses.replace(own, deadletter_files=manifest_of("older", H5).deadletter_files)
    assert named_attempts(dead) == {"new", "older"}


def test_the_units_are_what_the_previous_manifests_named_and_the_new_ones_do_not():
    previous = {H5: manifest_of("old", H5), H6: None}
    assert superseded_units(previous, [manifest_of("new", H5), manifest_of("new", H6)]) == [
        ("old", L5)
    ]
    # the same attempt again (a retry), or a manifest that still names old's files: nothing
    assert superseded_units(previous, [manifest_of("old", H5)]) == []
    keeps = manifest_of("new", H5)
    keeps = dataclasses.replace(keeps, sample_files=manifest_of("old", H5).sample_files)
    assert superseded_units(previous, [keeps]) == []
    # an hour not read before (not in previous) displaces nothing
    assert superseded_units({}, [manifest_of("new", H5)]) == []


def test_a_record_is_written_once_per_attempt_and_read_back(tmp_path):
    store = LocalObjectStore(tmp_path / "lake")
    assert record_superseded(store, "new", [], now=T0) is None
    assert read_records(store) == {}

    record = record_superseded(store, "new", [("old", L6), ("old", L5), ("old", L5)], now=T0)

    key = superseded_record_key("new")
    assert record == SupersededRecord("new", T0, (("old", L5), ("old", L6)))
    assert read_records(store) == {key: record}
    assert layout.parse_attempt_folder(key.split("/")[-2]) == "new"  # a folder per record
    with pytest.raises(ValueError):
        record_superseded(store, "new", [("../x", L5)], now=T0)


@pytest.mark.parametrize(
    "change",
    [
        {"format": "bq_platform.superseded/0"},
        {"written_at": "2026-01-01T00:00:00+01:00"},
        {"units": [["old"]]},
        {"units": [["old", "1995-08-01 05"]]},
        {"attempt_id": "a/b"},
    ],
)
def test_a_bad_record_is_reported_by_name_not_used(tmp_path, change):
    store = LocalObjectStore(tmp_path / "lake")
    record_superseded(store, "good", [("old", L5)], now=T0)
    data = json.loads(SupersededRecord("bad", T0, (("old", L6),)).to_json()) | change
    store.write_text(superseded_record_key("bad"), json.dumps(data))

    records = read_records(store)

    bad = records[superseded_record_key("bad")]
    assert isinstance(bad, ManifestError)
    assert store.uri(superseded_record_key("bad")) in str(bad)
    assert records[superseded_record_key("good")].units == (("old", L5),)
    round_trip = SupersededRecord.from_json(SupersededRecord("x", T0, ()).to_json())
    assert round_trip.written_at == T0 and round_trip.written_at.utcoffset() == dt.timedelta(0)


class _KilledAtTheManifests(LocalObjectStore):
    """A store whose writer dies at the first hour manifest (a kill -9 between steps)."""

    def write_text(self, key: str, text: str) -> None:
        if key.endswith(layout.HOUR_MANIFEST_NAME):
            raise KeyboardInterrupt("killed")
        super().write_text(key, text)


@pytest.mark.spark
def test_a_build_records_what_it_displaces_before_its_manifests(spark, tmp_path) -> None:
    """The build writes its record first (lib/hourly_build/build.py): killed before its manifests,
    the
    record names the displaced attempt, whose manifest is still the current one."""
    from bq_platform.lib.hourly_build.build import build_hours
    from bq_platform_tests.lib.build_inputs import H_NASA_1, NASA, land

    store = LocalObjectStore(tmp_path / "lake")
    line = b'h - - [01/Aug/1995:00:00:01 -0400] "GET /index.html HTTP/1.0" 200 1'
    land(store, NASA, H_NASA_1, [line])
    build_hours(spark, store, [H_NASA_1], attempt_id="first", visitor_key="k")
    killed = _KilledAtTheManifests(tmp_path / "lake")
    with pytest.raises(KeyboardInterrupt):
        build_hours(spark, killed, [H_NASA_1], attempt_id="killed", visitor_key="k")
    record = read_records(store)[superseded_record_key("killed")]
    assert record.units == (("first", layout.hour_label(H_NASA_1)),)
    current = store.read_text(layout.hour_manifest_key(H_NASA_1))
    assert named_attempts(HourManifest.from_json(current)) == {"first"}
