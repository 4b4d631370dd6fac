"""Warehouse requests per table, counted at the HTTP layer on the emulated production backends.

Issue 9's target: "One table-metadata request per table per run; checks bill 0 bytes (counted
at the HTTP layer on the emulated production backends)". This script measures it for
``make bench`` (``scripts/benchmark.py`` calls :func:`measure`) and standalone::

    .venv/bin/python scripts/bench_http.py [--every 1] [--work DIR] [--json]

It starts gcp-storage-emulator and bqemulator on loopback
(:func:`bq_platform_tests.emulators.running_gcs_emulator` and ``running_bq_emulator``), lands
the bundled NASA log (``../shared/data/access_logs/ksc.nasa.gov``, 1995-08-01 UTC; every
``--every``-th line, default all, plus two garbage lines for the dead letters), builds the
day's 24 hours with Spark (``local[2]``) into a local lake and uploads them to the GCS
emulator, then runs the day through the production ``BigQueryWarehouse`` as
``bq_platform_tests/integration/test_emulator_day.py`` does: the audit rows, 24 x 2
``load_stage_hours``, ``day_completeness``, ``publish_days`` for both kinds and
``load_day_deadletters``. It does that twice, each time with a new warehouse object over a new
HTTP session (a run): the first run, then a re-run on the same content.

Every request the adapter sends goes through a recording session
(:class:`~bq_platform_tests.http_recording.RecordingSession`) with the test
:class:`~bq_platform_tests.bigquery_shim.BigQueryShim` in front of bqemulator for what the
emulator lacks (partition decorators, 409s, copies); the shim's own requests to the emulator
are not counted. ``scripts/http_counts.py`` counts, per run and per table, the
table-metadata requests (``tables.get``/``insert``/``patch``), ``jobs.insert`` by type,
``jobs.get`` and every query job with its bytes; the checks are the read (SELECT) query jobs.
bqemulator answers ``totalBytesProcessed`` ("0") but no ``totalBytesBilled``; BigQuery bills
at least 10 MB per table a query reads, so the target "checks bill 0 bytes" is met only by
checks that run no query. Partition counts (``tables.get`` of ``table$YYYYMMDD``) are reported
apart from the whole-table metadata requests, and ``tabledata.list`` (the free row reads of
the ledger and the audit) apart from both. The adapter's own counters (``metadata_requests``,
``partition_reads``, ``rows_listed``) are kept next to the HTTP counts.
"""

import argparse
import contextlib
import dataclasses
import datetime as dt
import json
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # bq_platform_tests is not installed; it lives in the repo
    sys.path.insert(0, str(REPO))

import requests  # noqa: E402
from http_counts import (  # noqa: E402
    JOB_PATH,
    JOBS_PATH,
    QUERY_RESULTS_PATH,
    count_calls,
    count_object_calls,
    job_tables,
)

from bq_platform_tests.http_recording import RecordingSession  # noqa: E402

NASA = "ksc.nasa.gov"
DAY = dt.date(1995, 8, 1)
DEFAULT_LOGS = REPO.parent / "shared" / "data" / "access_logs"


class MeteredSession(RecordingSession):
    """A :class:`RecordingSession` that also keeps the JSON answers of job requests.

    Attributes:
        answers: index in :attr:`calls` -> parsed JSON answer, for ``jobs.insert``,
            ``jobs.get`` and ``getQueryResults`` (where the bytes of a query job are).
        phase_starts: ``(phase name, index of its first call)``, in order (:meth:`phase`).
    """

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict[int, Any] = {}
        self.phase_starts: list[tuple[str, int]] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        index = len(self.calls)
        response = super().request(method, url, *args, **kwargs)
        path = unquote(self.calls[index].path)
        if any(p.match(path) for p in (JOBS_PATH, JOB_PATH, QUERY_RESULTS_PATH)):
            with contextlib.suppress(ValueError):
                self.answers[index] = response.json()
        return response

    def phase(self, name: str) -> None:
        """Calls from now on belong to phase ``name``."""
        self.phase_starts.append((name, len(self.calls)))


@dataclasses.dataclass
class _Day:
    gcs: Any
    uploaded: dict[dt.datetime, Any]
    lines: int


def _spark() -> Any:
    """A ``local[2]`` SparkSession configured as the tests' (``bq_platform_tests/conftest``)."""
    from pyspark.sql import SparkSession

    from bq_platform.lib.build.spark import ensure_local_spark_env, spark_config

    ensure_local_spark_env()
    builder = SparkSession.builder
    for key, value in spark_config("local[2]", shuffle_partitions=2).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _build_day(work: Path, logs: Path, every: int, gcs_emulator: Any) -> _Day:
    """Land, build (Spark) and upload the NASA day, as ``test_emulator_day.built_day``."""
    from bq_platform.lib.core import layout
    from bq_platform.lib.build.hourly import build_hours
    from bq_platform.lib.core.hours import day_hours
    from bq_platform.lib.landing.producer.land import land_file
    from bq_platform.lib.storage.gcs import GCSObjectStore
    from bq_platform.lib.storage.local import LocalObjectStore
    from bq_platform_tests.emulators import unique_name
    from bq_platform_tests.integration.test_emulator_day import thin_log
    from bq_platform_tests.integration.test_emulator_hourly_path import upload_hour

    (source,) = (logs / NASA).glob("*.log.gz")
    log_slice = work / "nasa.log.gz"
    per_hour = thin_log(source, log_slice, every)
    store = LocalObjectStore(work / "lake")
    land_file(store, NASA, log_slice)
    spark = _spark()
    try:
        manifests = build_hours(spark, store, day_hours(DAY), attempt_id="day-1", visitor_key="k")
    finally:
        spark.stop()
    bucket = unique_name("bench").replace("_", "-")
    gcs_emulator.client().create_bucket(bucket)
    gcs = GCSObjectStore(bucket, gcs_emulator.client())
    uploaded = {m.hour: upload_hour(store, gcs, m) for m in manifests}
    for key in store.list_keys(layout.LANDING_PREFIX):  # the landing zone, for _object_requests
        gcs.write_bytes(key, store.read_bytes(key))
    return _Day(gcs=gcs, uploaded=uploaded, lines=sum(per_hour.values()))


def _object_requests(gcs_emulator: Any, bucket: str) -> dict[str, Any]:
    """GCS requests of what the hourly steps do with the object store besides Spark's reads
    and writes and the warehouse's loads, for the day's 24 hours, per phase:

    - ``build reads before Spark``: the build's :func:`list_sites`, :func:`landed_hours` and
      :func:`verify_landed` (``lib/build/hourly.py`` steps 1-2);
    - ``stage steps' manifests and bytes``: per hour and kind, the hour manifest and the bytes
      of its files, as ``warehouse/pageviews_stage`` and ``pageviews_sample_stage`` read them
      for their loads and metadata.

    Returns:
        ``{"deliveries", "phases": {phase: {operation: requests, "total": n}}, "seconds"}``.
    """
    from bq_platform.lib.landing.deliveries import landed_hours, verify_landed
    from bq_platform.lib.core.hours import day_hours
    from bq_platform.lib.landing.index import list_sites
    from bq_platform.lib.core.manifest_reads import read_hour_manifests, stage_bytes
    from bq_platform.lib.storage.gcs import GCSObjectStore
    from bq_platform.lib.publish.protocol import KINDS

    hours = day_hours(DAY)
    phases: dict[str, dict[str, int]] = {}
    seconds: dict[str, float] = {}
    session = RecordingSession()
    gcs = GCSObjectStore(bucket, gcs_emulator.client(session))
    session.calls.clear()

    started = time.monotonic()
    found = landed_hours(gcs, list_sites(gcs), hours)
    every = [d for deliveries, _ in found.values() for d in deliveries]
    verify_landed(gcs, every)
    phases["build reads before Spark"] = count_object_calls(session.calls)
    seconds["build reads before Spark"] = round(time.monotonic() - started, 2)

    session.calls.clear()
    started = time.monotonic()
    for kind in KINDS:  # as each stage step: its hours' manifests, then their bytes
        for hour, manifest in read_hour_manifests(gcs, hours).items():
            if manifest is None:
                raise RuntimeError(f"{gcs.uri('')}: no hour manifest for {hour:%Y-%m-%dT%H}")
            stage_bytes(gcs, manifest, kind)
    phases["stage steps' manifests and bytes"] = count_object_calls(session.calls)
    seconds["stage steps' manifests and bytes"] = round(time.monotonic() - started, 2)
    session.close()
    return {"deliveries": len(every), "phases": phases, "seconds": seconds}


def _run_day(warehouse: Any, session: MeteredSession, day: _Day, run_id: str) -> dict[str, int]:
    """One run of the day through the production adapter; ``{"<step>:<action>": count}``.

    Raises:
        RuntimeError: if a table's rows differ from the manifests or the day is incomplete.
    """
    from bq_platform.lib.core.accounting import audit_records
    from bq_platform.lib.core.hours import day_hours
    from bq_platform.lib.core.manifest_reads import read_hour_manifests
    from bq_platform.lib.publish.protocol import (
        KINDS,
        day_completeness,
        load_stage_hours,
        publish_days,
    )
    from bq_platform.lib.publish.deadletter_table import load_day_deadletters

    hours = day_hours(DAY)
    actions: dict[str, int] = {}

    def note(step: str, action: str) -> None:
        actions[f"{step}:{action}"] = actions.get(f"{step}:{action}", 0) + 1

    session.phase("audit")
    counts = [(day.uploaded[h].counts, day.uploaded[h].fingerprint) for h in hours]
    warehouse.replace_audit_rows(hours, [r for c, f in counts for r in audit_records(c, f, run_id)])
    session.phase("stage loads")
    manifests = list(read_hour_manifests(day.gcs, hours).values())
    by_kind = load_stage_hours(
        warehouse, day.gcs, manifests, dict.fromkeys(KINDS, "stage"), run_id=run_id
    )
    for kind in KINDS:
        for result in by_kind[kind]:
            if not result.matches:
                raise RuntimeError(
                    f"{result.table}: {result.table_rows} rows, expected {result.expected_rows}"
                )
            note("load", result.outcome.action)
    session.phase("day completeness")
    gates = {kind: day_completeness(warehouse, day.gcs, DAY, kind) for kind in KINDS}
    for kind, gate in gates.items():
        if not gate.complete:
            raise RuntimeError(f"{kind} day incomplete: {gate.describe()}")
    session.phase("publish")
    for kind in KINDS:
        (published,) = publish_days(
            warehouse,
            [gates[kind]],
            kind,
            asset="day",
            run_id=run_id,
            require_partition_filter=False,
        )
        if published.partition_rows != published.expected_rows:
            raise RuntimeError(
                f"{kind}: {published.partition_rows} rows published, "
                f"expected {published.expected_rows}"
            )
        note("publish", published.outcome.action)
    session.phase("dead letters")
    dead = load_day_deadletters(warehouse, day.gcs, DAY, asset="dl", run_id=run_id)
    if not dead.matches:
        raise RuntimeError(
            f"dead letters: {dead.partition_rows} rows, expected {dead.expected_rows}"
        )
    note("deadletters", dead.outcome.action)
    return actions


@contextlib.contextmanager
def _emulators(work: Path) -> Iterator[tuple[Any, Any]]:
    from bq_platform_tests.emulators import running_bq_emulator, running_gcs_emulator

    (work / "gcs").mkdir()
    (work / "bq").mkdir()
    with (
        running_gcs_emulator(work / "gcs") as gcs,
        running_bq_emulator(work / "bq", gcs.storage_root) as bq,
    ):
        yield gcs, bq


def measure(work: Path | None = None, logs: Path = DEFAULT_LOGS, every: int = 1) -> dict:
    """Run the day twice on the emulators and count the warehouse requests of each run.

    Args:
        work: an empty or new folder for the emulators' data and logs and the lake (default:
            a temporary folder, removed afterwards).
        logs: the bundled logs folder (``<site>/<file>.log.gz``).
        every: keep every ``every``-th line of the NASA log (1: all of it).

    Returns:
        ``{"day", "site", "lines", "every", "build_s", "runs", "objects", "met"}``:
        ``runs[0]`` is the first run and ``runs[1]`` the re-run, each ``{"name", "seconds",
        "actions", "adapter", **http_counts.count_calls(...)}``; ``objects``: the GCS requests
        of :func:`_object_requests`; ``met``: both runs meet the target.

    Raises:
        RuntimeError: if an emulator does not start or the day does not come out right.
    """
    from bq_platform_tests.bigquery_shim import BigQueryShim
    from bq_platform_tests.emulators import unique_name

    with contextlib.ExitStack() as stack:
        if work is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bqp-http-")))
        work.mkdir(parents=True, exist_ok=True)
        gcs_emulator, bq_emulator = stack.enter_context(_emulators(work))
        started = time.monotonic()
        day = _build_day(work, logs, every, gcs_emulator)
        build_s = time.monotonic() - started
        objects = _object_requests(gcs_emulator, day.gcs.bucket_name)
        shim = BigQueryShim(bq_emulator.endpoint, bq_emulator.project)
        stack.callback(shim.close)
        dataset = unique_name("bench")
        runs: list[dict] = []
        known_jobs: dict[str, str | None] = {}
        for name, run_id in (("first run", "r1"), ("re-run", "r2")):
            session = MeteredSession()
            session.responders.append(shim)
            warehouse = bq_emulator.warehouse(dataset, session)  # as test_emulator_day.py
            started = time.monotonic()
            actions = _run_day(warehouse, session, day, run_id)
            seconds = time.monotonic() - started
            counted = count_calls(session.calls, session.answers, session.phase_starts, known_jobs)
            known_jobs.update(job_tables(session.calls, session.answers))
            adapter = {
                "metadata_requests": dict(warehouse.metadata_requests),
                "partition_reads": dict(warehouse.partition_reads),
                "rows_listed": dict(warehouse.rows_listed),
                "dataset_requests": warehouse.dataset_requests,
            }
            counted["summary"]["adapter_metadata_max"] = max(
                adapter["metadata_requests"].values(), default=0
            )
            runs.append(
                {"name": name, "seconds": round(seconds, 1), "actions": actions}
                | {"adapter": adapter, **counted}
            )
            session.close()  # warehouse.close() expects the client's own AuthorizedSession
    return {
        "day": DAY.isoformat(),
        "site": NASA,
        "lines": day.lines,
        "every": every,
        "build_s": round(build_s, 1),
        "runs": runs,
        "objects": objects,
        "met": all(r["summary"]["met"] for r in runs),
    }


def _bytes(value: int | None) -> str:
    return "not reported" if value is None else f"{value:,}"


def summary_text(result: dict) -> str:
    """A few lines per run for the console."""
    lines = [
        f"Warehouse requests at the HTTP layer (bqemulator + gcp-storage-emulator), "
        f"{result['site']} {result['day']}, {result['lines']:,} lines "
        f"(build {result['build_s']} s):"
    ]
    for run in result["runs"]:
        s = run["summary"]
        jobs = ", ".join(f"{k} {v}" for k, v in s["jobs_by_type"].items()) or "none"
        lines += [
            f"  {run['name']} ({run['seconds']} s, {run['requests']} requests, "
            f"{', '.join(f'{k} {v}' for k, v in run['actions'].items())}):",
            f"    {s['tables']} tables; whole-table metadata requests per table max "
            f"{s['table_metadata_max']} (adapter's counter max {s['adapter_metadata_max']}; "
            f"writes max {s['metadata_writes_max']}), partition gets {s['partition_gets']}, all "
            f"tables.* max {s['metadata_max']}, total {s['metadata_total']}; over 1: "
            f"{len(s['tables_over_target'])} tables",
            f"    tabledata.list (free row reads): {s['tabledata_lists']}",
            f"    jobs.insert {s['jobs_total']} ({jobs}), max {s['jobs_max']} per table; "
            f"jobs.get {s['jobs_get']}; query jobs {s['query_jobs']}",
            f"    checks: {s['check_query_jobs']} query jobs {s['checks_by_phase']}; bytes billed "
            f"{_bytes(s['check_bytes_billed'])}, processed {_bytes(s['check_bytes_processed'])}"
            f" (BigQuery minimum {s['check_bytes_min_bigquery']:,})",
        ]
    objects = result.get("objects")
    if objects:
        lines.append(f"Object-store requests (GCS JSON API), {objects['deliveries']} deliveries:")
        for phase, counts in objects["phases"].items():
            ops = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "total")
            lines.append(f"  {phase}: {counts['total']} ({ops}; {objects['seconds'][phase]} s)")
    verdict = "met" if result["met"] else "NOT met"
    lines.append(f"  target (1 metadata request per table per run, checks bill 0 bytes): {verdict}")
    return "\n".join(lines)


def main(argv: Iterable[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=1, help="keep every N-th line (1: all)")
    parser.add_argument("--logs", type=Path, default=DEFAULT_LOGS)
    parser.add_argument("--work", type=Path, default=None, help="work folder (default: temp)")
    parser.add_argument("--json", action="store_true", help="also print the JSON document")
    args = parser.parse_args(list(argv) if argv is not None else None)
    result = measure(args.work, args.logs, args.every)
    print(summary_text(result))
    if args.json:
        print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
