"""What :func:`plan_day` and :func:`plan_automation` decide for a day whose hours and publish
records are current but whose latest publish run failed (without Spark or Dagster: the hour
manifests and publish records are stand-ins)."""

import dataclasses
import datetime as dt
import types

import pytest

from bq_platform.lib import planning
from bq_platform.lib.landing.index import scan_landing
from bq_platform.lib.planning import FailedPublish, plan_automation, plan_day
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform_tests.lib.build_inputs import land

UTC = dt.UTC
DAY = dt.date(1995, 8, 1)
KEY = "k"
NOW = dt.datetime(2024, 1, 2, 12, tzinfo=UTC)


class PublishRecords:
    """Stands in for the warehouse of :func:`plan_day`: every table's publish record names
    :attr:`fingerprint` (None: nothing published)."""

    def __init__(self) -> None:
        self.fingerprint: str | None = None

    def read_publish_record(self, table: str, partition: str) -> object | None:
        if self.fingerprint is None:
            return None
        return types.SimpleNamespace(fingerprint=self.fingerprint)


@pytest.fixture
def day(tmp_path, monkeypatch):
    """A landed day whose 24 hours are built from the current content."""
    store = LocalObjectStore(tmp_path / "lake")
    land(store, "epa.gov", dt.datetime.combine(DAY, dt.time(4), tzinfo=UTC), [b"x"])
    index = scan_landing(store)

    def current_manifests(_store, hours):
        return {
            h: types.SimpleNamespace(fingerprint=planning.expected_hour_fingerprint(index, h, KEY))
            for h in hours
        }

    monkeypatch.setattr(planning, "read_hour_manifests", current_manifests)
    return types.SimpleNamespace(store=store, index=index, warehouse=PublishRecords())


def _plan(day, **kwargs) -> planning.DayPlan:
    return plan_day(DAY, day.index, day.store, day.warehouse, KEY, **kwargs)


def _failure(failures: int = 1, ended: dt.datetime = NOW) -> FailedPublish:
    return FailedPublish(
        "abc12345-0000-4000-8000-000000000000",
        "failed",
        ("reports__pageviews_completeness",),
        failures,
        ended,
    )


def test_a_day_whose_last_publish_failed_is_due_again_though_its_tables_are_current(day):
    unpublished = _plan(day)
    assert unpublished.publish and "not published for this content" in unpublished.reason
    day.warehouse.fingerprint = unpublished.fingerprint
    assert _plan(day).reason == "up to date" and not _plan(day).due

    failed = {DAY: _failure()}
    plan = _plan(day, failed_publishes=failed)  # bq-platform run: at once
    assert plan.due and plan.publish and not plan.build
    assert plan.reason == "last publish run abc12345 failed in reports__pageviews_completeness"

    # Other days' failures do not concern this one.
    assert not _plan(day, failed_publishes={DAY + dt.timedelta(days=1): _failure()}).due

    # A failure and unpublished tables: both are said.
    day.warehouse.fingerprint = None
    both = _plan(day, failed_publishes=failed)
    assert both.due and both.reason.startswith("pageviews$19950801 not published")
    assert both.reason.endswith(
        "; last publish run abc12345 failed in reports__pageviews_completeness"
    )


def test_the_automation_retries_a_failed_publish_with_doubling_waits(day):
    day.warehouse.fingerprint = _plan(day).fingerprint
    failure = _failure()
    held = _plan(day, now=NOW + dt.timedelta(minutes=4), failed_publishes={DAY: failure})
    assert not held.due and not held.publish
    assert held.reason == (
        "last publish run abc12345 failed in reports__pageviews_completeness; "
        "the automation publishes it again from 2024-01-02T12:05Z"
    )
    assert _plan(day, now=failure.retry_at(), failed_publishes={DAY: failure}).due

    assert _failure(failures=3).retry_at() == NOW + 4 * planning.RETRY_BACKOFF
    assert _failure(failures=500).retry_at() == NOW + planning.MAX_RETRY_BACKOFF


def test_a_retried_publish_gets_a_new_run_key(day):
    day.warehouse.fingerprint = _plan(day).fingerprint
    late = NOW + dt.timedelta(days=1)

    def requests(failed):
        plan = plan_automation(day.index, day.store, day.warehouse, KEY, late, (), failed)
        return plan.requests

    assert requests({}) == []
    (first,) = requests({DAY: _failure()})
    assert first.kind == "publish" and first.reason.startswith("last publish run abc12345")
    other = dataclasses.replace(_failure(), run_id="def67890-0000-4000-8000-000000000000")
    (second,) = requests({DAY: other})
    assert first.run_key != second.run_key  # the daemon drops a run key it has seen
    assert first.run_key.startswith(f"publish:{DAY}:")


def test_the_classifier_version_and_thresholds_are_part_of_the_hour_fingerprint(
    tmp_path, monkeypatch
):
    store = LocalObjectStore(tmp_path / "lake")
    land(store, "epa.gov", dt.datetime.combine(DAY, dt.time(4), tzinfo=UTC), [b"x"])
    index = scan_landing(store)
    hours = [dt.datetime.combine(DAY, dt.time(h), tzinfo=UTC) for h in range(24)]
    built = {
        h: types.SimpleNamespace(fingerprint=planning.expected_hour_fingerprint(index, h, KEY))
        for h in hours
    }
    monkeypatch.setattr(
        planning, "read_hour_manifests", lambda _store, hs: {h: built[h] for h in hs}
    )
    warehouse = PublishRecords()
    warehouse.fingerprint = plan_day(DAY, index, store, warehouse, KEY).fingerprint
    rerun = plan_day(DAY, index, store, warehouse, KEY)
    assert rerun.reason == "up to date" and not rerun.build

    hour = hours[4]
    stricter = ClassificationThresholds(max_pages_per_visitor_hour=10)
    assert planning.expected_hour_fingerprint(index, hour, KEY, stricter) != built[hour].fingerprint

    monkeypatch.setattr(planning, "classifier_version", lambda thresholds: "another list")
    assert plan_day(DAY, index, store, warehouse, KEY).build
