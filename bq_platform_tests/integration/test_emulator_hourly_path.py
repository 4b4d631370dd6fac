"""The hourly path end to end on the emulators, with a slice of the real NASA log.

real log slice -> ``land_file`` -> ``build_hours`` (Spark, local store) -> Parquet and hour
manifests uploaded through ``GCSObjectStore`` (gcp-storage-emulator) -> ``load_stage_hours``
through ``BigQueryWarehouse`` (bqemulator) reading the ``gs://`` URIs the manifest names ->
what the hourly checks assert: ``stage_matches_manifest`` (stage rows from table metadata =
manifest rows, full and sample), the accounting identity per site and hour, the audit rows
round-trip, and the day's completeness gate for the built hours; a re-run submits no job.
New content replacing a stage table, the next generation and the daily publish are the
contract suite's (``lib/warehouse/test_contract.py``) and ``test_emulator_day.py``'s.

Why the build runs on a local store: Spark has no GCS connector offline, so it cannot write
``gs://``; the files it wrote are uploaded byte for byte through the production adapter.

GAP-HIVE (bqemulator): a ``gs://`` path with ``key=value`` folders is read with DuckDB's hive
partitioning, which adds the keys (``attempt``, ``hour``) as extra columns, and Parquet columns
are inserted by position, not by name. Real BigQuery ignores the path unless the load asks for
``hivePartitioningOptions``, and our layout (``attempt=<id>/.../hour=<H>/``) relies on that.
Work-around, in this test only: the files go to GCS under keys with ``=`` replaced by ``-``, and
the uploaded manifest names those keys (``dataclasses.replace``). The real keys are loaded on
real BigQuery by ``test_gcp_real.py``. ``test_emulator_still_reads_key_value_folders_as_columns``
fails once the emulator is fixed, so that the work-around can go.
"""

import dataclasses
import datetime as dt
import gzip
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from bq_platform.lib.core.accounting import audit_records, unbalanced
from bq_platform.lib.core.hours import day_hours
from bq_platform.lib.core.job_ids import hour_partition, job_id
from bq_platform.lib.core.layout import hour_manifest_key
from bq_platform.lib.core.manifest import HourManifest, read_hour_manifest
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.hourly_build.transform import PAGEVIEW_COLUMN_NAMES
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.publish.protocol import (
    KINDS,
    day_completeness,
    expected_rows,
    load_stage_hours,
)
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.base import JobFailedError
from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
from bq_platform.lib.warehouse.schema import stage_spec
from bq_platform_tests import emulators
from bq_platform_tests.bigquery_shim import BigQueryShim
from bq_platform_tests.emulators import BigQueryEmulator, GCSEmulator
from bq_platform_tests.http_recording import RecordingSession

pytestmark = [pytest.mark.emulator, pytest.mark.spark]

# The emulator fixtures (one gcp-storage-emulator and one bqemulator per session on loopback).
gcs_emulator = emulators.gcs_emulator
bq_emulator = emulators.bq_emulator
gcs_bucket = emulators.gcs_bucket
bq_dataset = emulators.bq_dataset

NASA = "ksc.nasa.gov"
DAY = dt.date(1995, 8, 1)
#: The hours built and loaded: 1995-08-01 04:00..06:00 UTC (00:00..02:59 in the log's -0400).
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (4, 5, 6)]
#: One more hour is landed but not built: the build must take only the hours it is given.
LANDED_HOURS = [*HOURS, HOURS[-1] + dt.timedelta(hours=1)]
ATTEMPT = "e2e-attempt-1"
VISITOR_KEY = "emulator-e2e-visitor-key"
ASSET = {"full": "pageviews_stage", "sample": "pageviews_sample_stage"}
RUN_ID = "run-e2e-0001"

_CLF_TIMESTAMP = re.compile(rb"\[(\d{2}/[A-Za-z]{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\]")


def _utc_hour(line: bytes) -> dt.datetime | None:
    """UTC hour of a log line's timestamp, parsed here independently of the library."""
    match = _CLF_TIMESTAMP.search(line)
    if match is None:
        return None
    ts = dt.datetime.strptime(match[1].decode(), "%d/%b/%Y:%H:%M:%S %z").astimezone(dt.UTC)
    return ts.replace(minute=0, second=0, microsecond=0)


def slice_log(source: Path, target: Path, hours: list[dt.datetime]) -> dict[dt.datetime, int]:
    """Write the contiguous run of ``source``'s lines that covers ``hours`` to ``target`` (gzip).

    Returns:
        Lines per UTC hour of the slice; a line without a readable timestamp counts in the hour
        of the line before it (the landing rule).
    """
    lines = gzip.decompress(source.read_bytes()).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    stamped = [(i, h) for i, line in enumerate(lines) if (h := _utc_hour(line)) in hours]
    first, last = stamped[0][0], stamped[-1][0]
    chosen = lines[first : last + 1]
    target.write_bytes(gzip.compress(b"".join(line + b"\n" for line in chosen)))
    per_hour: dict[dt.datetime, int] = {}
    current = stamped[0][1]
    for line in chosen:
        current = _utc_hour(line) or current
        per_hour[current] = per_hour.get(current, 0) + 1
    return per_hour


@dataclasses.dataclass(frozen=True)
class Built:
    """What the Spark build left in the local store."""

    store: LocalObjectStore
    slice_lines: dict[dt.datetime, int]
    manifests: dict[dt.datetime, HourManifest]


@pytest.fixture(scope="module")
def built(spark: Any, access_logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    root = tmp_path_factory.mktemp("e2e-hourly")
    (source,) = (access_logs / NASA).glob("*.log.gz")
    log_slice = root / "nasa-slice.log.gz"
    slice_lines = slice_log(source, log_slice, LANDED_HOURS)
    store = LocalObjectStore(root / "lake")
    landed = land_file(store, NASA, log_slice)
    assert {f.manifest.hour: f.manifest.lines for f in landed} == slice_lines
    manifests = build_hours(spark, store, HOURS, attempt_id=ATTEMPT, visitor_key=VISITOR_KEY)
    return Built(store, slice_lines, {m.hour: m for m in manifests})


def emulator_key(key: str) -> str:
    """GAP-HIVE: the object key without ``key=value`` folders (``=`` -> ``-``)."""
    return key.replace("=", "-")


def upload_hour(
    local: LocalObjectStore, gcs: GCSObjectStore, manifest: HourManifest
) -> HourManifest:
    """Upload the files ``manifest`` names and the manifest itself to GCS; return it as uploaded.

    GAP-HIVE: files go under :func:`emulator_key` and the uploaded manifest names those keys;
    the manifest itself keeps its real key (``staging/pageviews/hour=<H>/_MANIFEST.json``).
    """

    def upload(keys: tuple[str, ...]) -> tuple[str, ...]:
        for key in keys:
            gcs.write_bytes(emulator_key(key), local.read_bytes(key))
        return tuple(emulator_key(key) for key in keys)

    uploaded = dataclasses.replace(
        manifest,
        full_files=upload(manifest.full_files),
        sample_files=upload(manifest.sample_files),
        deadletter_files=upload(manifest.deadletter_files),
    )
    gcs.write_text(hour_manifest_key(manifest.hour), uploaded.to_json())
    return uploaded


def files_of(manifest: HourManifest, kind: str) -> tuple[str, ...]:
    return manifest.full_files if kind == "full" else manifest.sample_files


def parquet_rows(store: LocalObjectStore | GCSObjectStore, keys: tuple[str, ...]) -> list[dict]:
    """The pageview rows of Parquet files in ``store``, by event_id."""
    rows = []
    for key in keys:
        rows += pq.read_table(io.BytesIO(store.read_bytes(key))).to_pylist()
    return sorted(rows, key=lambda r: r["event_id"])


def stage_table_rows(warehouse: BigQueryWarehouse, table: str) -> list[dict]:
    """All rows of a stage table, by event_id (a scan: the test's own look at the content)."""
    sql = f"SELECT {', '.join(PAGEVIEW_COLUMN_NAMES)} FROM `{warehouse.table_id(table)}`"
    rows = [dict(r.items()) for r in warehouse.client.query(sql).result()]
    return sorted(rows, key=lambda r: r["event_id"])


@pytest.fixture
def gcs_store(gcs_emulator: GCSEmulator, gcs_bucket: str) -> GCSObjectStore:
    return GCSObjectStore(gcs_bucket, gcs_emulator.client())


@pytest.fixture
def make_warehouse(bq_emulator: BigQueryEmulator, bq_dataset: str) -> Iterator[Any]:
    """A new warehouse object (= a new run) on the test's dataset, over a recording session.

    Job IDs are project-wide and the real log gives the same fingerprints in every test, so
    each test's dataset gets its own job ID prefix (what production does per environment).
    """
    sessions: list[RecordingSession] = []

    def make(session: RecordingSession) -> BigQueryWarehouse:
        sessions.append(session)
        return bq_emulator.warehouse(bq_dataset, session, job_id_prefix=f"{bq_dataset}_")

    yield make
    for session in sessions:  # the client's own close() expects its default transport
        session.close()


def test_hourly_path_on_the_emulators_passes_the_hourly_checks(
    built: Built,
    gcs_store: GCSObjectStore,
    make_warehouse: Any,
    bq_dataset: str,
    bq_emulator: BigQueryEmulator,
) -> None:
    # The build: every hour balanced, read in full, with its landed lines as source lines.
    for hour in HOURS:
        manifest = built.manifests[hour]
        (counts,) = manifest.counts
        assert (counts.site, counts.hour) == (NASA, hour)
        assert counts.source_lines == built.slice_lines[hour] > 0
        assert counts.source_lines == (
            counts.pageviews
            + counts.non_page_hits
            + counts.rejected
            + counts.duplicates
            + counts.out_of_window
        )
        assert unbalanced(manifest.counts) == [] and manifest.file_mismatches == ()
        assert counts.lines_read == counts.source_lines
        assert manifest.rows == counts.pageviews > 0
        assert manifest.sample_rows == counts.sample_rows
        assert len(parquet_rows(built.store, manifest.full_files)) == manifest.rows
        assert len(parquet_rows(built.store, manifest.sample_files)) == manifest.sample_rows
    assert len({m.fingerprint for m in built.manifests.values()}) == len(HOURS)

    # Parquet and manifests into the GCS emulator through the production adapter.
    uploaded = {h: upload_hour(built.store, gcs_store, built.manifests[h]) for h in HOURS}
    for hour, manifest in uploaded.items():
        assert read_hour_manifest(gcs_store, hour) == manifest
        for kind in KINDS:
            keys = files_of(manifest, kind)
            assert keys and all("=" not in k for k in keys)  # GAP-HIVE work-around
            assert parquet_rows(gcs_store, keys) == parquet_rows(
                built.store, files_of(built.manifests[hour], kind)
            )

    # Loads into the stage tables of the BigQuery emulator, from the manifests read on GCS.
    session = RecordingSession()
    shim = BigQueryShim(bq_emulator.endpoint, bq_emulator.project)
    session.responders.append(shim.partition_lists())  # the audit read (GAP-DECORATOR-LIST)
    warehouse = make_warehouse(session)
    manifests = [read_hour_manifest(gcs_store, hour) for hour in HOURS]
    assert None not in manifests
    by_kind = load_stage_hours(warehouse, gcs_store, manifests, ASSET, run_id=RUN_ID)  # one step
    for kind in KINDS:
        for hour, manifest, result in zip(HOURS, manifests, by_kind[kind], strict=True):
            table = stage_spec(kind, hour).name
            want_id = job_id("load", table, hour_partition(hour), manifest.fingerprint)
            assert (result.table, result.outcome.action) == (table, "submitted")
            assert (result.outcome.job_id, result.outcome.generation) == (want_id, 0)
            # stage_matches_manifest: rows from table metadata equal the manifest's rows.
            assert result.matches
            assert result.table_rows == result.outcome.rows == expected_rows(manifest, kind)
            assert warehouse.table_rows(table) == expected_rows(manifest, kind)
    assert warehouse.table_rows(stage_spec("full", HOURS[0]).name) != warehouse.table_rows(
        stage_spec("full", HOURS[1]).name
    )  # the hours' counts differ, so a load into the wrong table would show

    # The load jobs sent: one per hour and kind, reading exactly the manifest's gs:// URIs.
    inserts = session.job_inserts()
    assert len(inserts) == len(HOURS) * len(KINDS)
    sent = {body["configuration"]["load"]["destinationTable"]["tableId"]: body for body in inserts}
    for hour in HOURS:
        for kind in KINDS:
            table = stage_spec(kind, hour).name
            load = sent[table]["configuration"]["load"]
            uris = [gcs_store.uri(k) for k in files_of(uploaded[hour], kind)]
            assert load["sourceUris"] == uris and all(u.startswith("gs://") for u in uris)
            assert (load["sourceFormat"], load["writeDisposition"]) == ("PARQUET", "WRITE_TRUNCATE")
            assert sent[table]["jobReference"]["jobId"] == f"{bq_dataset}_" + job_id(
                "load", table, hour_partition(hour), uploaded[hour].fingerprint
            )

    # The stage tables hold exactly the Parquet rows, column for column, of their own hour.
    for hour in HOURS:
        manifest = uploaded[hour]
        (counts,) = manifest.counts
        full = stage_table_rows(warehouse, stage_spec("full", hour).name)
        sample = stage_table_rows(warehouse, stage_spec("sample", hour).name)
        assert full == parquet_rows(gcs_store, manifest.full_files)
        assert sample == parquet_rows(gcs_store, manifest.sample_files)
        assert {r["event_id"] for r in sample} <= {r["event_id"] for r in full}
        assert all(hour <= r["event_ts"] < hour + dt.timedelta(hours=1) for r in full)
        assert {(r["site"], r["event_date"]) for r in full} == {(NASA, DAY)}
        assert len({r["visitor_id"] for r in full}) == counts.visitors
        assert len({r["visitor_id"] for r in sample}) == counts.sample_visitors
    assert sum(m.sample_rows for m in uploaded.values()) > 0  # a non-empty sample was loaded

    # The audit rows of the hours round-trip through the audit table; a re-run replaces them.
    audit = [
        row
        for hour in HOURS
        for row in audit_records(uploaded[hour].counts, uploaded[hour].fingerprint, RUN_ID)
    ]
    end = HOURS[-1] + dt.timedelta(hours=1)
    warehouse.replace_audit_rows(HOURS, audit)
    warehouse.replace_audit_rows(HOURS, audit)
    stored = warehouse.audit_rows(HOURS[0], end)
    assert stored == audit
    for row in stored:
        assert row["source_lines"] == built.slice_lines[row["hour"]]
        assert row["source_lines"] == sum(
            row[c]
            for c in ("pageviews", "non_page_hits", "rejected", "duplicates", "out_of_window")
        )

    # The day's gate sees the three hours complete (built, balanced, audited, stage rows as
    # written) and only the 21 others missing.
    for kind in KINDS:
        gate = day_completeness(warehouse, gcs_store, DAY, kind)
        assert set(gate.manifests) == set(HOURS)
        assert set(gate.problems) == set(day_hours(DAY)) - set(HOURS)
        assert all(p == ["not built (no hour manifest)"] for p in gate.problems.values())

    # A re-run (a new run, same manifests) submits no job and finds the same rows.
    rerun_session = RecordingSession()
    rerun = make_warehouse(rerun_session)
    by_kind = load_stage_hours(rerun, gcs_store, manifests, ASSET, run_id="run-e2e-0002")
    for kind in KINDS:
        for hour, manifest, again in zip(HOURS, manifests, by_kind[kind], strict=True):
            table = stage_spec(kind, hour).name
            assert again.outcome.action == "skipped"
            assert again.outcome.job_id == job_id(
                "load", table, hour_partition(hour), manifest.fingerprint
            )
            assert again.matches and again.table_rows == expected_rows(manifest, kind)
            assert rerun.metadata_requests[table] == 1  # one table-metadata request per run
    assert rerun_session.job_inserts() == []
    shim.close()


def test_emulator_still_reads_key_value_folders_as_columns(
    built: Built, gcs_store: GCSObjectStore, make_warehouse: Any
) -> None:
    """GAP-HIVE: with the real keys (``attempt=.../hour=...``) the emulator's load fails.

    bqemulator adds the two folder keys as columns (13 + 2 values for 13 columns). Real
    BigQuery loads these files as they are (no ``hivePartitioningOptions``). When this test
    fails, the emulator matches BigQuery and the ``emulator_key`` work-around can go.
    """
    hour = HOURS[0]
    manifest = built.manifests[hour]
    for key in manifest.full_files:
        assert "attempt=" in key and "/hour=" in key
        gcs_store.write_bytes(key, built.store.read_bytes(key))
    warehouse = make_warehouse(RecordingSession())
    columns = len(stage_spec("full", hour).columns)
    with pytest.raises(JobFailedError, match=f"{columns} columns but {columns + 2} values") as info:
        load_stage_hours(warehouse, gcs_store, [manifest], {"full": ASSET["full"]}, run_id=RUN_ID)
    assert info.value.status.error_reason == "invalid"  # + attempt, hour: the two folder keys


def test_slice_log_counts_lines_by_utc_hour(tmp_path: Path) -> None:
    """The test's own reading of the log (the expected source lines) is right."""
    source = tmp_path / "in.log.gz"
    lines = [
        b'a - - [01/Aug/1995:00:59:59 -0400] "GET /" 200 1',
        b'b - - [01/Aug/1995:01:00:00 -0400] "GET /" 200 1',
        b"garbage without a timestamp",
        b'c - - [01/Aug/1995:01:30:00 -0400] "GET /x.gif" 200 1',
        b'd - - [01/Aug/1995:03:00:00 -0400] "GET /" 200 1',
    ]
    source.write_bytes(gzip.compress(b"\n".join(lines) + b"\n"))
    target = tmp_path / "out.log.gz"
    counts = slice_log(source, target, [dt.datetime(1995, 8, 1, 5, tzinfo=dt.UTC)])
    assert counts == {dt.datetime(1995, 8, 1, 5, tzinfo=dt.UTC): 3}
    assert gzip.decompress(target.read_bytes()).split(b"\n")[:-1] == lines[1:4]
