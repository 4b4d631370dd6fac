"""The automation and the hourly build asset never reclassify hours whose input is unchanged
unless asked (run config ``reclassify: true``), against a real local pipeline (Spark, DuckDB);
the classifier's upgrade is a stand-in version of planning's classifier."""

import datetime as dt
import re

import pytest

from bq_platform.lib import planning
from bq_platform.lib.core.manifest import read_hour_manifest
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.version import installed_version
from bq_platform_tests.defs.conftest import Pipeline
from bq_platform_tests.defs.test_automation import skip_message, tick

pytestmark = pytest.mark.spark
HOUR = dt.datetime(1995, 8, 1, 10, tzinfo=dt.UTC)
RECLASSIFY = {"ops": {"lake__pageview_files": {"config": {"reclassify": True}}}}


def test_an_upgrade_is_skipped_by_the_automation_and_refused_by_the_build_unless_asked(
    pipeline: Pipeline, monkeypatch
):
    pipeline.land(HOUR, 30)
    for _ in range(2):  # build, then publish
        pipeline.execute_all(tick(pipeline))
    assert "up to date" in skip_message(pipeline)
    before = read_hour_manifest(pipeline.store, HOUR)
    installed = planning.classifier_version(ClassificationThresholds())
    assert before is not None and before.classifier == installed
    upgraded = re.sub(r"crawler-user-agents==[^;]+", "crawler-user-agents==99.0.0", installed)
    monkeypatch.setattr(planning, "classifier_version", lambda thresholds: upgraded)
    change = f"crawler-user-agents {installed_version('crawler-user-agents')} -> 99.0.0"

    message = skip_message(pipeline)
    assert message.startswith(
        "nothing to run for 1 landed days: 1995-08-01: held, not reclassified nor published: "
        f"24 hours (1995-08-01T00, 1995-08-01T01, 1995-08-01T02 ...) from {change}"
    )
    assert "bq-platform run --reclassify" in message
    assert "ops: lake__pageview_files: config: reclassify: true" in message

    job = pipeline.definitions.resolve_job_def("pageviews_hourly_job")
    tags = {
        "dagster/asset_partition_range_start": "1995-08-01T10",
        "dagster/asset_partition_range_end": "1995-08-01T10",
    }
    refused = job.execute_in_process(instance=pipeline.instance, tags=tags, raise_on_error=False)
    assert not refused.success
    (failure,) = [e.step_failure_data for e in refused.all_events if e.is_step_failure]
    description = failure.user_failure_data.description
    assert f"1 hours (1995-08-01T10) from {change}" in description
    assert "bq-platform run --reclassify" in description
    retries = [e for e in refused.all_events if e.is_step_up_for_retry]
    assert retries == []
    assert read_hour_manifest(pipeline.store, HOUR) == before  # nothing built

    asked = job.execute_in_process(
        instance=pipeline.instance, tags=tags, run_config=RECLASSIFY, raise_on_error=False
    )
    assert asked.success
    after = read_hour_manifest(pipeline.store, HOUR)
    assert after is not None and after.attempt_id != before.attempt_id
