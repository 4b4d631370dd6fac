"""The build of the build tests' slice of the bundled logs, and a reader of its outputs.

:func:`build_slice` lands two hours of each site (:mod:`bq_platform_tests.lib.build_inputs`;
:data:`~bq_platform_tests.lib.build_inputs.ODD` lines appended to NASA's first hour, whose file
ends without a newline), the same EPA delivery a second time under another name, and an hour
without data, then builds :data:`HOURS` once as ``attempt-1``. ``test_build.py`` checks that
build's outputs; ``test_build_reruns.py`` builds again over it.
"""

import dataclasses
import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from bq_platform.lib.core.manifest import HourManifest, LandedManifest
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.hourly_build.outputs import pageview_arrow_schema
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.lib.build_inputs import (
    EPA,
    H_EMPTY,
    H_EPA_1,
    H_EPA_2,
    H_NASA_1,
    H_NASA_2,
    KEY,
    NASA,
    ODD,
    PER_HOUR,
    land,
    real_lines,
)

#: The slice's UTC hours, in order (``H_EMPTY`` has no landed file).
HOURS = [H_NASA_1, H_NASA_2, H_EMPTY, H_EPA_1, H_EPA_2]


@dataclasses.dataclass
class Built:
    """The slice as landed and built: the store, the hour manifests by hour, the lines landed
    per (site, hour), and the duplicate delivery's manifest."""

    store: LocalObjectStore
    manifests: dict[dt.datetime, HourManifest]
    landed: dict[tuple[str, dt.datetime], list[bytes]]
    duplicate: LandedManifest


def build_slice(spark: SparkSession, access_logs: Path, root: Path) -> Built:
    """Land the slice in a local object store at ``root`` and build it (see the module doc)."""
    store = LocalObjectStore(root)
    by_hour = real_lines(access_logs)
    landed = {}
    for site, hour in [(NASA, H_NASA_1), (NASA, H_NASA_2), (EPA, H_EPA_1), (EPA, H_EPA_2)]:
        lines = by_hour[(site, hour)][:PER_HOUR]
        if (site, hour) == (NASA, H_NASA_1):
            lines = lines + ODD
        landed[(site, hour)] = lines
        land(store, site, hour, lines, final_newline=(site, hour) != (NASA, H_NASA_1))
    # the same EPA delivery a second time, under another name (at-least-once delivery)
    duplicate = land(store, EPA, H_EPA_2, landed[(EPA, H_EPA_2)], name="redelivery-1.log.gz")
    manifests = build_hours(spark, store, HOURS, attempt_id="attempt-1", visitor_key=KEY)
    return Built(store, {m.hour: m for m in manifests}, landed, duplicate)


def read_parquet(store: LocalObjectStore, keys) -> pa.Table:
    """The Parquet files ``keys`` of ``store`` as one table (the page schema's empty table for
    no keys)."""
    tables = [pq.read_table(store.uri(k)) for k in keys]
    return pa.concat_tables(tables) if tables else pageview_arrow_schema().empty_table()
