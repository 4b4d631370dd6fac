"""Count one run's BigQuery REST requests per table (for ``scripts/bench_http.py``).

Input: the requests in order, as recorded by
:class:`bq_platform_tests.http_recording.RecordingSession` (anything with ``method``, ``path`` and
the parsed JSON ``body``), and optionally the JSON answers of job requests. Paths are those of
the BigQuery REST API v2 (cloud.google.com/bigquery/docs/reference/rest):

- ``GET/PATCH/PUT .../datasets/{d}/tables/{t}``: ``tables.get``/``patch``/``update`` (a
  ``{t}`` with ``$YYYYMMDD`` is a partition's ``tables.get``, counted as ``tables.get$``);
  ``POST .../datasets/{d}/tables``: ``tables.insert``; ``GET`` of it: ``tables.list``;
  ``GET .../tables/{t}/data``: ``tabledata.list`` (``tabledata.list$`` for a partition), a
  free read of rows (cloud.google.com/bigquery/pricing#free), not a metadata request;
- ``POST .../projects/{p}/jobs``: ``jobs.insert`` (type from ``configuration``); ``GET`` of
  it: ``jobs.list``; ``GET .../jobs/{id}``: ``jobs.get``; ``GET .../queries/{id}``:
  ``getQueryResults``;
- ``.../datasets[/{d}]``: ``datasets.get``/``insert``.

A job's table is its load/copy destination, or the first backquoted table a query names; a
``jobs.get`` or ``getQueryResults`` counts for the table of its job. Query jobs are listed with
their statement (SELECT, INSERT, MERGE...) and ``statistics.query.totalBytesBilled``/
``totalBytesProcessed`` as answered. The checks are the read (SELECT) query jobs.

``metadata`` counts every ``tables.*`` request of a table, partitions included;
``table_metadata`` only the whole-table ones (``tables.get``/``insert``/``patch``). The target
is on ``table_metadata``: a partition's count (``tables.get`` of ``table$YYYYMMDD``) is a
separate request per partition, reported as ``partition_gets``.
"""

import re
from typing import Any
from urllib.parse import unquote

#: Issue 9: at most this many table-metadata requests per table per run...
TARGET_METADATA_PER_TABLE = 1
#: ... and no query (so 0 bytes billed) for the checks. BigQuery's on-demand pricing bills at
#: least 10 MB per table a query references (cloud.google.com/bigquery/pricing, on-demand
#: compute pricing), so a check that runs a query is never free in production.
MIN_BILLED_PER_TABLE = 10 * 2**20

_DATASET = r"/bigquery/v2/projects/[^/]+/datasets/[^/]+"
_TABLE = re.compile(rf"^{_DATASET}/tables/([^/]+)$")
_TABLES = re.compile(rf"^{_DATASET}/tables$")
_DATA = re.compile(rf"^{_DATASET}/tables/([^/]+)/data$")
_DATASET_PATHS = re.compile(rf"^(?:{_DATASET}|/bigquery/v2/projects/[^/]+/datasets)$")
JOBS_PATH = re.compile(r"^/bigquery/v2/projects/[^/]+/jobs$")
JOB_PATH = re.compile(r"^/bigquery/v2/projects/[^/]+/jobs/([^/]+)$")
QUERY_RESULTS_PATH = re.compile(r"^/bigquery/v2/projects/[^/]+/queries/([^/]+)$")
_SQL_TABLE = re.compile(r"`[^`.]+\.[^`.]+\.([^`$]+)(?:\$\d{8})?`")
METADATA_OPS = ("tables.get", "tables.get$", "tables.insert", "tables.patch")
METADATA_WRITES = ("tables.insert", "tables.patch")
TABLE_METADATA_OPS = ("tables.get", "tables.insert", "tables.patch")
JOB_TYPES = ("load", "copy", "query", "extract")
READ_STATEMENTS = ("SELECT", "WITH")


def base_table(table_id: str) -> str:
    """The table name without a ``$YYYYMMDD`` partition decorator."""
    return table_id.partition("$")[0]


def job_table(configuration: dict[str, Any]) -> str | None:
    """The table a job writes (load/copy destination) or, for a query, the first it names."""
    for kind in ("load", "copy"):
        if kind in configuration:
            return base_table(configuration[kind]["destinationTable"]["tableId"])
    match = _SQL_TABLE.search(configuration.get("query", {}).get("query", ""))
    return match[1] if match else None


def statement(sql: str) -> str:
    """The first keyword of a SQL statement (SELECT, INSERT, MERGE, DELETE...), upper case."""
    words = re.sub(r"--[^\n]*|/\*.*?\*/", " ", sql, flags=re.S).split()
    return words[0].upper() if words else "?"


def _query_stat(answer: Any, key: str) -> int | None:
    if not isinstance(answer, dict):
        return None
    value = answer.get("statistics", {}).get("query", {}).get(key, answer.get(key))
    return int(value) if value is not None else None


def _phase_of(index: int, phase_starts: list[tuple[str, int]]) -> str:
    name = ""
    for phase, start in phase_starts:
        if start <= index:
            name = phase
    return name


def _job_body(call: Any) -> dict[str, Any] | None:
    path = unquote(call.path)
    if call.method == "POST" and JOBS_PATH.match(path) and isinstance(call.body, dict):
        return call.body
    return None


def job_tables(calls: list[Any], answers: dict[int, Any] | None = None) -> dict[str, str | None]:
    """Job ID -> table, from the ``jobs.insert`` bodies and the job resources answered."""
    out: dict[str, str | None] = {}
    for index, call in enumerate(calls):
        body = _job_body(call) or (answers or {}).get(index)
        if isinstance(body, dict) and "configuration" in body:
            job_id = body.get("jobReference", {}).get("jobId")
            if job_id:
                out.setdefault(job_id, job_table(body["configuration"]))
    return out


def count_calls(
    calls: list[Any],
    answers: dict[int, Any] | None = None,
    phase_starts: list[tuple[str, int]] | None = None,
    known_jobs: dict[str, str | None] | None = None,
) -> dict[str, Any]:
    """Count one run's BigQuery requests per table.

    Args:
        calls: the run's requests, in order (``RecordingSession.calls``).
        answers: index in ``calls`` -> JSON answer of job requests.
        phase_starts: ``(phase, index of its first call)`` in order; a query job belongs to
            the phase that holds its ``jobs.insert``.
        known_jobs: job ID -> table of jobs inserted before this run (:func:`job_tables`).

    Returns:
        ``{"requests": n, "dataset_requests": {op: n}, "tables": {table: {op: n, ...,
        "metadata": n, "metadata_writes": n, "jobs": n}}, "query_jobs": [{"job_id", "table",
        "statement", "phase", "check", "bytes_billed", "bytes_processed"}], "unclassified":
        [[method, path]], "summary": summarize(...)}``. ``op`` is one of :data:`METADATA_OPS`,
        ``jobs.insert.<type>``, ``jobs.get`` or ``getQueryResults``. Requests whose table is
        unknown count in ``dataset_requests``. Bytes are None when no answer carried them.
    """
    answers = answers or {}
    owner = {**(known_jobs or {}), **job_tables(calls, answers)}
    tables: dict[str, dict[str, int]] = {}
    dataset_ops: dict[str, int] = {}
    queries: dict[str, dict[str, Any]] = {}
    unclassified: list[list[str]] = []

    def bump(table: str | None, op: str) -> None:
        counts = tables.setdefault(table, {}) if table else dataset_ops
        counts[op] = counts.get(op, 0) + 1

    def note_bytes(job_id: str, answer: Any) -> None:
        for field, key in (("bytes_billed", "totalBytesBilled"), ("bytes_processed", None)):
            value = _query_stat(answer, key or "totalBytesProcessed")
            if job_id in queries and value is not None:
                queries[job_id][field] = value

    for index, call in enumerate(calls):
        path, method = unquote(call.path), call.method
        if match := _TABLE.match(path):
            op = {"PATCH": "tables.patch", "PUT": "tables.patch", "DELETE": "tables.delete"}
            get = "tables.get$" if "$" in match[1] else "tables.get"
            bump(base_table(match[1]), get if method == "GET" else op.get(method, method))
        elif match := _DATA.match(path):
            op = "tabledata.list$" if "$" in match[1] else "tabledata.list"
            bump(base_table(match[1]), op)
        elif _TABLES.match(path):
            if method == "POST" and isinstance(call.body, dict):
                bump(call.body.get("tableReference", {}).get("tableId"), "tables.insert")
            else:
                bump(None, "tables.list")
        elif _DATASET_PATHS.match(path):
            bump(None, {"GET": "datasets.get", "POST": "datasets.insert"}.get(method, method))
        elif body := _job_body(call):
            configuration = body.get("configuration", {})
            job_id = body.get("jobReference", {}).get("jobId") or f"?{index}"
            kind = next((k for k in JOB_TYPES if k in configuration), "other")
            bump(owner.get(job_id) or job_table(configuration), f"jobs.insert.{kind}")
            if kind == "query" and job_id not in queries:
                sql = statement(configuration["query"].get("query", ""))
                queries[job_id] = {
                    "job_id": job_id,
                    "table": job_table(configuration),
                    "statement": sql,
                    "phase": _phase_of(index, phase_starts or []),
                    "check": sql in READ_STATEMENTS,
                    "bytes_billed": None,
                    "bytes_processed": None,
                }
            note_bytes(job_id, answers.get(index))
        elif JOBS_PATH.match(path):
            bump(None, "jobs.list")
        elif match := (JOB_PATH.match(path) or QUERY_RESULTS_PATH.match(path)):
            bump(owner.get(match[1]), "jobs.get" if JOB_PATH.match(path) else "getQueryResults")
            note_bytes(match[1], answers.get(index))
        else:
            unclassified.append([method, path])
    for counts in tables.values():
        counts["metadata"] = sum(counts.get(op, 0) for op in METADATA_OPS)
        counts["table_metadata"] = sum(counts.get(op, 0) for op in TABLE_METADATA_OPS)
        counts["metadata_writes"] = sum(counts.get(op, 0) for op in METADATA_WRITES)
        counts["jobs"] = sum(v for k, v in counts.items() if k.startswith("jobs.insert."))
    run: dict[str, Any] = {
        "requests": len(calls),
        "dataset_requests": dataset_ops,
        "tables": dict(sorted(tables.items())),
        "query_jobs": list(queries.values()),
        "unclassified": unclassified,
    }
    run["summary"] = summarize(run)
    return run


def summarize(run: dict[str, Any]) -> dict[str, Any]:
    """The figures of one counted run (:func:`count_calls`) that the report shows.

    Returns:
        ``tables``; ``metadata_max``/``metadata_total`` (all ``tables.*`` requests) and
        ``metadata_writes_max``; ``table_metadata_max`` (whole-table requests) and
        ``partition_gets`` and ``tabledata_lists`` (totals); ``tables_over_target`` (by
        ``table_metadata``); ``jobs_total``, ``jobs_max`` per table, ``jobs_by_type``,
        ``jobs_get``; ``query_jobs``; ``check_query_jobs`` and ``checks_by_phase``
        (read queries); ``check_bytes_billed`` (as answered; None if a check's answer had no
        ``totalBytesBilled``), ``check_bytes_processed`` (same),
        ``check_bytes_min_bigquery`` (:data:`MIN_BILLED_PER_TABLE` per check); ``met``: every
        table within :data:`TARGET_METADATA_PER_TABLE` whole-table requests and no check query.
    """
    tables = run["tables"].values()
    metadata = [t["metadata"] for t in tables]
    table_metadata = [t.get("table_metadata", t["metadata"]) for t in tables]
    jobs = [t["jobs"] for t in tables]
    checks = [q for q in run["query_jobs"] if q["check"]]
    by_type: dict[str, int] = {}
    for counts in tables:
        for key, value in counts.items():
            if key.startswith("jobs.insert."):
                kind = key.removeprefix("jobs.insert.")
                by_type[kind] = by_type.get(kind, 0) + value
    by_phase: dict[str, int] = {}
    for query in checks:
        key = f"{query['phase'] or '?'}: {query['table']}"
        by_phase[key] = by_phase.get(key, 0) + 1

    def total(field: str) -> int | None:
        values = [q[field] for q in checks]
        return None if None in values else sum(values)

    return {
        "tables": len(metadata),
        "metadata_max": max(metadata, default=0),
        "metadata_total": sum(metadata),
        "metadata_writes_max": max((t["metadata_writes"] for t in tables), default=0),
        "table_metadata_max": max(table_metadata, default=0),
        "partition_gets": sum(t.get("tables.get$", 0) for t in tables),
        "tabledata_lists": sum(
            t.get("tabledata.list", 0) + t.get("tabledata.list$", 0) for t in tables
        ),
        "tables_over_target": sorted(
            name
            for name, t in run["tables"].items()
            if t.get("table_metadata", t["metadata"]) > TARGET_METADATA_PER_TABLE
        ),
        "jobs_total": sum(jobs),
        "jobs_max": max(jobs, default=0),
        "jobs_by_type": dict(sorted(by_type.items())),
        "jobs_get": sum(t.get("jobs.get", 0) for t in tables),
        "query_jobs": len(run["query_jobs"]),
        "check_query_jobs": len(checks),
        "checks_by_phase": by_phase,
        "check_bytes_billed": total("bytes_billed"),
        "check_bytes_processed": total("bytes_processed"),
        "check_bytes_min_bigquery": MIN_BILLED_PER_TABLE * len(checks),
        "met": max(table_metadata, default=0) <= TARGET_METADATA_PER_TABLE and not checks,
    }


def families(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Per table family (hourly tables grouped as ``<name>_<hour>``): ``tables``, the sum of
    each count and, as ``max:<count>``, its largest value for one table."""
    out: dict[str, dict[str, Any]] = {}
    for name, counts in run["tables"].items():
        family = re.sub(r"_[0-9]{8,10}$", "_<hour>", name)
        entry = out.setdefault(family, {"family": family, "tables": 0})
        entry["tables"] += 1
        for key, value in counts.items():
            entry[key] = entry.get(key, 0) + value
            entry[f"max:{key}"] = max(entry.get(f"max:{key}", 0), value)
    return [out[k] for k in sorted(out)]


#: GCS JSON API paths (cloud.google.com/storage/docs/json_api/v1/objects): objects.list is a
#: GET of the bucket's ``/o``; an object's metadata a GET of ``/o/{name}``, its bytes the same
#: with ``alt=media`` (or the ``/download/`` path); uploads POST to ``/upload/...``.
_GCS_BUCKET = re.compile(r"^/storage/v1/b/[^/]+$")
_GCS_LIST = re.compile(r"^/storage/v1/b/[^/]+/o$")
_GCS_OBJECT = re.compile(r"^(?:/download)?/storage/v1/b/[^/]+/o/.+$")
_GCS_UPLOAD = re.compile(r"^/upload/storage/v1/b/[^/]+/o$")


def object_op(call: Any) -> str:
    """The GCS JSON API operation of one request: ``objects.list``, ``objects.get (media)``
    (a download), ``objects.get`` (metadata: size, existence), ``objects.insert``,
    ``objects.delete``, ``buckets.get``, or ``METHOD path`` for anything else."""
    path = unquote(call.path)
    if _GCS_LIST.match(path) and call.method == "GET":
        return "objects.list"
    if _GCS_UPLOAD.match(path):
        return "objects.insert"
    if _GCS_OBJECT.match(path) and call.method == "DELETE":
        return "objects.delete"
    if _GCS_OBJECT.match(path) and call.method == "GET":
        if call.query.get("alt") == "media" or path.startswith("/download/"):
            return "objects.get (media)"
        return "objects.get"
    if _GCS_BUCKET.match(path) and call.method == "GET":
        return "buckets.get"
    return f"{call.method} {path}"


def count_object_calls(calls: list[Any]) -> dict[str, int]:
    """Requests per GCS operation (:func:`object_op`), plus ``total``."""
    counts: dict[str, int] = {}
    for call in calls:
        op = object_op(call)
        counts[op] = counts.get(op, 0) + 1
    return dict(sorted(counts.items())) | {"total": len(calls)}
