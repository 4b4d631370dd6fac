"""What :func:`plan_day` and :func:`plan_automation` decide for a day whose hours and publish
records are current but whose latest publish run failed, and for hours whose input is unchanged
but whose traffic classifier is not the installed one (without Spark or Dagster: the hour
manifests and publish records are stand-ins)."""

import dataclasses
import datetime as dt
import types

import pytest

from bq_platform.lib import planning
from bq_platform.lib.core import layout
from bq_platform.lib.core.job_ids import hour_fingerprint, rollup_fingerprint
from bq_platform.lib.core.manifest import UNCLASSIFIED, HourManifest
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS, key_id
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.hourly_build.transform import TRANSFORM_VERSION
from bq_platform.lib.landing.index import scan_landing
from bq_platform.lib.planning import FailedPublish, plan_automation, plan_day
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.warehouse.schema import ROLLUP_TABLES
from bq_platform_tests.lib.build_inputs import land

UTC = dt.UTC
DAY = dt.date(1995, 8, 1)
KEY = "k"
NOW = dt.datetime(2024, 1, 2, 12, tzinfo=UTC)


class PublishRecords:
    """Stands in for the warehouse of :func:`plan_day`: every table's publish record names
    :attr:`fingerprint`, a rollup's the rollup fingerprint of it (None: nothing published)."""

    def __init__(self) -> None:
        self.fingerprint: str | None = None

    def read_publish_record(self, table: str, partition: str) -> object | None:
        if self.fingerprint is None:
            return None
        if table in ROLLUP_TABLES:
            return types.SimpleNamespace(
                fingerprint=rollup_fingerprint(self.fingerprint, ROLLUP_VERSION)
            )
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


OLD = "crawler-user-agents==1.67.0;ua-parser==1.0.2;heuristics=heuristic:page_rate>720/h"
NEW = "crawler-user-agents==1.68.0;ua-parser==1.0.2;heuristics=heuristic:page_rate>5/h"
HOURS = [dt.datetime.combine(DAY, dt.time(h), tzinfo=UTC) for h in range(24)]
LANDED = HOURS[4]


def built(index, hour: dt.datetime, classifier: str, input_fp: str | None = None):
    """A stand-in hour manifest of ``hour`` built from ``input_fp`` (default: what is landed
    now) with ``classifier``."""
    input_fp = input_fp or planning.landed_input_fingerprint(index, hour)
    return types.SimpleNamespace(
        hour=hour,
        input_fingerprint=input_fp,
        classifier=classifier,
        fingerprint=hour_fingerprint(
            input_fp, TRANSFORM_VERSION, key_id(KEY), SAMPLE_MODULUS, classifier
        ),
    )


@pytest.fixture
def upgraded(tmp_path, monkeypatch):
    """A landed day whose 24 hours were built with :data:`OLD`, published, and the installed
    classifier is :data:`NEW`; ``lake.manifests`` can be changed."""
    store = LocalObjectStore(tmp_path / "lake")
    land(store, "epa.gov", LANDED, [b"x"])
    index = scan_landing(store)
    manifests = {h: built(index, h, OLD) for h in HOURS}
    monkeypatch.setattr(
        planning, "read_hour_manifests", lambda _store, hs: {h: manifests.get(h) for h in hs}
    )
    monkeypatch.setattr(planning, "classifier_version", lambda thresholds: OLD)
    warehouse = PublishRecords()
    warehouse.fingerprint = plan_day(DAY, index, store, warehouse, KEY).fingerprint
    assert plan_day(DAY, index, store, warehouse, KEY).reason == "up to date"
    monkeypatch.setattr(planning, "classifier_version", lambda thresholds: NEW)
    return types.SimpleNamespace(store=store, index=index, warehouse=warehouse, manifests=manifests)


def test_the_classifier_version_and_thresholds_are_part_of_the_hour_fingerprint(day):
    hour = LANDED
    current = planning.expected_hour_fingerprint(day.index, hour, KEY)
    stricter = ClassificationThresholds(max_pages_per_visitor_hour=10)
    assert planning.expected_hour_fingerprint(day.index, hour, KEY, stricter) != current


def test_an_upgraded_classifier_holds_hours_whose_input_is_unchanged(upgraded):
    plan = plan_day(DAY, upgraded.index, upgraded.store, upgraded.warehouse, KEY)
    assert not plan.due and not plan.build and not plan.publish  # not published either
    assert plan.held == tuple(HOURS)
    assert [(r.built_with, r.current) for r in plan.reclassify] == [(OLD, NEW)] * 24
    assert "24 hours (1995-08-01T00, 1995-08-01T01, 1995-08-01T02 ...) from " in plan.reason
    assert (
        "crawler-user-agents 1.67.0 -> 1.68.0, heuristics heuristic:page_rate>720/h -> "
        "heuristic:page_rate>5/h" in plan.reason
    )
    assert "bq-platform run --reclassify" in plan.reason
    assert "reclassify: true" in plan.reason

    again = plan_day(DAY, upgraded.index, upgraded.store, upgraded.warehouse, KEY, reclassify=True)
    assert again.due and again.build == tuple(HOURS) and not again.held
    assert "24 hours to build" in again.reason and "reclassifying 24 hours" in again.reason


def test_hours_with_new_input_are_built_with_the_installed_classifier_the_others_held(upgraded):
    upgraded.manifests[LANDED] = built(upgraded.index, LANDED, OLD, input_fp="0" * 64)
    plan = plan_day(DAY, upgraded.index, upgraded.store, upgraded.warehouse, KEY)
    assert plan.due and plan.build == (LANDED,) and not plan.publish
    assert plan.held == tuple(h for h in HOURS if h != LANDED)
    assert plan.reason.startswith(
        "1 hours to build (1995-08-01T04) with the installed classifier; held, not reclassified: "
        "23 hours"
    )


def test_an_hour_built_without_classification_is_held_as_unclassified(upgraded):
    upgraded.manifests[HOURS[0]] = built(upgraded.index, HOURS[0], UNCLASSIFIED)
    plan = plan_day(DAY, upgraded.index, upgraded.store, upgraded.warehouse, KEY)
    assert HOURS[0] in plan.held
    assert "1 hours (1995-08-01T00) from unclassified -> the installed classifier" in plan.reason


def test_the_automation_never_reclassifies_and_says_so_in_its_skip_reason(upgraded):
    late = NOW + dt.timedelta(days=1)
    plan = plan_automation(upgraded.index, upgraded.store, upgraded.warehouse, KEY, late)
    assert not plan.requests
    reason = plan.skip_reason()
    assert reason.startswith("nothing to run for 1 landed days: 1995-08-01: held")
    assert "24 hours (1995-08-01T00" in reason and "bq-platform run --reclassify" in reason
    assert "lake__pageview_files: config: reclassify: true" in reason

    upgraded.manifests[LANDED] = built(upgraded.index, LANDED, OLD, input_fp="0" * 64)
    plan = plan_automation(upgraded.index, upgraded.store, upgraded.warehouse, KEY, late)
    assert [(r.kind, r.hours) for r in plan.requests] == [("build", (LANDED,))]
    assert plan.held and plan.held[0].startswith("1995-08-01: 1 hours to build")


def test_classifier_change_names_only_the_parts_that_differ():
    assert planning.classifier_change(OLD, OLD.replace("1.0.2", "1.0.3")) == (
        "ua-parser 1.0.2 -> 1.0.3"
    )
    assert planning.classifier_change("a==1;resolver=regex;x==2", "a==1;resolver=basic") == (
        "resolver regex -> basic, x 2 -> none"
    )
    assert (
        planning.classifier_change(
            "heuristics=heuristic:robots_txt,heuristic:empty_user_agent", "heuristics=none"
        )
        == "heuristics heuristic:robots_txt,heuristic:empty_user_agent -> none"
    )


def test_reclassifications_reads_the_manifests_and_what_is_landed(tmp_path, monkeypatch):
    store = LocalObjectStore(tmp_path / "lake")
    land(store, "epa.gov", LANDED, [b"x"])
    input_fp = planning.landed_input_fingerprint(scan_landing(store), LANDED)
    monkeypatch.setattr(planning, "classifier_version", lambda thresholds: NEW)
    for hour, classifier, fp in (
        (HOURS[3], OLD, planning.landed_input_fingerprint(scan_landing(store), HOURS[3])),
        (LANDED, OLD, input_fp),
        (HOURS[5], NEW, input_fp),
    ):
        document = HourManifest(
            hour, "a1", "f" * 64, fp, (), (), (), 0, 0, (), classifier=classifier
        )
        store.write_text(layout.hour_manifest_key(hour), document.to_json())
    found = planning.reclassifications(store, HOURS[2:6])
    assert found == [
        planning.Reclassification(HOURS[3], OLD, NEW),
        planning.Reclassification(LANDED, OLD, NEW),
    ]
    land(store, "epa.gov", LANDED, [b"y"])  # new input: built as always
    assert planning.reclassifications(store, HOURS[2:6]) == [
        planning.Reclassification(HOURS[3], OLD, NEW)
    ]
