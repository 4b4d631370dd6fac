"""What ``bq-platform run`` has left to do: days whose landed content is not yet published.

A day is up to date when every one of its 24 hours was built from exactly the content now in
the landing zone with the current transform and key, and both published tables' records name
that day's fingerprint. Anything else (new or late files, a changed transform, a failed or
partial earlier run) makes the day due again; re-running a due day is safe (idempotent).
"""

import dataclasses
import datetime as dt

from bq_platform.lib.hours import day_hours
from bq_platform.lib.jobids import (
    day_fingerprint,
    day_partition,
    hour_fingerprint,
    input_fingerprint,
)
from bq_platform.lib.landing_index import LandingIndex
from bq_platform.lib.layout import hour_label
from bq_platform.lib.objectstore.base import ObjectStore
from bq_platform.lib.pseudonymize import SAMPLE_MODULUS, key_id
from bq_platform.lib.publish import read_hour_manifest
from bq_platform.lib.transform import TRANSFORM_VERSION
from bq_platform.lib.warehouse.base import Warehouse
from bq_platform.lib.warehouse.schema import PAGEVIEWS_SAMPLE_TABLE, PAGEVIEWS_TABLE


@dataclasses.dataclass(frozen=True)
class DayPlan:
    """One day and why it is (or is not) due."""

    day: dt.date
    due: bool
    reason: str


def expected_hour_fingerprint(index: LandingIndex, hour: dt.datetime, visitor_key: str) -> str:
    """The fingerprint a fresh build of ``hour`` would have now."""
    landed = index.get(hour)
    input_fp = landed.input_fingerprint if landed else input_fingerprint(())
    return hour_fingerprint(input_fp, TRANSFORM_VERSION, key_id(visitor_key), SAMPLE_MODULUS)


def plan_day(
    day: dt.date, index: LandingIndex, store: ObjectStore, warehouse: Warehouse, visitor_key: str
) -> DayPlan:
    """Decide whether ``day`` must be (re)processed; reads manifests and publish records only."""
    fingerprints = {}
    for hour in day_hours(day):
        manifest = read_hour_manifest(store, hour)
        want = expected_hour_fingerprint(index, hour, visitor_key)
        if manifest is None:
            return DayPlan(day, True, f"hour {hour_label(hour)} not built")
        if manifest.fingerprint != want:
            return DayPlan(day, True, f"hour {hour_label(hour)} has new content or code")
        fingerprints[hour_label(hour)] = manifest.fingerprint
    want_day = day_fingerprint(fingerprints)
    for table in (PAGEVIEWS_TABLE, PAGEVIEWS_SAMPLE_TABLE):
        record = warehouse.read_publish_record(table, day_partition(day))
        if record is None or record.fingerprint != want_day:
            return DayPlan(
                day, True, f"{table}${day_partition(day)} not published for this content"
            )
    return DayPlan(day, False, "up to date")
