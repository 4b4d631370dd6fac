"""Figures of ``benchmarks/benchmark.py``: the machine, derived ratios, text and Markdown.

``write_markdown`` replaces what lies between :data:`BEGIN` and :data:`END` in
docs/PERFORMANCE.md (the hand-written text around it stays), or writes a new file.
"""

import importlib.metadata
import os
import platform
import statistics
import subprocess
from pathlib import Path

BEGIN = "<!-- bench:{block}:begin (written by benchmarks/benchmark.py; do not edit by hand) -->"
END = "<!-- bench:{block}:end -->"
#: The targets, judged at the first scale: (label, key of :func:`derived`, limit, True if the
#: value must be <= limit).
TARGETS = (
    ("`run` / bare Spark, start-up included", "run_vs_spark", 1.5, True),
    ("(`land` + `run`) / bare Spark", "land_run_vs_spark", 2.0, True),
    ("landing, lines/s", "land_lines_per_s", 150_000, False),
    (
        "daily overhead (runs, warehouse jobs, checks), s/day (median day)",
        "overhead_s_day",
        3.0,
        True,
    ),
)
#: The most the traffic classification may add to the build's CPU seconds: with / without.
CLASSIFICATION_COST_LIMIT = 1.10


def machine() -> dict:
    """nproc, memory, CPU, OS and the versions that matter."""
    info: dict = {"nproc": os.cpu_count(), "os": platform.platform()}
    try:
        meminfo = Path("/proc/meminfo").read_text().split()
        info["memory_gib"] = round(int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20, 1)
        cpu = [x for x in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in x]
        info["cpu"] = cpu[0].split(":", 1)[1].strip() if cpu else platform.machine()
    except (OSError, ValueError):
        pass
    info["python"] = platform.python_version()
    info["java"] = java_version("java")
    for package in ("pyspark", "duckdb", "dagster"):
        try:
            info[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            info[package] = "?"
    return info


def java_version(java: str) -> str:
    """The first line ``java -version`` prints (``?`` when none; ``not found`` when it cannot
    run)."""
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    except OSError:
        return "not found"
    return done.stderr.splitlines()[0] if done.stderr else "?"


def median_index(values: list[float]) -> int:
    """Index of the median of ``values`` (of the lower of the two middle ones for an even
    count), with equal values in their order in ``values``.

    Raises:
        ValueError: if ``values`` is empty.
    """
    if not values:
        raise ValueError("no values")
    order = sorted(range(len(values)), key=values.__getitem__)  # stable: ties keep their order
    return order[(len(values) - 1) // 2]


def trials_sentence(r: dict) -> str:
    """How one scale's figures were taken, when it was measured more than once ("" if once):
    each step's trials in seconds, in the order run, and that the figures are the medians."""
    trials = r.get("trials") or {}
    if len(trials.get("run", [])) < 2:
        return ""
    names = {"bare_spark": "bare Spark", "land": "`land`", "run": "`run`"}
    parts = [f"{name} {' / '.join(f'{x:.1f}' for x in trials[k])} s" for k, name in names.items()]
    return (
        f"At {r['scale']}x the bare Spark job and `land` + `run` were measured "
        f"{len(trials['run'])} times, alternating, each `run` on a fresh home; the figures are "
        f"each step's median trial ({'; '.join(parts)}), and the Dagster and ledger figures are "
        "the median `run`'s."
    )


def derived(r: dict) -> dict:
    """Ratios, rates and the daily overhead of one scale's result."""
    spark, duck = r["bare_spark"]["seconds"], r["bare_duckdb"]["seconds"]
    land, run = r["land"]["seconds"], r["run"]["seconds"]
    overheads = [d["overhead_s"] for d in r.get("days", [])]
    return {
        "run_vs_spark": run / spark,
        "land_run_vs_spark": (land + run) / spark,
        "run_vs_duckdb": run / duck,
        "land_lines_per_s": r["lines"] / land,
        "run_lines_per_s": r["lines"] / run,
        "spark_lines_per_s": r["lines"] / spark,
        "duckdb_lines_per_s": r["lines"] / duck,
        "build_s": sum(d["build_s"] for d in r.get("days", [])),
        "overhead_s_day": statistics.median(overheads) if overheads else float("nan"),
        "overhead_s_days": overheads,
    }


def _steps(r: dict) -> list[dict]:
    """Every measured step of one scale's result: its top-level steps and the classification
    cost's two builds."""
    steps = [v for v in r.values() if isinstance(v, dict) and v.get("load")]
    cost = r.get("classification") or {}
    return steps + [cost[k] for k in ("with", "without") if isinstance(cost.get(k), dict)]


def _loads(report: dict) -> list[float]:
    """Load averages (1 min) seen before and after every step."""
    return [x for r in report["results"] for v in _steps(r) for x in v.get("load", [])]


def _busy(report: dict) -> bool:
    """Busy: before some step, the 1-minute load average exceeded the core count plus one.

    Only the load *before* a step counts, and with one process of slack: the 1-minute average
    decays slowly, so it still carries the previous step's own threads (the bench keeps 2 cores
    busy: 2-2.5 on a quiet 2-core machine; other work on the machine showed 4-20).
    """
    before = [v["load"][0] for r in report["results"] for v in _steps(r) if v.get("load")]
    return bool(before) and max(before) > report["machine"]["nproc"] + 1


def summary_text(report: dict) -> str:
    """A few lines per scale for the console."""
    lines = []
    for r in report["results"]:
        if "run" not in r:  # --only-classification: no pipeline and no bare jobs were run
            lines.append(f"{r['scale']}x {r['lines']:,} lines")
        else:
            lines += _pipeline_summary(r)
        cost = classification_figures(r)
        if cost is not None:
            lines.append(
                f"  classification: build CPU s {cost['with_cpu']:.1f} with, "
                f"{cost['without_cpu']:.1f} without ({cost['ratio']:.2f}x, target <= "
                f"{CLASSIFICATION_COST_LIMIT:.2f}x); {cost['user_agents']} distinct user agents, "
                f"bot pages {cost['bot_share']:.1%}"
            )
    if _busy(report):
        lines.append("NOTE: the load average exceeded the core count: the machine was busy.")
    return "\n".join(lines)


def _pipeline_summary(r: dict) -> list[str]:
    """The console lines of one scale's pipeline and bare-engine figures."""
    d = derived(r)
    lines = [
        f"{r['scale']}x {r['lines']:,} lines: bare Spark {r['bare_spark']['seconds']:.1f} s, "
        f"bare DuckDB {r['bare_duckdb']['seconds']:.1f} s, land {r['land']['seconds']:.1f} s "
        f"({d['land_lines_per_s']:,.0f} lines/s), run {r['run']['seconds']:.1f} s; "
        f"run/Spark {d['run_vs_spark']:.2f}x, land+run/Spark {d['land_run_vs_spark']:.2f}x, "
        f"run/DuckDB {d['run_vs_duckdb']:.2f}x; overhead {d['overhead_s_day']:.1f} s/day; "
        f"peak JVM {r['run']['peak_jvm_mib']} MiB, "
        f"driver Python {r['run']['peak_python_mib']} MiB; "
        f"CPU s (JVM + Python): run {_cpu(r['run'], 'jvm')} + {_cpu(r['run'], 'python')}, "
        f"bare Spark {_cpu(r['bare_spark'], 'jvm')} + {_cpu(r['bare_spark'], 'python')}"
    ]
    if trials_sentence(r):
        lines.append("  " + trials_sentence(r))
    return lines


def _fmt(value: float) -> str:
    return f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def markdown(report: dict, block: str = "main") -> str:
    """The generated block ``block`` of docs/PERFORMANCE.md."""
    m, results = report["machine"], report["results"]
    base = results[0]
    out = [
        BEGIN.format(block=block),
        "",
        f"Run {report['started']} to {report['finished']} (UTC), master `{report['master']}`, "
        f"scales {', '.join(f'{s}x' for s in report['scales'])}: "
        f"`{report['command']}`.",
        "",
        f"Machine: {m.get('nproc')} cores ({m.get('cpu', '?')}), {m.get('memory_gib', '?')} GiB, "
        f"{m.get('os')}; Python {m.get('python')}, {m.get('java')}, PySpark {m.get('pyspark')}, "
        f"DuckDB {m.get('duckdb')}, Dagster {m.get('dagster')}; the bare jobs and the "
        "pipeline run on the machine's `java`.",
        "",
    ]
    if _busy(report) or report.get("note"):
        out += [
            "**Busy machine**"
            + (f": {report['note']}" if report.get("note") else "")
            + " (load average before/after each step is in the raw JSON; "
            f"max {max(_loads(report), default=0)}"
            f" on {m.get('nproc')} cores). Treat these figures as upper bounds.",
            "",
        ]
    out += [
        f"### Targets, at {base['scale']}x ({base['lines']:,} lines)",
        "",
        "| target | limit | measured | met |",
        "|---|---|---|---|",
    ]
    d0 = derived(base)
    for label, key, limit, at_most in TARGETS:
        value = d0[key]
        ok = value <= limit if at_most else value >= limit
        sign = "<=" if at_most else ">="
        out.append(f"| {label} | {sign} {_fmt(limit)} | {_fmt(value)} | {'yes' if ok else 'NO'} |")
    if trials_sentence(base):
        out += ["", trials_sentence(base)]
    out += [
        "",
        "### Side by side, per scale",
        "",
        "Seconds of wall time; each step is a subprocess, start-up included.",
        "",
        "| scale | lines | bare Spark (start-up + job) | bare DuckDB | `land` | `run` "
        "| of which Spark build | run / Spark | land+run / Spark | run / DuckDB "
        "| land lines/s | run lines/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        d = derived(r)
        bs = r["bare_spark"]
        out.append(
            f"| {r['scale']}x | {r['lines']:,} | {bs['seconds']:.1f} ({bs['startup_s']:.1f} + "
            f"{bs['job_s']:.1f}) | {r['bare_duckdb']['seconds']:.1f} | "
            f"{r['land']['seconds']:.1f} | "
            f"{r['run']['seconds']:.1f} | {d['build_s']:.1f} | {d['run_vs_spark']:.2f}x | "
            f"{d['land_run_vs_spark']:.2f}x | {d['run_vs_duckdb']:.2f}x | "
            f"{d['land_lines_per_s']:,.0f} | {d['run_lines_per_s']:,.0f} |"
        )
    out += [
        "",
        "### Growth and memory (peak resident size, MiB)",
        "",
        "| scale | `run` s per 1x | JVM (run) | driver Python (run) | JVM (bare Spark) "
        "| Python (land) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        per = r["run"]["seconds"] / (r["scale"] / base["scale"])
        out.append(
            f"| {r['scale']}x | {per:.1f} | {r['run']['peak_jvm_mib']} "
            f"| {r['run']['peak_python_mib']} | {r['bare_spark']['peak_jvm_mib']} "
            f"| {r['land']['peak_python_mib']} |"
        )
    out += cpu_markdown(results)
    out += classification_markdown(results)
    out += ["", "### Daily overhead (Dagster runs minus the Spark build step), s", ""]
    out += ["| scale | days | per day | no-op `run` (nothing due) |", "|---|---|---|---|"]
    for r in results:
        days = ", ".join(
            f"{d['day']}: {d['overhead_s']:.1f} ({d['runs']} runs)" for d in r.get("days", [])
        )
        out.append(
            f"| {r['scale']}x | {len(r.get('days', []))} | {days or r.get('days_error')} | "
            f"{r['noop_run']['seconds']:.1f} |"
        )
    out += ["", "### Slowest Dagster steps (seconds, summed over the days' runs)", ""]
    out += ["| scale | step | seconds |", "|---|---|---|"]
    for r in results:
        top = sorted(r.get("steps", {}).items(), key=lambda kv: -kv[1])[:8]
        out += [f"| {r['scale']}x | `{key}` | {sec:.1f} |" for key, sec in top]
    out += ["", "### Warehouse jobs per table (local run: DuckDB job ledger)", ""]
    out += [
        "| scale | table | job type | jobs | tables | jobs per table | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for row in r.get("ledger", []):
            out.append(
                f"| {r['scale']}x | `{row['table']}` | {row['job_type']} | {row['jobs']} "
                f"| {row['tables']} | "
                f"{row['jobs'] / max(row['tables'], 1):.1f} | {row['failed']} |"
            )
        if "ledger_error" in r:
            out.append(f"| {r['scale']}x | ledger unreadable: {r['ledger_error']} | | | | | |")
    out += ["", END.format(block=block)]
    return "\n".join(out)


def cpu_total(step: dict) -> float:
    """A step's CPU seconds, JVM plus Python (0 for a figure the step lacks)."""
    return sum(step.get(f"cpu_{kind}_s") or 0.0 for kind in ("jvm", "python"))


def classification_figures(r: dict) -> dict | None:
    """The classification's cost at one scale (None when not measured): ``with_cpu`` and
    ``without_cpu`` (the build's CPU seconds), ``ratio`` (with / without), ``with_s`` and
    ``without_s`` (wall seconds), ``user_agents`` (distinct, in the data), ``pageviews``,
    ``bot_pageviews`` and ``bot_share`` (of the pages, in the classified build)."""
    cost = r.get("classification")
    if not cost:
        return None
    with_, without = cost["with"], cost["without"]
    with_cpu, without_cpu = cpu_total(with_), cpu_total(without)
    pages = with_.get("pageviews") or 0
    return {
        "with_cpu": with_cpu,
        "without_cpu": without_cpu,
        "ratio": with_cpu / without_cpu if without_cpu else float("nan"),
        "with_s": with_["seconds"],
        "without_s": without["seconds"],
        "user_agents": cost.get("user_agents"),
        "pageviews": pages,
        "bot_pageviews": with_.get("bot_pageviews") or 0,
        "bot_share": (with_.get("bot_pageviews") or 0) / pages if pages else float("nan"),
    }


def classification_markdown(results: list[dict]) -> list[str]:
    """The table "Cost of traffic classification": per scale that measured it, the build's CPU
    seconds with and without the classification, their ratio against
    :data:`CLASSIFICATION_COST_LIMIT`, the wall seconds, the distinct user agents of the data
    and the share of bot pages (``bot`` and ``suspected_bot``); then each scale's trials when
    there were several; with two scales or more, the cost per line between the smallest and the
    largest (the growth of the CPU seconds with over the growth without). No lines when no scale
    measured it."""
    measured = [(r, classification_figures(r)) for r in results]
    measured = [(r, f) for r, f in measured if f is not None]
    if not measured:
        return []
    out = [
        "",
        "### Cost of traffic classification",
        "",
        "The hourly build alone (`benchmarks/build_only.py`), with the traffic step and without "
        "it (`build_hours(classify=False)`), on copies of the same landed logs: CPU seconds of "
        "its JVM and Python processes (start-up included) and wall seconds. Target: with / "
        f"without <= {CLASSIFICATION_COST_LIMIT:.2f}.",
        "",
        "| scale | build CPU s, with | build CPU s, without | with / without | met "
        "| wall s, with / without | distinct user agents | bot pages |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, f in measured:
        met = "yes" if f["ratio"] <= CLASSIFICATION_COST_LIMIT else "NO"
        agents = "-" if f["user_agents"] is None else f"{f['user_agents']:,}"
        out.append(
            f"| {r['scale']}x | {f['with_cpu']:.1f} | {f['without_cpu']:.1f} "
            f"| {f['ratio']:.3f}x | {met} | {f['with_s']:.1f} / {f['without_s']:.1f} "
            f"| {agents} | {f['bot_pageviews']:,} of {f['pageviews']:,} "
            f"({f['bot_share']:.1%}) |"
        )
    if len(measured) > 1:
        by_scale = sorted(measured, key=lambda m: m[0]["scale"])
        (small, f0), (large, f1) = by_scale[0], by_scale[-1]
        grown_with, grown_without = (
            f1["with_cpu"] - f0["with_cpu"],
            f1["without_cpu"] - f0["without_cpu"],
        )
        if grown_without > 0:
            per_line = grown_with / grown_without
            met = "met" if per_line <= CLASSIFICATION_COST_LIMIT else "NOT met"
            out += [
                "",
                f"Per line, from {small['scale']}x to {large['scale']}x: the CPU seconds the "
                f"extra lines cost, with / without = {grown_with:.1f} / {grown_without:.1f} = "
                f"**{per_line:.3f}x** (target {met}). The rest of a build's difference is fixed "
                "per build (the JIT compiling the extra plans), which weighs most at the "
                "smallest scale.",
            ]
    for r, _ in measured:
        trials = r["classification"].get("trials") or {}
        if len(trials.get("with", [])) > 1:
            out += [
                "",
                f"At {r['scale']}x each build ran {len(trials['with'])} times, alternating which "
                "went first; CPU s with "
                + " / ".join(f"{x:.1f}" for x in trials["with"])
                + ", without "
                + " / ".join(f"{x:.1f}" for x in trials["without"])
                + "; the table gives each one's median.",
            ]
    return out


def classification_block(report: dict) -> str:
    """The generated block ``classification`` of docs/PERFORMANCE.md: the run's line, the
    machine, a busy-machine warning when there was one, and :func:`classification_markdown`
    (what ``benchmark.py --only-classification`` measures)."""
    m = report["machine"]
    out = [
        BEGIN.format(block="classification"),
        "",
        f"Run {report['started']} to {report['finished']} (UTC), master `{report['master']}`, "
        f"scales {', '.join(f'{s}x' for s in report['scales'])}: `{report['command']}`. "
        f"Machine: {m.get('nproc')} cores, {m.get('memory_gib', '?')} GiB; PySpark "
        f"{m.get('pyspark')}, {m.get('java')}.",
    ]
    if _busy(report) or report.get("note"):
        out += [
            "",
            "**Busy machine**"
            + (f": {report['note']}" if report.get("note") else "")
            + f" (max load average {max(_loads(report), default=0)} on {m.get('nproc')} cores).",
        ]
    out += classification_markdown(report["results"])
    out += ["", END.format(block="classification")]
    return "\n".join(out)


def _cpu(step: dict, kind: str) -> str:
    value = step.get(f"cpu_{kind}_s")  # None: a report from before the CPU figures
    return "-" if value is None else f"{value:.1f}"


def cpu_markdown(results: list[dict]) -> list[str]:
    """The CPU-seconds table: per scale, each step's JVM and Python processes
    (``benchmarks/process_sampler.py``; "-" where a report has no such figure), and ``run``'s
    total against the bare Spark job's. On 2 cores, a step's CPU seconds over 2 bound its wall
    time from below, whatever else the machine ran."""
    out = [
        "",
        "### CPU seconds (JVM and Python processes, sampled every 0.2 s)",
        "",
        "| scale | bare Spark: JVM | bare Spark: Python | `land`: Python | `run`: JVM "
        "| `run`: Python | `run` / bare Spark, CPU |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        bare, land, run = r["bare_spark"], r["land"], r["run"]
        bare_cpu, run_cpu = (
            sum(step.get(f"cpu_{kind}_s") or 0.0 for kind in ("jvm", "python"))
            for step in (bare, run)
        )
        ratio = f"{run_cpu / bare_cpu:.2f}x" if bare_cpu and run_cpu else "-"
        out.append(
            f"| {r['scale']}x | {_cpu(bare, 'jvm')} | {_cpu(bare, 'python')} "
            f"| {_cpu(land, 'python')} | {_cpu(run, 'jvm')} | {_cpu(run, 'python')} | {ratio} |"
        )
    return out


def write_markdown(report: dict, path: Path, block: str = "main") -> None:
    """Put the block ``block`` between its markers in ``path`` (or create it): for the block
    ``classification`` :func:`classification_block`, for any other :func:`markdown`."""
    begin, end = BEGIN.format(block=block), END.format(block=block)
    body = classification_block(report) if block == "classification" else markdown(report, block)
    text = path.read_text() if path.exists() else "# Performance\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + body + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + body + "\n"
    path.write_text(text)
