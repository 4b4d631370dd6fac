"""The bench report's verdict on the machine (scripts/bench_report.py)."""

import bench_report


def _report(*loads: list[float]) -> dict:
    steps = {f"step{i}": {"seconds": 1.0, "load": load} for i, load in enumerate(loads)}
    return {"machine": {"nproc": 2}, "results": [{"scale": 1, **steps}]}


def test_the_bench_s_own_load_after_a_step_is_not_a_busy_machine() -> None:
    # a quiet 2-core machine: a step's own 2 threads push "after" to ~2.3, and the next step's
    # "before" still carries it (the 1-minute average decays slowly)
    assert not bench_report._busy(_report([0.8, 2.3], [2.3, 2.2]))


def test_load_above_the_cores_before_a_step_is_a_busy_machine() -> None:
    assert bench_report._busy(_report([0.8, 2.3], [4.5, 6.0]))
    assert not bench_report._busy(_report())
