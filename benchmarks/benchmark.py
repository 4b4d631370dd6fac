"""``make bench``: the pipeline against bare engine baselines, side by side, in one run.

For each scale (``--scales``, or ``BENCH_SCALES``, default ``1,4,16``; 1x = 2,043,576 lines) on
the same SYNTHETIC data (``benchmarks/synthetic_logs.py``: the mix of the real logs, 50 sites,
3 UTC days, Combined lines with the real modern logs' user agents), it measures:

1. the bare PySpark job and the bare DuckDB job (``benchmarks/bare_baselines.py``, no pipeline
   code: one regex into typed columns, then Parquet), each a subprocess, start-up included;
2. the pipeline: ``bq-platform land-tree`` then ``bq-platform run`` as subprocesses of
   ``.venv/bin/bq-platform`` with a temporary ``BQ_PLATFORM_HOME``/``DAGSTER_HOME`` and
   ``BQ_PLATFORM_SPARK_MASTER`` = the bare job's master; then a second, no-op ``run``;
3. peak memory and CPU seconds of every process of a step, sampled from ``/proc`` every 0.2 s
   (``benchmarks/process_sampler.py``), the JVMs (``java``) and the Python processes apart;
4. from the Dagster instance the run left behind: per day, the hourly and daily runs' seconds
   and the Spark build step's, so the daily overhead (runs, warehouse jobs, checks) is the
   runs' time minus the build step;
5. from the local warehouse's job ledger (DuckDB ``_bq_platform_jobs``): jobs per table;
6. the cost of the traffic classification: the hourly build alone (``benchmarks/build_only.py``,
   a subprocess sampled as above), with the classification and without it, each on its own
   hard-linked copy of one landed lake, alternating. The build alone, not ``land`` + ``run``
   twice: its CPU seconds hold no Dagster, warehouse or report work that would dilute the
   ratio, it costs two builds instead of two pipelines, and the switch that skips the step
   (``build_hours(classify=False)``) stays a keyword of the library that only this bench
   passes, reachable from no setting of a deployment.

At 1x the bare Spark job and ``land`` + ``run`` (+ the no-op ``run``), and the two builds of 6,
are measured ``--repeat-1x`` times (default 3, ``BENCH_REPEAT_1X``), alternating, each pipeline
trial on a fresh home; the report gives each step's median trial and every trial's seconds.
The figures read from the Dagster instance and the job ledger are those of the median ``run``.

It prints the figures and writes them into ``--output`` (default ``docs/PERFORMANCE.md``)
between the ``bench`` markers (``benchmarks/bench_report.py``).

Usage: ``.venv/bin/python benchmarks/benchmark.py [--scales 1,4,16] [--master local[2]]``;
``make bench BENCH_SCALES=1`` for a quick run. Needs the venv (``make install``), Java 17 and
the shared real logs (``../shared/data/access_logs`` and ``modern_logs``).
"""

import argparse
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench_report
import synthetic_logs
from process_sampler import TreeSampler

REPO = Path(__file__).resolve().parents[1]
BIN = REPO / ".venv" / "bin"
PERFORMANCE_MD = REPO / "docs" / "PERFORMANCE.md"
BUILD_STEP = "pageview_files"  # the Spark build step's key contains this
_STEP_TIMEOUT_S = 3 * 3600


def run_step(name: str, cmd: list[str], env: dict[str, str], log_dir: Path) -> dict:
    """Run ``cmd`` as a subprocess (own process group), timed and memory-sampled.

    Raises:
        RuntimeError: if the command fails (the log file is named).
    """
    log_path = log_dir / f"{name}.log"
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=log, text=True, start_new_session=True
        )
        sampler = TreeSampler(proc.pid)
        sampler.start()
        try:
            stdout, _ = proc.communicate(timeout=_STEP_TIMEOUT_S)
        except BaseException:
            os.killpg(proc.pid, 9)
            proc.wait()
            raise
        finally:
            sampler.stop()
        log.write(stdout)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {proc.returncode}); see {log_path}")
    return {
        "seconds": seconds,
        "stdout": stdout,
        "peak_jvm_mib": round(sampler.peaks["jvm"]),
        "peak_python_mib": round(sampler.peaks["python"]),
        "cpu_jvm_s": round(sampler.cpu["jvm"], 1),
        "cpu_python_s": round(sampler.cpu["python"], 1),
        "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
    }


def dagster_days(dagster_home: Path, steps: dict[str, float]) -> list[dict]:
    """Per UTC day: seconds of the hourly and daily runs and of the build step.

    ``bq-platform run`` builds consecutive days in one hourly run (``planning.batches``): such a
    run's seconds, and its build step's, are shared evenly among the days of its partition
    range, so ``overhead_s`` (runs minus build) is per day whatever the batching. ``runs``
    counts the runs that touched the day. ``steps`` receives the seconds of every step key,
    summed over the runs.
    """
    import datetime as dt

    import dagster as dg

    instance = dg.DagsterInstance.from_config(str(dagster_home))
    days: dict[str, dict] = {}
    for run in instance.get_runs():
        tags = run.tags
        first = tags.get("dagster/asset_partition_range_start") or tags.get("dagster/partition")
        last = tags.get("dagster/asset_partition_range_end") or first
        start, end = dt.date.fromisoformat(first[:10]), dt.date.fromisoformat(last[:10])
        covered = [str(start + dt.timedelta(days=i)) for i in range((end - start).days + 1)]
        stats = instance.get_run_stats(run.run_id)
        run_s = (stats.end_time or 0) - (stats.start_time or 0)
        build_s = 0.0
        for step in instance.get_run_step_stats(run.run_id):
            if not (step.end_time and step.start_time):
                continue
            seconds = step.end_time - step.start_time
            steps[step.step_key] = steps.get(step.step_key, 0.0) + seconds
            if BUILD_STEP in step.step_key:
                build_s += seconds
        for day in covered:
            entry = days.setdefault(day, {"day": day, "runs": 0, "run_s": 0.0, "build_s": 0.0})
            entry["runs"] += 1
            entry["run_s"] += run_s / len(covered)
            entry["build_s"] += build_s / len(covered)
    for entry in days.values():
        entry["overhead_s"] = entry["run_s"] - entry["build_s"]
    return [days[d] for d in sorted(days)]


def ledger_counts(warehouse: Path) -> list[dict]:
    """Jobs per table family (stage tables grouped) from the local job ledger."""
    import duckdb

    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        rows = con.execute(
            """
            SELECT regexp_replace(destination, '_[0-9]{8,10}$', '_<hour>') AS family,
                   job_type, count(*) AS jobs, count(DISTINCT destination) AS tables,
                   count(*) FILTER (WHERE state <> 'DONE' OR error_reason IS NOT NULL) AS failed
            FROM _bq_platform_jobs GROUP BY ALL ORDER BY family, job_type
            """
        ).fetchall()
    finally:
        con.close()
    return [
        dict(zip(("table", "job_type", "jobs", "tables", "failed"), r, strict=True)) for r in rows
    ]


def generate_scale(
    scale: int,
    args: argparse.Namespace,
    mix: synthetic_logs.Mix,
    fields: synthetic_logs.FieldMix,
    work: Path,
) -> tuple[Path, Path, dict]:
    """The synthetic logs of one scale under ``work``: their folder, the scale's log folder
    (created) and :func:`synthetic_logs.generate`'s figures."""
    gen, logs = work / f"gen-{scale}x", work / f"logs-{scale}x"
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    data = synthetic_logs.generate(
        mix,
        gen,
        lines_per_hour=args.lines_per_hour_1x * scale,
        days=args.days,
        sites=args.sites,
        fields=fields,
        seed=args.seed,
    )
    print(f"[{scale}x] generated {data['lines']:,} lines in {time.monotonic() - started:.0f} s")
    return gen, logs, data


def bench_scale(
    scale: int,
    args: argparse.Namespace,
    mix: synthetic_logs.Mix,
    fields: synthetic_logs.FieldMix,
    work: Path,
) -> dict:
    """All measurements of one scale (see the module docstring)."""
    gen, logs, data = generate_scale(scale, args, mix, fields, work)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": str(BIN / "python")}
    result: dict = {"scale": scale, "lines": data["lines"], "data": data}
    result["bare_duckdb"] = bare_step("duckdb", scale, gen, work, args.master, env, logs)
    trials = max(1, args.repeat_1x) if scale == 1 else 1
    bare_spark, pipelines = [], []
    for trial in range(trials):
        bare_spark.append(bare_step("spark", scale, gen, work, args.master, env, logs))
        home = work / (f"home-{scale}x" if trial == 0 else f"home-{scale}x-{trial + 1}")
        pipelines.append(pipeline_steps(scale, gen, home, args.master, env, logs))
    trial_s = result["trials"] = {
        "bare_spark": [s["seconds"] for s in bare_spark],
        "land": [p["land"]["seconds"] for p in pipelines],
        "run": [p["run"]["seconds"] for p in pipelines],
    }
    run_at = bench_report.median_index(trial_s["run"])
    result["bare_spark"] = bare_spark[bench_report.median_index(trial_s["bare_spark"])]
    result["land"] = pipelines[bench_report.median_index(trial_s["land"])]["land"]
    result["run"] = pipelines[run_at]["run"]
    result["noop_run"] = pipelines[run_at]["noop_run"]
    home = pipelines[run_at]["home"]
    try:
        result["steps"] = {}
        result["days"] = dagster_days(home / "dagster_home", result["steps"])
    except Exception as exc:  # noqa: BLE001 - report what could not be read, keep the figures
        result["days_error"] = repr(exc)
    try:
        result["ledger"] = ledger_counts(home / "warehouse.duckdb")
    except Exception as exc:  # noqa: BLE001
        result["ledger_error"] = repr(exc)
    result["classification"] = classification_cost(
        scale, gen, data, work / f"cost-{scale}x", args.master, env, logs, trials
    )
    if not args.keep:
        for path in (gen, *(p["home"] for p in pipelines)):
            shutil.rmtree(path, ignore_errors=True)
    return result


def classification_scale(
    scale: int,
    args: argparse.Namespace,
    mix: synthetic_logs.Mix,
    fields: synthetic_logs.FieldMix,
    work: Path,
) -> dict:
    """Only the classification's cost at one scale (``--only-classification``): the logs
    generated as :func:`bench_scale` does, then :func:`classification_cost`."""
    gen, logs, data = generate_scale(scale, args, mix, fields, work)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": str(BIN / "python")}
    trials = max(1, args.repeat_1x) if scale == 1 else 1
    cost = classification_cost(
        scale, gen, data, work / f"cost-{scale}x", args.master, env, logs, trials
    )
    if not args.keep:
        shutil.rmtree(gen, ignore_errors=True)
    return {"scale": scale, "lines": data["lines"], "data": data, "classification": cost}


def classification_cost(
    scale: int,
    gen: Path,
    data: dict,
    work: Path,
    master: str,
    env: dict,
    logs: Path,
    trials: int,
) -> dict:
    """The build alone with and without the traffic classification (module docstring, 6).

    ``gen``'s logs are landed once under ``work``; each build runs on its own hard-linked copy
    of that lake (the landed files are only read), ``trials`` times each, alternating which
    goes first. Returns ``with`` and ``without`` (the step figures of :func:`run_step` and the
    build's JSON, of the median trial by CPU seconds), ``trials`` (each trial's CPU seconds per
    variant, in the order run) and the data's ``user_agents`` (distinct, as generated).
    """
    shutil.rmtree(work, ignore_errors=True)
    base = work / "base"
    penv = {
        **env,
        "BQ_PLATFORM_HOME": str(base),
        "DAGSTER_HOME": str(base / "dagster_home"),
        "BQ_PLATFORM_SPARK_MASTER": master,
    }
    run_step("cost-land", [str(BIN / "bq-platform"), "land-tree", str(gen)], penv, logs)
    start = dt.date.fromisoformat(data["start"])
    first = f"{start:%Y-%m-%d}T00"
    last = f"{start + dt.timedelta(days=data['days'] - 1):%Y-%m-%d}T23"
    script = str(REPO / "benchmarks" / "build_only.py")
    runs: dict[str, list[dict]] = {"with": [], "without": []}
    for trial in range(trials):
        order = ("with", "without") if trial % 2 == 0 else ("without", "with")
        for variant in order:
            lake = work / f"{variant}-{trial + 1}"
            shutil.copytree(base / "lake", lake, copy_function=os.link)
            cmd = [str(BIN / "python"), script, str(lake), first, last]
            cmd += [] if variant == "with" else ["--no-classify"]
            step = run_step(f"build-{variant}-classification", cmd, penv, logs)
            step.update(json.loads(step.pop("stdout").strip().splitlines()[-1]))
            runs[variant].append(step)
            shutil.rmtree(lake, ignore_errors=True)
            print(
                f"[{scale}x] build {variant} classification: {step['seconds']:.1f} s, "
                f"CPU {bench_report.cpu_total(step):.1f} s"
            )
    shutil.rmtree(work, ignore_errors=True)
    cpu = {k: [bench_report.cpu_total(s) for s in v] for k, v in runs.items()}
    return {
        "with": runs["with"][bench_report.median_index(cpu["with"])],
        "without": runs["without"][bench_report.median_index(cpu["without"])],
        "trials": cpu,
        "user_agents": data.get("user_agents"),
    }


def bare_step(
    engine: str, scale: int, gen: Path, work: Path, master: str, env: dict, logs: Path
) -> dict:
    """One bare baseline (``benchmarks/bare_baselines.py ENGINE``) over ``gen``'s logs: its step
    figures (:func:`run_step`) and the job's own (rows, start-up and job seconds)."""
    out = work / f"bare-{engine}-{scale}x"
    cmd = [str(BIN / "python"), str(REPO / "benchmarks" / "bare_baselines.py"), engine]
    cmd += [f"{gen}/*/*.log.gz", str(out), "--master", master]
    step = run_step(f"bare-{engine}", cmd, env, logs)
    step.update(json.loads(step.pop("stdout").strip().splitlines()[-1]))
    print(f"[{scale}x] bare {engine}: {step['seconds']:.1f} s ({step['rows']:,} rows)")
    shutil.rmtree(out, ignore_errors=True)
    return step


def pipeline_steps(scale: int, gen: Path, home: Path, master: str, env: dict, logs: Path) -> dict:
    """``land-tree``, ``run`` and a no-op ``run`` on a fresh ``home``: each step's figures
    (:func:`run_step`) by name, and ``home``."""
    shutil.rmtree(home, ignore_errors=True)
    penv = {
        **env,
        "BQ_PLATFORM_HOME": str(home),
        "DAGSTER_HOME": str(home / "dagster_home"),
        "BQ_PLATFORM_SPARK_MASTER": master,
    }
    cli = str(BIN / "bq-platform")
    steps: dict = {"home": home}
    steps["land"] = run_step("land", [cli, "land-tree", str(gen)], penv, logs)
    print(f"[{scale}x] land: {steps['land']['seconds']:.1f} s")
    steps["run"] = run_step("run", [cli, "run"], penv, logs)
    print(f"[{scale}x] run: {steps['run']['seconds']:.1f} s")
    steps["noop_run"] = run_step("noop-run", [cli, "run"], penv, logs)
    for key in ("land", "run", "noop_run"):
        steps[key].pop("stdout")
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scales", default=os.environ.get("BENCH_SCALES", "1,4,16"))
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--lines-per-hour-1x", type=int, default=synthetic_logs.LINES_PER_HOUR_1X)
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--sites", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--modern-logs",
        type=Path,
        default=synthetic_logs.DEFAULT_MODERN_LOGS,
        help="real Combined logs the synthetic user agents are drawn from",
    )
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: temp)")
    parser.add_argument("--keep", action="store_true", help="keep generated data and homes")
    parser.add_argument("--output", type=Path, default=PERFORMANCE_MD)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--note", default="", help="a sentence for the report (e.g. busy)")
    parser.add_argument(
        "--block", default="main", help="which generated block of the report to replace"
    )
    parser.add_argument(
        "--repeat-1x",
        type=int,
        default=int(os.environ.get("BENCH_REPEAT_1X", "3")),
        help="trials at 1x of the bare Spark job, land + run and the builds with and without "
        "classification (medians reported)",
    )
    parser.add_argument(
        "--only-classification",
        action="store_true",
        help="per scale, generate the logs and measure only the build with and without the "
        "traffic classification (6. above); writes the block 'classification'",
    )
    args = parser.parse_args()
    if args.only_classification:
        args.block = "classification"
    scales = [int(s) for s in str(args.scales).split(",") if s.strip()]
    try:
        mix = synthetic_logs.learn_mix(synthetic_logs.DEFAULT_LOGS)
        fields = synthetic_logs.learn_user_agents(args.modern_logs)
    except (FileNotFoundError, OSError) as exc:  # names the folder and what to do
        sys.exit(f"benchmark: {exc}")
    work = args.work or Path(tempfile.mkdtemp(prefix="bqp-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.UTC)
    measure = classification_scale if args.only_classification else bench_scale
    results = [measure(s, args, mix, fields, work) for s in scales]
    report = {
        "started": started.isoformat(timespec="seconds"),
        "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": bench_report.machine(),
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "scales": scales,
        "master": args.master,
        "note": args.note,
        "results": results,
    }
    (work / "bench.json").write_text(json.dumps(report, indent=2, default=str))
    print(bench_report.summary_text(report))
    if args.work is not None or args.keep:
        print(f"raw figures: {work / 'bench.json'}")
    else:
        print(json.dumps(report, indent=2, default=str))
    if not args.no_write:
        bench_report.write_markdown(report, args.output, args.block)
        print(f"wrote {args.output}")
    if args.work is None and not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
