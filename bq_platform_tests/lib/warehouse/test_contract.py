"""The warehouse contract: one set of tests, run on DuckDB and on BigQuery (bqemulator + shim).

Each test takes the ``backend`` fixture (:mod:`.contract_backends`) and asserts what both
warehouses must do, as BigQuery does it: ensure/reconcile/409 on create, WRITE_TRUNCATE loads,
the publish of a whole day (24 stage tables -> one copy into ``pageviews$YYYYMMDD``), job
lookup and 409 on insert, the next generation after a failure, the expired stage table, the
append-only ledger and metadata counts (``test_contract_rules.py``: BigQuery's rules refused
before anything is sent). The ``backend`` fixture is in the folder's ``conftest.py``.
Where bqemulator lacks a behaviour, :mod:`bq_platform_tests.bigquery_shim` gives it (each gap
has a test in ``test_bigquery_warehouse.py`` that notices when the emulator learns it).
"""

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence

import pytest

from bq_platform.lib.core.job_ids import sha256_json
from bq_platform.lib.publish.idempotent_jobs import run_idempotent_job
from bq_platform.lib.publish.job_decisions import stale_reason
from bq_platform.lib.warehouse import ledger
from bq_platform.lib.warehouse.base import (
    JobConflictError,
    JobFailedError,
    JobStatus,
    LoadJob,
    PublishRecord,
    SchemaMismatchError,
    TableExistsError,
)
from bq_platform.lib.warehouse.schema import Column, TableSpec, pageviews_spec, stage_spec
from bq_platform_tests.lib.warehouse.contract_backends import (
    Backend,
    BigQueryBackend,
    layout,
    load_factory,
    load_hour,
    pageview_parquet,
    publish,
    stage,
)

DAY = dt.date(1995, 8, 1)
NEXT_DAY = DAY + dt.timedelta(days=1)
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in range(24)]


# -- tables ----------------------------------------------------------------------------------


def test_ensure_creates_tables_a_new_run_finds_them_unchanged(backend: Backend) -> None:
    specs = [pageviews_spec(False), stage_spec("full", HOURS[4])]
    first = backend.warehouse()
    for spec in specs:
        first.ensure_table(spec)
    again = backend.warehouse()
    for spec in specs:
        again.ensure_table(spec)
        assert layout(again.table_spec(spec.name)) == layout(spec)
        assert again.table_rows(spec.name) == 0


def test_batch_reads_answer_as_one_table_at_a_time(backend: Backend) -> None:
    # tables_rows / table_specs (one or two statements on DuckDB) against table_rows /
    # table_spec per table, on a new warehouse object (nothing ensured in it).
    writer = backend.warehouse()
    stage(backend, writer, HOURS[1], 3)
    stage(backend, writer, HOURS[2], 5)
    writer.ensure_table(pageviews_spec(False))
    names = [stage_spec("full", h).name for h in HOURS[:3]] + ["pageviews"]
    reader = backend.warehouse()
    asked = [*names, names[1], f"pageviews${DAY:%Y%m%d}"]
    rows = reader.tables_rows(asked)
    assert list(rows) == list(dict.fromkeys(asked))
    assert rows == {name: reader.table_rows(name) for name in asked}
    assert [rows[n] for n in names] == [None, 3, 5, 0]
    specs = backend.warehouse().table_specs([*names, names[2]])
    assert list(specs) == names
    assert specs[names[0]] is None
    assert [layout(specs[n]) for n in names[1:]] == [
        layout(stage_spec("full", HOURS[1])),
        layout(stage_spec("full", HOURS[2])),
        layout(pageviews_spec(False)),
    ]


def test_additive_nullable_column_is_patched(backend: Backend) -> None:
    v1 = stage_spec("full", HOURS[4])
    backend.warehouse().ensure_table(v1)
    v2 = dataclasses.replace(v1, columns=(*v1.columns, Column("country", "STRING")))
    backend.warehouse().ensure_table(v2)
    assert layout(backend.warehouse().table_spec(v1.name)) == layout(v2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: dataclasses.replace(
                s, columns=(*s.columns, Column("x", "STRING", "REQUIRED"))
            ),
            "only NULLABLE columns",
        ),
        (
            lambda s: dataclasses.replace(
                s, columns=(dataclasses.replace(s.columns[0], type="INT64"), *s.columns[1:])
            ),
            "column 1 is event_id STRING REQUIRED, the spec says event_id INT64 REQUIRED",
        ),
        (lambda s: dataclasses.replace(s, partition_field=None), "partitioned on event_date"),
    ],
    ids=["required-column", "type-change", "partitioning"],
)
def test_incompatible_change_raises_and_changes_nothing(
    backend: Backend, change: Callable[[TableSpec], TableSpec], message: str
) -> None:
    spec = stage_spec("full", HOURS[4])
    backend.warehouse().ensure_table(spec)
    with pytest.raises(SchemaMismatchError, match=message):
        backend.warehouse().ensure_table(change(spec))
    assert layout(backend.warehouse().table_spec(spec.name)) == layout(spec)


def test_409_on_create_reads_the_table_back(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer creates the table between our describe (missing) and our create."""
    spec = stage_spec("full", HOURS[4])
    late = backend.warehouse()
    describe, create = late._describe_tables, late._create_table
    conflicts: list[Exception] = []

    def racing_describe(tables: Sequence[str]) -> dict[str, TableSpec | None]:
        found = describe(tables)
        if not conflicts and spec.name in tables:
            backend.warehouse().ensure_table(spec)  # the other writer
        return found

    def observed_create(created: TableSpec) -> None:
        try:
            create(created)
        except TableExistsError as exc:
            conflicts.append(exc)
            raise

    monkeypatch.setattr(late, "_describe_tables", racing_describe)
    monkeypatch.setattr(late, "_create_table", observed_create)
    late.ensure_table(spec)
    assert len(conflicts) == 1
    assert layout(late.table_spec(spec.name)) == layout(spec)
    if isinstance(backend, BigQueryBackend):
        calls = backend.session_of(late).table_metadata_calls(spec.name)
        assert [(c.method, c.status) for c in calls] == [("POST", 409), ("GET", 200)]


# -- loads and jobs --------------------------------------------------------------------------


def test_write_truncate_load_replaces_the_table(backend: Backend) -> None:
    warehouse, hour = backend.warehouse(), HOURS[4]
    table = stage_spec("full", hour).name
    first = load_hour(backend, warehouse, hour, 5, "old")
    second = load_hour(backend, warehouse, hour, 3, "new")
    assert (first.action, second.action) == ("submitted", "submitted")
    assert first.job_id != second.job_id
    assert (first.rows, second.rows) == (5, 3)  # the job's own rows (GAP-OUTPUT-ROWS)
    assert backend.event_ids(table) == [f"1995080104-new-{i}" for i in range(3)]
    assert warehouse.table_rows(table) == 3


def test_job_lookup_409_on_insert_and_adoption(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    warehouse, hour = backend.warehouse(), HOURS[5]
    uri = backend.put_file("staging/h5/part-0.parquet", pageview_parquet(hour, 4))
    make = load_factory(hour, [uri], sha256_json(["h5"]))
    warehouse.ensure_table(stage_spec("full", hour))
    assert warehouse.get_job(make(0).job_id) is None
    status = warehouse.submit_job(make(0))
    found = warehouse.get_job(make(0).job_id)
    assert found is not None and found.succeeded and found.output_rows == 4
    assert status.job_id == found.job_id == make(0).job_id
    with pytest.raises(JobConflictError):  # GAP-409 on the emulator
        warehouse.submit_job(make(0))
    assert backend.warehouse().table_rows(stage_spec("full", hour).name) == 4

    # Another run inserted generation 0 of new content between our lookup and our insert.
    other = load_factory(hour, [uri], sha256_json(["h5", "other run"]))
    backend.warehouse().submit_job(other(0))
    run = backend.warehouse()
    real_get, hidden = run.get_job, [other(0).job_id]

    def get_job_once_too_early(jid: str) -> JobStatus | None:
        if jid in hidden:  # our lookup ran before the other run's insert
            hidden.remove(jid)
            return None
        return real_get(jid)

    monkeypatch.setattr(run, "get_job", get_job_once_too_early)
    outcome = run_idempotent_job(
        run, other, fingerprint=sha256_json(["h5", "other run"]), partition="1995080105"
    )
    assert (outcome.action, outcome.job_id, outcome.generation) == ("adopted", other(0).job_id, 0)


def test_batch_job_lookups_answer_as_one_job_at_a_time(backend: Backend) -> None:
    # get_jobs / jobs_submitted_to (one statement each on DuckDB) against get_job /
    # jobs_submitted per job and table.
    writer = backend.warehouse()
    done = [load_hour(backend, writer, hour, 2 + n).job_id for n, hour in enumerate(HOURS[7:9])]
    reader = backend.warehouse()
    ids = [*done, "bqp_load_never_submitted_g0", done[0]]
    statuses = reader.get_jobs(ids)
    assert list(statuses) == list(dict.fromkeys(ids))
    assert statuses == {i: reader.get_job(i) for i in ids}
    assert [statuses[i].output_rows for i in done] == [2, 3]
    assert statuses["bqp_load_never_submitted_g0"] is None
    tables = [stage_spec("full", h).name for h in HOURS[6:9]]
    today = dt.datetime.now(dt.UTC).date()
    counts = reader.jobs_submitted_to(tables, today)
    assert counts == {t: reader.jobs_submitted(t, today) for t in tables}
    if not isinstance(backend, BigQueryBackend):  # the shim's jobs are not in jobs.list
        assert counts == dict(zip(tables, [0, 1, 1], strict=True))
    yesterday = today - dt.timedelta(days=1)
    assert reader.jobs_submitted_to(tables, yesterday) == dict.fromkeys(tables, 0)


def test_failed_load_changes_nothing_and_the_next_generation_runs(backend: Backend) -> None:
    warehouse, hour = backend.warehouse(), HOURS[6]
    table = stage_spec("full", hour).name
    load_hour(backend, warehouse, hour, 4, "good")
    key = "staging/h6-late/part-0.parquet"
    fingerprint = sha256_json(["h6 late"])
    make = load_factory(hour, [backend.uri(key)], fingerprint)
    with pytest.raises(JobFailedError) as failed:  # the file is not there yet
        run_idempotent_job(warehouse, make, fingerprint=fingerprint, partition="1995080106")
    assert failed.value.status.error_reason in {"notFound", "invalid"}
    # WRITE_TRUNCATE is atomic: the failed job left the table as it was (GAP-TRUNCATE).
    assert backend.event_ids(table) == [f"1995080106-good-{i}" for i in range(4)]
    backend.put_file(key, pageview_parquet(hour, 2, "late"))
    outcome = run_idempotent_job(
        backend.warehouse(), make, fingerprint=fingerprint, partition="1995080106"
    )
    assert (outcome.action, outcome.generation, outcome.rows) == ("submitted", 1, 2)
    assert outcome.job_id == make(1).job_id
    assert backend.event_ids(table) == [f"1995080106-late-{i}" for i in range(2)]


def test_dropped_stage_table_is_loaded_again_not_skipped(backend: Backend) -> None:
    hour = HOURS[7]
    table = stage_spec("full", hour).name
    first = load_hour(backend, backend.warehouse(), hour, 3)
    backend.drop_table(table)  # expired (7 days) or dropped by an operator
    rerun = backend.warehouse()
    again = load_hour(backend, rerun, hour, 3)  # same content: same job ID family
    assert (first.action, first.generation) == ("submitted", 0)
    assert (again.action, again.generation) == ("submitted", 1)
    assert rerun.table_rows(table) == 3
    assert load_hour(backend, backend.warehouse(), hour, 3).action == "skipped"


def test_table_recreated_between_runs_is_stale_for_a_fresh_object(backend: Backend) -> None:
    """Issue 9: what a warehouse object knows of a table lasts one run. A stage table that
    expired and was created again (empty) by another run after our load is detected by the
    next run's object: the DONE job no longer describes it, so the next generation runs."""
    hour = HOURS[8]
    table = stage_spec("full", hour).name
    run1 = backend.warehouse()
    first = load_hour(backend, run1, hour, 3)
    assert (first.action, run1.table_rows(table)) == ("submitted", 3)
    backend.drop_table(table)  # expired (7 days)
    backend.warehouse().ensure_table(stage_spec("full", hour))  # another run: created empty
    run2 = backend.warehouse()
    fingerprint = sha256_json([hour.isoformat(), "a", 3])
    uri = backend.uri(f"staging/{hour:%Y%m%d%H}-a/part-0.parquet")
    make = load_factory(hour, [uri], fingerprint)
    run2.ensure_table(stage_spec("full", hour))
    assert run2.table_rows(table) == 0
    status = run2.get_job(make(0).job_id)
    assert status is not None and status.succeeded
    reason = stale_reason(run2, make(0), status, fingerprint, f"{hour:%Y%m%d%H}")
    assert reason is not None and (f"{table} was created again" in reason or "holds 0" in reason)
    again = load_hour(backend, run2, hour, 3)
    assert (again.action, again.generation, again.rows) == ("submitted", 1, 3)
    assert run2.table_rows(table) == 3
    assert backend.warehouse().table_rows(table) == 3


# -- the daily publish -----------------------------------------------------------------------


def test_publish_of_a_whole_day(backend: Backend) -> None:
    warehouse = backend.warehouse()
    rows = {h: h.hour % 3 + 1 for h in HOURS}
    for hour in HOURS:
        stage(backend, warehouse, hour, rows[hour])
    next_hours = [dt.datetime.combine(NEXT_DAY, dt.time(h), dt.UTC) for h in (0, 1)]
    for hour in next_hours:
        stage(backend, warehouse, hour, 5)
    assert publish(warehouse, NEXT_DAY, next_hours, sha256_json(["d2"])).action == "submitted"
    before = backend.activity(warehouse)
    outcome = publish(warehouse, DAY, HOURS, sha256_json(["d1", 1]))
    assert (outcome.action, outcome.rows) == ("submitted", sum(rows.values()))
    if isinstance(backend, BigQueryBackend):  # one copy job for the 24 hours
        sent = backend.session_of(warehouse).job_inserts()
        copies = [b["configuration"]["copy"] for b in sent if "copy" in b["configuration"]]
        assert len(copies) == 2 and len(copies[1]["sourceTables"]) == 24
        assert copies[1]["destinationTable"]["tableId"] == "pageviews$19950801"
        assert copies[1]["writeDisposition"] == "WRITE_TRUNCATE"
        assert copies[1]["sourceTables"][4]["tableId"] == "pageviews_stage_1995080104$19950801"
    assert backend.activity(warehouse) > before
    check = backend.warehouse()
    assert check.partition_rows("pageviews", DAY) == sum(rows.values())
    assert check.partition_rows("pageviews", NEXT_DAY) == 10  # the other day untouched
    # Same content again: skipped. An hour rebuilt: the partition is replaced, not appended.
    assert publish(check, DAY, HOURS, sha256_json(["d1", 1])).action == "skipped"
    load_hour(backend, check, HOURS[5], 7, "rebuilt")
    replaced = publish(check, DAY, HOURS, sha256_json(["d1", 2]))
    assert replaced.action == "submitted"
    want = sum(rows.values()) - rows[HOURS[5]] + 7
    assert check.partition_rows("pageviews", DAY) == want
    assert check.partition_rows("pageviews", NEXT_DAY) == 10
    assert check.table_rows("pageviews") == want + 10
    record = check.read_publish_record("pageviews", "19950801")
    assert record is not None and (record.job_id, record.rows) == (replaced.job_id, want)


def test_rows_of_another_day_never_reach_the_day_partition(backend: Backend) -> None:
    """A copy into ``table$YYYYMMDD`` fails if a row is of another day (nothing changes); a
    source named by its partition (``stage$YYYYMMDD``) gives only that day's rows."""
    warehouse = backend.warehouse()
    load_hour(backend, warehouse, HOURS[0], 2)
    publish(warehouse, DAY, [HOURS[0]], sha256_json(["ok"]))
    stray = dt.datetime.combine(NEXT_DAY, dt.time(3), dt.UTC)
    load_hour(backend, warehouse, HOURS[1], 3, "stray", day_of_rows=stray)
    with pytest.raises(JobFailedError, match="Some rows belong to different partitions"):
        publish(warehouse, DAY, [HOURS[1]], sha256_json(["bad"]), decorate=False)
    assert warehouse.partition_rows("pageviews", DAY) == 2
    outcome = publish(warehouse, DAY, [HOURS[0], HOURS[1]], sha256_json(["decorated"]))
    assert (outcome.action, outcome.rows) == ("submitted", 2)
    assert warehouse.partition_rows("pageviews", DAY) == 2
    assert warehouse.table_rows("pageviews") == 2


# -- ledger and counts -----------------------------------------------------------------------


def test_ledger_is_append_only_latest_wins_one_schema(backend: Backend) -> None:
    warehouse = backend.warehouse()
    assert warehouse.read_publish_record("pageviews", "19950801") is None
    early = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    late = early + dt.timedelta(minutes=1)
    warehouse.write_publish_records([PublishRecord("pageviews", "19950801", "j2", "f2", 20, late)])
    warehouse.write_publish_records([PublishRecord("pageviews", "19950801", "j1", "f1", 10, early)])
    warehouse.write_publish_records([PublishRecord("pageviews", "19950802", "j9", "f9", 9, early)])
    reader = backend.warehouse()
    assert reader.read_publish_record("pageviews", "19950801") == PublishRecord(
        "pageviews", "19950801", "j2", "f2", 20, late
    )
    assert reader.table_rows(ledger.PUBLISH_LEDGER_TABLE) == 3  # appended, never updated
    got = reader.table_spec(ledger.PUBLISH_LEDGER_TABLE)
    assert layout(got) == layout(ledger.publish_ledger_spec())


def test_metadata_counts(backend: Backend) -> None:
    warehouse = backend.warehouse()
    spec = pageviews_spec(False)
    warehouse.ensure_table(spec)
    uris = [
        backend.put_file("d1.parquet", pageview_parquet(HOURS[4], 3)),
        backend.put_file("d2.parquet", pageview_parquet(HOURS[4] + dt.timedelta(days=1), 2)),
    ]
    warehouse.submit_job(LoadJob("bqp_load_pageviews_both_g0", spec.name, tuple(uris), spec))
    reader = backend.warehouse()
    assert reader.table_rows("pageviews") == 5
    assert reader.partition_rows("pageviews", DAY) == 3
    assert reader.partition_rows("pageviews", NEXT_DAY) == 2
    assert reader.partition_rows("pageviews", NEXT_DAY + dt.timedelta(days=1)) == 0
    assert reader.table_rows("no_such_table") is None
    assert reader.partition_rows("no_such_table", DAY) == 0
