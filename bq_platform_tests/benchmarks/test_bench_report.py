"""The bench report (benchmarks/bench_report.py): its verdict on the machine, and how repeated
trials become one figure."""

import bench_report
import pytest


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


def test_the_median_trial_is_the_middle_one_by_seconds() -> None:
    assert bench_report.median_index([38.4, 31.3, 35.7]) == 2
    assert bench_report.median_index([16.4]) == 0
    # an even count takes the lower middle; equal values keep their order
    assert bench_report.median_index([4.0, 1.0, 3.0, 2.0]) == 3
    assert bench_report.median_index([2.0, 2.0, 2.0]) == 1
    with pytest.raises(ValueError):
        bench_report.median_index([])


def test_repeated_trials_are_named_with_their_seconds() -> None:
    once = {"scale": 1, "trials": {"bare_spark": [16.4], "land": [2.3], "run": [35.7]}}
    assert bench_report.trials_sentence(once) == ""
    assert bench_report.trials_sentence({"scale": 4}) == ""
    three = {
        "scale": 1,
        "trials": {
            "bare_spark": [16.4, 15.9, 17.0],
            "land": [2.3, 2.0, 2.1],
            "run": [35.7, 31.2, 33.0],
        },
    }
    text = bench_report.trials_sentence(three)
    assert "measured 3 times" in text
    assert "bare Spark 16.4 / 15.9 / 17.0 s" in text
    assert "`run` 35.7 / 31.2 / 33.0 s" in text


def test_the_cpu_table_gives_each_step_s_processes_and_run_against_bare_spark() -> None:
    result = {
        "scale": 1,
        "bare_spark": {"cpu_jvm_s": 25.7, "cpu_python_s": 0.3},
        "land": {"cpu_python_s": 3.1},
        "run": {"cpu_jvm_s": 45.1, "cpu_python_s": 12.5},
    }
    table = bench_report.cpu_markdown([result])
    assert table[-1] == "| 1x | 25.7 | 0.3 | 3.1 | 45.1 | 12.5 | 2.22x |"  # 57.6 / 26.0
    # a report written before the CPU was sampled: dashes, no ratio
    old = {"scale": 4, "bare_spark": {}, "land": {}, "run": {}}
    assert bench_report.cpu_markdown([old])[-1] == "| 4x | - | - | - | - | - | - |"


def _step(seconds: float, **figures: float) -> dict:
    return {"seconds": seconds, "peak_jvm_mib": 900, "peak_python_mib": 300, **figures}


def test_the_generated_block_is_replaced_and_the_text_around_it_kept(tmp_path) -> None:
    result = {
        "scale": 1,
        "lines": 2_000_000,
        "bare_spark": _step(20.0, startup_s=4.0, job_s=16.0),
        "bare_duckdb": _step(5.0),
        "land": _step(2.0),
        "run": _step(30.0),
        "noop_run": _step(1.5),
        "days": [
            {"day": "1995-09-01", "runs": 2, "run_s": 25.0, "build_s": 23.0, "overhead_s": 2.0}
        ],
        "steps": {"lake__pageview_files": 23.0},
        "ledger": [],
        "classification": _cost_result(1)["classification"],
    }
    report = {
        "started": "s",
        "finished": "f",
        "machine": {"nproc": 2},
        "command": "benchmark.py --scales 1",
        "scales": [1],
        "master": "local[2]",
        "note": "",
        "results": [result],
    }
    path = tmp_path / "PERFORMANCE.md"
    begin, end = bench_report.BEGIN.format(block="main"), bench_report.END.format(block="main")
    path.write_text(f"# Performance\n\nby hand\n\n{begin}\nold figures\n{end}\n\nafter\n")
    bench_report.write_markdown(report, path)
    text = path.read_text()
    assert text.startswith("# Performance\n\nby hand\n\n" + begin)
    assert text.endswith(end + "\n\nafter\n")
    assert "old figures" not in text
    assert "| `run` / bare Spark, start-up included | <= 1.50 | 1.50 | yes |" in text
    assert "### Cost of traffic classification" in text
    assert "| 1x | 55.0 | 50.0 | 1.100x | yes |" in text


def _cost_result(scale: int, trials: dict | None = None) -> dict:
    build = {"seconds": 30.0, "pageviews": 800, "human_pageviews": 500, "bot_pageviews": 300}
    return {
        "scale": scale,
        "classification": {
            "with": {**build, "seconds": 31.5, "cpu_jvm_s": 50.0, "cpu_python_s": 5.0},
            "without": {
                **build,
                "human_pageviews": 0,
                "bot_pageviews": 0,
                "cpu_jvm_s": 46.0,
                "cpu_python_s": 4.0,
                "load": [1.0, 5.5],
            },
            "trials": trials or {"with": [55.0], "without": [50.0]},
            "user_agents": 1234,
        },
    }


def test_the_classification_table_gives_the_build_s_cpu_with_and_without() -> None:
    table = bench_report.classification_markdown([{"scale": 4}, _cost_result(1)])
    assert table[1] == "### Cost of traffic classification"
    rows = [x for x in table if x.startswith("| ")]
    assert rows[-1] == (
        "| 1x | 55.0 | 50.0 | 1.100x | yes | 31.5 / 30.0 | 1,234 | 300 of 800 (37.5%) |"
    )
    over = _cost_result(16)
    over["classification"]["with"]["cpu_jvm_s"] = 60.0  # 65 / 50
    assert bench_report.classification_markdown([over])[-1].split(" | ")[3:5] == ["1.300x", "NO"]
    # a report without the measurement has no such table
    assert bench_report.classification_markdown([{"scale": 1}]) == []


def test_the_cost_per_line_is_the_growth_with_over_the_growth_without() -> None:
    small = _cost_result(1)  # 55 with, 50 without
    large = _cost_result(16)
    large["classification"]["with"]["cpu_jvm_s"] = 530.0  # 535 with
    large["classification"]["without"]["cpu_jvm_s"] = 496.0  # 500 without
    text = "\n".join(bench_report.classification_markdown([large, small]))
    assert "from 1x to 16x" in text
    assert "480.0 / 450.0 = **1.067x** (target met)" in text
    large["classification"]["with"]["cpu_jvm_s"] = 560.0  # 565: 510 / 450
    text = "\n".join(bench_report.classification_markdown([small, large]))
    assert "510.0 / 450.0 = **1.133x** (target NOT met)" in text
    assert "Per line" not in "\n".join(bench_report.classification_markdown([small]))


def test_the_classification_s_trials_are_named_and_its_load_counts() -> None:
    result = _cost_result(1, {"with": [55.0, 54.1, 57.2], "without": [50.0, 49.5, 51.0]})
    text = "\n".join(bench_report.classification_markdown([result]))
    assert "ran 3 times" in text
    assert "CPU s with 55.0 / 54.1 / 57.2, without 50.0 / 49.5 / 51.0" in text
    busy = {"machine": {"nproc": 2}, "results": [result]}
    assert not bench_report._busy(busy)  # 1.0 before the build: quiet
    result["classification"]["without"]["load"] = [4.5, 5.0]
    assert bench_report._busy(busy)


def test_only_the_classification_block_is_written_for_a_classification_only_run(tmp_path) -> None:
    report = {
        "started": "s",
        "finished": "f",
        "machine": {"nproc": 2},
        "command": "benchmark.py --scales 1 --only-classification",
        "scales": [1],
        "master": "local[2]",
        "note": "",
        "results": [{**_cost_result(1), "lines": 2_000_000}],
    }
    main_begin = bench_report.BEGIN.format(block="main")
    main = f"{main_begin}\nmain figures\n{bench_report.END.format(block='main')}"
    path = tmp_path / "PERFORMANCE.md"
    path.write_text(f"# Performance\n\n{main}\n")

    bench_report.write_markdown(report, path, "classification")
    # the console summary has no pipeline figures to give, only the scale and its cost
    assert bench_report.summary_text(report).splitlines() == [
        "1x 2,000,000 lines",
        "  classification: build CPU s 55.0 with, 50.0 without (1.10x, target <= 1.10x); "
        "1234 distinct user agents, bot pages 37.5%",
    ]

    text = path.read_text()
    assert main in text
    block = text.split(bench_report.BEGIN.format(block="classification"), 1)[1]
    assert block.split("\n")[2].startswith("Run s to f (UTC), master `local[2]`, scales 1x")
    assert "| 1x | 55.0 | 50.0 | 1.100x | yes |" in block
    assert block.rstrip().endswith(bench_report.END.format(block="classification"))
