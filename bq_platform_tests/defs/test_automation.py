"""The landing sensor requests hourly runs for changed hours only, with stable run keys."""

import gzip

import dagster as dg

from bq_platform.defs.automation import changed_hours, landing_sensor
from bq_platform.defs.resources import LocalObjectStoreResource
from bq_platform.lib.landing import land_file


def _land(tmp_path, name: str, hour: int, n: int) -> None:
    stamp = f"01/Aug/1995:{hour:02d}:00"
    lines = "".join(
        f'h{i} - - [{stamp}:{i % 60:02d} +0000] "GET /{name} HTTP/1.0" 200 1\n' for i in range(n)
    ).encode()
    path = tmp_path / f"{name}.log.gz"
    path.write_bytes(gzip.compress(lines))
    from bq_platform.lib.objectstore.local import LocalObjectStore

    land_file(LocalObjectStore(tmp_path / "lake"), "example.org", path)


def test_changed_hours():
    assert changed_hours({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == ["b", "c"]


def test_sensor_requests_changed_hours_and_nothing_when_unchanged(tmp_path):
    store = LocalObjectStoreResource(root=str(tmp_path / "lake"))
    _land(tmp_path, "a", 4, 10)
    _land(tmp_path, "b", 6, 10)
    result = landing_sensor(dg.build_sensor_context(cursor=None, resources={"object_store": store}))
    (request,) = result.run_requests
    assert request.tags["dagster/asset_partition_range_start"] == "1995-08-01-04:00"
    assert request.tags["dagster/asset_partition_range_end"] == "1995-08-01-06:00"

    again = landing_sensor(
        dg.build_sensor_context(cursor=result.cursor, resources={"object_store": store})
    )
    assert again.run_requests == []

    _land(tmp_path, "late", 6, 3)  # a late file for 06:00 only
    late = landing_sensor(
        dg.build_sensor_context(cursor=result.cursor, resources={"object_store": store})
    )
    (request,) = late.run_requests
    assert request.tags["dagster/asset_partition_range_start"] == "1995-08-01-06:00"
    assert request.tags["dagster/asset_partition_range_end"] == "1995-08-01-06:00"
    assert request.run_key != result.run_requests[0].run_key
