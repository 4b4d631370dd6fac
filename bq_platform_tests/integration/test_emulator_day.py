"""A whole UTC day end to end on the emulators: hourly loads, the daily publish, the checks.

A real slice of the bundled NASA log (every :data:`EVERY`-th line of the file, which covers
1995-08-01 04:00..18:52 UTC) is landed and built by Spark for all 24 hours of the day (hours
without lines are built as empty hours); the Parquet files and manifests go to
gcp-storage-emulator through ``GCSObjectStore``; then, through the production
``BigQueryWarehouse`` on bqemulator:

1. the audit rows of the 24 hours, and ``load_stage_hours`` of the 24 hours, full and sample;
2. ``day_completeness``: every hour built, balanced, audited, stage rows as written;
3. ``publish_days``: one WRITE_TRUNCATE copy of the 24 stage tables into
   ``pageviews$19950801`` (and ``pageviews_sample$19950801``); bqemulator cannot copy into a
   partition decorator (GAP-DECORATOR), so :class:`~bq_platform_tests.bigquery_shim.
   BigQueryShim` runs it as BigQuery documents it;
4. the checks: the day partition holds the sum of its hours (the ``partition_matches_stage``
   check), row for row; every landed line is accounted for;
5. the day's dead letters: one WRITE_TRUNCATE load of the 24 hours' dead-letter files into
   ``pageview_deadletters$19950801``; a re-run submits nothing;
6. from the recorded HTTP calls of the first run and the re-run: at most one
   table-metadata request (``tables.get``/``insert``/``patch`` of a whole table) per table
   per run, and no query job that reads (the checks and the ledger read rows with the free
   ``tabledata.list``);
7. the daily rollups: built by Spark from the files of the hours ``pageviews$19950801`` was
   published from (``published_day_inputs`` through the production adapters), one
   WRITE_TRUNCATE load per table into ``pageviews_daily_by_site$19950801`` and
   ``pageviews_daily_by_page$19950801`` (bqemulator cannot load into a decorator:
   GAP-DECORATOR, answered by the shim), no query job to build them; their checks
   (``compare_rollup``, one query job per table, run by the emulator itself) pass, the rollups
   equal the test's own count from the Parquet files, a tampered row is caught, and a re-run
   submits nothing.

GAP-HIVE work-around as in ``test_emulator_hourly_path.py`` (keys without ``key=value``), for
the rollups' files too (``staging/rollups/<table>/day=<D>/...``).
"""

import collections
import dataclasses
import datetime as dt
import gzip
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest

from bq_platform.defs.warehouse.rollups import COUNTED, ROLLUP_CHECK, VISITORS_CHECK, rollup_check
from bq_platform.lib.core.accounting import audit_records
from bq_platform.lib.core.hours import day_hours
from bq_platform.lib.core.manifest import HourManifest, read_hour_manifest
from bq_platform.lib.daily_build.build import build_rollups
from bq_platform.lib.daily_build.rollup_files import RollupFiles, rollup_inputs
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.publish.deadletter_table import load_day_deadletters
from bq_platform.lib.publish.protocol import (
    KINDS,
    day_completeness,
    expected_rows,
    load_stage_hours,
    publish_days,
)
from bq_platform.lib.publish.rollups import publish_rollups, published_day_inputs
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse
from bq_platform.lib.warehouse.schema import (
    DAILY_BY_PAGE_TABLE,
    DAILY_BY_SITE_TABLE,
    DEADLETTERS_TABLE,
    ROLLUP_TABLES,
    stage_spec,
)
from bq_platform_tests import emulators, http_recording
from bq_platform_tests.bigquery_shim import BigQueryShim
from bq_platform_tests.integration.test_emulator_hourly_path import (
    _utc_hour,
    emulator_key,
    upload_hour,
)

pytestmark = [pytest.mark.emulator, pytest.mark.spark]

gcs_emulator = emulators.gcs_emulator  # one of each emulator for this module
bq_emulator = emulators.bq_emulator

NASA = "ksc.nasa.gov"
DAY = dt.date(1995, 8, 1)
#: Keep every EVERY-th line of the log: ~4,250 real lines spread over the day's 15 hours.
EVERY = 8
PUBLISHED = {"full": "pageviews", "sample": "pageviews_sample"}
#: Lines no server writes, for the dead-letter table.
GARBAGE = [b"not a log line", b'1.2.3.4 - - [01/Aug/1995:10:00:00 -0400] "GET / HTTP/1.0" 2000 1']


def thin_log(source: Path, target: Path, every: int) -> dict[dt.datetime, int]:
    """Write every ``every``-th line of ``source`` to ``target`` (gzip), with
    :data:`GARBAGE` in the middle; lines per UTC hour.

    A line without a readable timestamp counts in the hour of the line before it.
    """
    lines = gzip.decompress(source.read_bytes()).split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    kept = lines[::every]
    kept[len(kept) // 2 : len(kept) // 2] = GARBAGE
    target.write_bytes(gzip.compress(b"".join(line + b"\n" for line in kept)))
    per_hour: dict[dt.datetime, int] = {}
    current = None
    for line in kept:
        current = _utc_hour(line) or current
        assert current is not None
        per_hour[current] = per_hour.get(current, 0) + 1
    return per_hour


@pytest.fixture(scope="module")
def built_day(
    spark: Any, access_logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[LocalObjectStore, dict[dt.datetime, int], dict[dt.datetime, HourManifest]]:
    root = tmp_path_factory.mktemp("e2e-day")
    (source,) = (access_logs / NASA).glob("*.log.gz")
    log_slice = root / "nasa-thin.log.gz"
    lines = thin_log(source, log_slice, EVERY)
    assert {h.date() for h in lines} == {DAY} and len(lines) >= 12  # most of the day has data
    store = LocalObjectStore(root / "lake")
    land_file(store, NASA, log_slice)
    manifests = build_hours(spark, store, day_hours(DAY), attempt_id="day-1", visitor_key="k")
    return store, lines, {m.hour: m for m in manifests}


def test_whole_day_on_the_emulators(
    spark: Any,
    built_day: tuple[LocalObjectStore, dict[dt.datetime, int], dict[dt.datetime, HourManifest]],
    bq_emulator: emulators.BigQueryEmulator,
    gcs_emulator: emulators.GCSEmulator,
) -> None:
    local, lines, manifests = built_day
    built_manifests = dict(manifests)
    hours = day_hours(DAY)
    assert sorted(manifests) == hours
    bucket = emulators.unique_name("day").replace("_", "-")
    gcs_emulator.client().create_bucket(bucket)
    gcs = GCSObjectStore(bucket, gcs_emulator.client())
    uploaded = {h: upload_hour(local, gcs, manifests[h]) for h in hours}
    shim = BigQueryShim(bq_emulator.endpoint, bq_emulator.project)
    dataset = emulators.unique_name("day")

    def run() -> tuple[BigQueryWarehouse, http_recording.RecordingSession]:
        session = shim.session()
        return bq_emulator.warehouse(dataset, session), session

    # 1. The hourly steps: audit rows, then the loads of 24 hours x 2 kinds.
    warehouse, session = run()
    audit = [
        row
        for h in hours
        for row in audit_records(uploaded[h].counts, uploaded[h].fingerprint, "r1")
    ]
    warehouse.replace_audit_rows(hours, audit)
    manifests = [read_hour_manifest(gcs, hour) for hour in hours]
    assert manifests == [uploaded[hour] for hour in hours]
    by_kind = load_stage_hours(
        warehouse, gcs, manifests, dict.fromkeys(KINDS, "stage"), run_id="r1"
    )
    for kind in KINDS:
        for manifest, result in zip(manifests, by_kind[kind], strict=True):
            assert result.outcome.action == "submitted" and result.matches
            assert result.table_rows == result.outcome.rows == expected_rows(manifest, kind)

    # 2. The day's gate: all 24 hours ready.
    gates = {kind: day_completeness(warehouse, gcs, DAY, kind) for kind in KINDS}
    assert all(gate.complete for gate in gates.values()), {
        k: g.describe() for k, g in gates.items()
    }

    # 3. The daily publish: one copy per kind, 24 sources, into the day partition.
    published = {
        kind: publish_days(
            warehouse, [gates[kind]], kind, asset="day", run_id="r1", require_partition_filter=False
        )[0]
        for kind in KINDS
    }
    copies = [
        b["configuration"]["copy"] for b in session.job_inserts() if "copy" in b["configuration"]
    ]
    assert [c["destinationTable"]["tableId"] for c in copies] == [
        f"{PUBLISHED[kind]}$19950801" for kind in KINDS
    ]
    assert all(len(c["sourceTables"]) == 24 for c in copies)
    assert shim.answered["copy"] == 2

    first_run_calls = list(session.calls)  # steps 1-3; step 4 is the test's own reading

    # 4. The checks: day = sum of its hours, row for row; every landed line accounted for.
    for kind, result in published.items():
        hour_rows = [warehouse.table_rows(stage_spec(kind, h).name) for h in hours]
        want = sum(expected_rows(uploaded[h], kind) for h in hours)
        assert result.outcome.action == "submitted" and result.hours == 24
        assert result.partition_rows == result.expected_rows == sum(hour_rows) == want
        assert result.outcome.rows == want
        assert warehouse.table_rows(PUBLISHED[kind]) == want  # nothing outside the day
        day_ids = _event_ids(shim, f"{dataset}.{PUBLISHED[kind]}")
        stage_ids = sorted(
            i for h in hours for i in _event_ids(shim, f"{dataset}.{stage_spec(kind, h).name}")
        )
        assert day_ids == stage_ids and len(set(day_ids)) == want
    assert published["full"].partition_rows > published["sample"].partition_rows > 0
    stored = warehouse.audit_rows(hours[0], hours[-1] + dt.timedelta(hours=1))
    per_hour = {h: sum(r["source_lines"] for r in stored if r["hour"] == h) for h in hours}
    assert per_hour == {h: lines.get(h, 0) for h in hours}
    for row in stored:
        assert row["source_lines"] == sum(
            row[c]
            for c in ("pageviews", "non_page_hits", "rejected", "duplicates", "out_of_window")
        )

    # 5. The day's dead letters: one load of its 24 hours' files into the day partition.
    step_5 = len(session.calls)
    dead = load_day_deadletters(warehouse, gcs, DAY, asset="dl", run_id="r1")
    assert dead.outcome.action == "submitted" and dead.hours == 24 and dead.files >= 24
    assert dead.matches and dead.partition_rows == dead.expected_rows >= len(GARBAGE)
    assert dead.rejected_by_reason.get("malformed", 0) >= 1
    assert dead.rejected_by_reason.get("bad_status", 0) >= 1
    sql = f"SELECT raw FROM `{shim.project}.{dataset}.{DEADLETTERS_TABLE}`"
    raws = [r["raw"] for r in shim.backend.query(sql).result()]
    assert len(raws) == dead.expected_rows and {g.decode() for g in GARBAGE} <= set(raws)
    first_run_calls += session.calls[step_5:]

    # A re-run (a new run, same content) submits nothing and finds the same day.
    rerun, rerun_session = run()
    assert load_day_deadletters(rerun, gcs, DAY, asset="dl", run_id="r2").outcome.action == (
        "skipped"
    )
    for kind in KINDS:
        gate = day_completeness(rerun, gcs, DAY, kind)
        (again,) = publish_days(
            rerun, [gate], kind, asset="day", run_id="r2", require_partition_filter=False
        )
        assert again.outcome.action == "skipped"
        assert again.partition_rows == published[kind].partition_rows
    assert rerun_session.job_inserts() == []

    # 6. Issue 9: one table-metadata request per table per run; checks bill 0 bytes.
    for calls in (first_run_calls, rerun_session.calls):
        metadata = _table_metadata_requests(calls)
        assert len(metadata) >= 4 and max(metadata.values()) == 1, metadata
        assert [q for q in _query_statements(calls) if q in ("SELECT", "WITH")] == []
    assert len(_table_metadata_requests(first_run_calls)) == 2 * 24 + 5  # + ledger, audit...
    listed = [unquote(c.path) for c in rerun_session.calls if c.path.endswith("/data")]
    assert len(listed) == 3  # the ledger once, the audit partition once per gate

    # 7. The rollups of the published day: Spark, then one load per table, then the checks.
    warehouse, session = run()
    inputs = published_day_inputs(warehouse, gcs, DAY, None)
    assert inputs.hours == [f"1995-08-01T{h:02d}" for h in range(24)]
    # Spark reads the local files (no GCS connector offline); same hours, same content.
    local_inputs = rollup_inputs(DAY, built_manifests, ROLLUP_VERSION)
    assert local_inputs.fingerprint == inputs.fingerprint
    built = build_rollups(spark, local, local_inputs)
    rollups = [upload_rollup(local, gcs, built[table]) for table in ROLLUP_TABLES]
    loads_before = shim.answered["load"]
    results = publish_rollups(
        warehouse, gcs, rollups, asset="rollups", run_id="r1", require_partition_filter=False
    )
    loads = [b["configuration"]["load"] for b in session.job_inserts()]
    assert [load["destinationTable"]["tableId"] for load in loads] == [
        f"{table}$19950801" for table in ROLLUP_TABLES
    ]
    assert all(load["writeDisposition"] == "WRITE_TRUNCATE" for load in loads)
    assert [load["sourceUris"] for load in loads] == [
        [gcs.uri(key) for key in files.files] for files in rollups
    ]
    # building them reads nothing with a query (the ledger's INSERT is the publish record)
    assert [q for q in _query_statements(session.calls) if q in ("SELECT", "WITH")] == []
    assert shim.answered["load"] - loads_before == 2  # GAP-DECORATOR: the shim ran them
    for result in results:
        assert result.outcome.action == "submitted"
        assert result.partition_rows == result.outcome.rows == result.files.rows > 0
    rows = {table: _rollup_rows(shim, f"{dataset}.{table}") for table in ROLLUP_TABLES}
    assert rows == _expected_rollups(local, local_inputs.files)
    step_7 = len(session.calls)
    for table in ROLLUP_TABLES:
        found = warehouse.compare_rollup(table, DAY, "human")
        assert found.keys_compared == len(rows[table]) and found.examples == ()
        destination = f"{table}$19950801"
        checks = [
            rollup_check(found, ROLLUP_CHECK, COUNTED[table], destination),
            rollup_check(found, VISITORS_CHECK, ("human_visitors",), destination),
        ]
        assert all(check.passed for check in checks), [c.description for c in checks]
    assert _query_statements(session.calls[step_7:]) == ["WITH", "WITH"]  # one per table

    # A tampered row fails its check, naming the page and both numbers.
    (site, page), visitors = next(iter(rows[DAILY_BY_PAGE_TABLE].items()))
    shim.backend.query(
        f"UPDATE `{shim.project}.{dataset}.{DAILY_BY_PAGE_TABLE}` SET human_visitors = "
        f"human_visitors + 5 WHERE site = '{site}' AND page_path = '{page}'"
    ).result()
    tampered = warehouse.compare_rollup(DAILY_BY_PAGE_TABLE, DAY, "human")
    assert tampered.differences == {"human_pageviews": 0, "human_visitors": 1}
    check = rollup_check(tampered, VISITORS_CHECK, ("human_visitors",), "by_page$19950801")
    assert not check.passed
    assert f"human_visitors {visitors[1] + 5} in the rollup, {visitors[1]} published" in (
        check.description
    )

    # A re-run of the same content submits nothing.
    rerun, rerun_session = run()
    again = publish_rollups(
        rerun, gcs, rollups, asset="rollups", run_id="r2", require_partition_filter=False
    )
    assert [r.outcome.action for r in again] == ["skipped", "skipped"]
    assert rerun_session.job_inserts() == []
    shim.close()


def upload_rollup(local: LocalObjectStore, gcs: GCSObjectStore, files: RollupFiles) -> RollupFiles:
    """Upload a rollup's files (GAP-HIVE: under :func:`emulator_key`) and its manifest (at its
    real key, naming the uploaded keys); return the manifest as uploaded."""
    for key in files.files:
        gcs.write_bytes(emulator_key(key), local.read_bytes(key))
    uploaded = dataclasses.replace(files, files=tuple(emulator_key(k) for k in files.files))
    gcs.write_text(uploaded.key, uploaded.to_json())
    return uploaded


def _expected_rollups(store: LocalObjectStore, keys: tuple[str, ...]) -> dict[str, dict]:
    """Both rollups of the pageview Parquet files ``keys``, counted here in plain Python:
    by site ``site -> (human, bot, human visitors)``, by page ``(site, page) -> (human, human
    visitors)``."""
    sites: dict[str, list] = collections.defaultdict(lambda: [0, 0, set()])
    pages: dict[tuple[str, str], list] = collections.defaultdict(lambda: [0, set()])
    for key in keys:
        for row in pq.read_table(store.uri(key)).to_pylist():
            site = sites[row["site"]]
            if row["traffic_class"] == "human":
                site[0] += 1
                site[2].add(row["visitor_id"])
                page = pages[(row["site"], row["page_path"])]
                page[0] += 1
                page[1].add(row["visitor_id"])
            else:
                site[1] += 1
    return {
        DAILY_BY_SITE_TABLE: {k: (h, b, len(v)) for k, (h, b, v) in sites.items()},
        DAILY_BY_PAGE_TABLE: {k: (h, len(v)) for k, (h, v) in pages.items()},
    }


def _rollup_rows(shim: BigQueryShim, table: str) -> dict:
    """A rollup table's rows as :func:`_expected_rollups` gives them (straight to the
    emulator); every row of DAY."""
    rows = list(shim.backend.query(f"SELECT * FROM `{shim.project}.{table}`").result())
    assert {r["event_date"] for r in rows} == {DAY}
    if table.endswith(DAILY_BY_SITE_TABLE):
        return {
            r["site"]: (r["human_pageviews"], r["bot_pageviews"], r["human_visitors"]) for r in rows
        }
    return {(r["site"], r["page_path"]): (r["human_pageviews"], r["human_visitors"]) for r in rows}


_TABLE = re.compile(r"/datasets/[^/]+/tables/([^/$]+)$")


def _table_metadata_requests(calls: list[http_recording.HttpCall]) -> dict[str, int]:
    """Whole-table ``tables.get``/``insert``/``patch`` requests per table (a partition's
    ``tables.get``, ``table$YYYYMMDD``, is a separate count and not included)."""
    counts: collections.Counter[str] = collections.Counter()
    for call in calls:
        path = unquote(call.path)
        if match := _TABLE.search(path):
            counts[match[1]] += 1
        elif call.method == "POST" and path.endswith("/tables") and isinstance(call.body, dict):
            counts[call.body["tableReference"]["tableId"]] += 1
    return dict(counts)


def _query_statements(calls: list[http_recording.HttpCall]) -> list[str]:
    """The first keyword of every query job inserted (SELECT, INSERT, MERGE...)."""
    return [
        call.body["configuration"]["query"]["query"].split()[0].upper()
        for call in calls
        if call.method == "POST"
        and call.path.endswith("/jobs")
        and isinstance(call.body, dict)
        and "query" in call.body.get("configuration", {})
    ]


def _event_ids(shim: BigQueryShim, table: str) -> list[str]:
    """The test's own scan of a table's event IDs, sorted (straight to the emulator)."""
    sql = f"SELECT event_id FROM `{shim.project}.{table}`"
    return sorted(r["event_id"] for r in shim.backend.query(sql).result())
