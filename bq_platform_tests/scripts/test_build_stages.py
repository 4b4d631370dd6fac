"""The stage table of ``scripts/build_stages.py`` from Spark event-log lines (no Spark)."""

import json

import build_stages
import pytest


def _stage(stage_id: int, submitted_ms: int, completed_ms: int, **metrics: int) -> str:
    names = {
        "run": "internal.metrics.executorRunTime",
        "cpu": "internal.metrics.executorCpuTime",
        "gc": "internal.metrics.jvmGCTime",
    }
    info = {
        "Stage ID": stage_id,
        "Stage Name": f"collect at build.py:{stage_id}",
        "Number of Tasks": 4,
        "Submission Time": submitted_ms,
        "Completion Time": completed_ms,
        "Accumulables": [{"Name": names[k], "Value": v} for k, v in metrics.items()],
    }
    return json.dumps({"Event": "SparkListenerStageCompleted", "Stage Info": info})


def test_stages_in_seconds_from_the_application_start() -> None:
    lines = [
        json.dumps({"Event": "SparkListenerApplicationStart", "Timestamp": 1_000_000}),
        json.dumps({"Event": "SparkListenerJobStart", "Job ID": 0}),
        _stage(1, 1_006_000, 1_017_500, run=23_000, cpu=16_500_000_000, gc=800),
        _stage(2, 1_018_000, 1_018_250),  # no metrics reported: zeros
    ]

    rows = build_stages.stage_rows(lines)

    assert [(r["stage"], r["at"], r["wall"], r["tasks"]) for r in rows] == [
        (1, 6.0, 11.5, 4),
        (2, 18.0, 0.25, 4),
    ]
    assert (rows[0]["run"], rows[0]["cpu"], rows[0]["gc"]) == (23.0, 16.5, 0.8)
    assert (rows[1]["run"], rows[1]["cpu"], rows[1]["gc"]) == (0, 0, 0)


def test_a_stage_before_the_application_start_is_not_an_event_log() -> None:
    with pytest.raises(ValueError, match="ApplicationStart"):
        build_stages.stage_rows([_stage(0, 1, 2)])


def test_jvm_threads_are_grouped_by_hotspot_s_names() -> None:
    threads = [
        ("C2 CompilerThre", 10.5),
        ("C1 CompilerThre", 2.0),
        ("GC Thread#0", 0.75),
        ("GC Thread#1", 0.75),
        ("Executor task l", 9.0),
        ("Thread-3", 3.5),
    ]
    groups = build_stages.thread_cpu(threads)
    assert groups == {
        "JIT compilers": 12.5,
        "garbage collector": 1.5,
        "task threads": 9.0,
        "other": 3.5,
        "all": 26.5,
    }
    assert build_stages.thread_cpu([]) == {"all": 0.0}
