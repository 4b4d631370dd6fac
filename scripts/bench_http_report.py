"""The HTTP phase's figures in ``scripts/benchmark.py``'s report (``report["http"]``, written
by ``scripts/bench_http.py`` with the counts of ``scripts/http_counts.py``): the console line
and the Markdown sections "Warehouse requests per table" and the object store's requests.
:mod:`bench_report` puts them into the report.
"""

import http_counts


def whole_table_max(summary: dict) -> int:
    """The most whole-table metadata requests to one table in a run's HTTP summary (the
    target's count); a report written before partition counts were told apart has only
    ``metadata_max``."""
    return summary.get("table_metadata_max", summary["metadata_max"])


def http_sentence(http: dict) -> str:
    """The console line of the HTTP-layer count (``scripts/bench_http.py``): per run, the most
    whole-table metadata requests to one table (the target's count, ``scripts/http_counts.py``),
    and with a partition's row counts (``tables.get`` of ``table$YYYYMMDD``) counted in, which
    the target does not count; then the check queries and the verdict."""
    if "runs" not in http:
        return f"warehouse requests (HTTP, emulators) failed: {http.get('error')}"
    runs = "; ".join(
        f"{r['name']}: whole-table metadata per table max {whole_table_max(r['summary'])} "
        f"(with partition row counts {r['summary']['metadata_max']}), "
        f"check queries {r['summary']['check_query_jobs']}"
        for r in http["runs"]
    )
    verdict = "met" if http["met"] else "NOT met"
    return f"warehouse requests (HTTP, emulators): {runs}; target {verdict}"


def _bytes(value: int | None) -> str:
    return "not reported" if value is None else f"{value:,}"


def http_markdown(http: dict | None) -> list[str]:
    """The lines of the section "Warehouse requests per table" (``report["http"]``)."""
    out = ["", "### Warehouse requests per table (emulated production backends, HTTP layer)", ""]
    if http is None:
        return out + ["Not measured in this run (`--no-http`)."]
    if "runs" not in http:
        return out + [f"Not measured: `scripts/bench_http.py` failed: `{http.get('error')}`."]
    out += [
        f"One real UTC day ({http['site']}, {http['day']}, {http['lines']:,} lines) through the "
        "production BigQuery adapter on bqemulator and gcp-storage-emulator "
        "(`scripts/bench_http.py`): audit rows, 24 x 2 stage loads, day completeness, the "
        "publish of both kinds, the dead letters; then a re-run on the same content (a new "
        "warehouse object). Counted per request at the client's HTTP session: table metadata = "
        "`tables.get`, `tables.insert`, `tables.patch` of a whole table (the target); a "
        "partition's row count is one `tables.get` of `table$YYYYMMDD` each, counted apart; "
        "checks and ledger lookups read rows with `tabledata.list` (free: "
        "cloud.google.com/bigquery/pricing, free operations); checks' query jobs = read "
        "(SELECT) queries. bqemulator reports no `totalBytesBilled`; BigQuery bills at least "
        "10 MB per table a query reads, so a check costs 0 bytes only if it runs no query.",
        "",
        "| run | requests | tables | table metadata per table (max / total) "
        "| of which insert/patch (max per table) | partition `tables.get` | `tabledata.list` "
        "| jobs per table (max / total) | jobs by type | `jobs.get` | query jobs "
        "| checks' query jobs | bytes billed by checks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in http["runs"]:
        s = run["summary"]
        billed = _bytes(s["check_bytes_billed"])
        if s["check_query_jobs"]:
            billed += f" (BigQuery: >= {s['check_bytes_min_bigquery']:,})"
        whole = whole_table_max(s)
        out.append(
            f"| {run['name']} | {run['requests']} | {s['tables']} | {whole} / "
            f"{s['metadata_total'] - s.get('partition_gets', 0)} | {s['metadata_writes_max']} | "
            f"{s.get('partition_gets', 0)} | {s.get('tabledata_lists', 0)} | {s['jobs_max']} / "
            f"{s['jobs_total']} | "
            + (", ".join(f"{k} {v}" for k, v in s["jobs_by_type"].items()) or "none")
            + f" | {s['jobs_get']} | {s['query_jobs']} | {s['check_query_jobs']} | {billed} |"
        )
    out += [
        "",
        "| run | table | tables | `tables.get` | `tables.get` of a partition | `tables.insert` "
        "| `tables.patch` | metadata incl. partition gets (max per table) "
        "| load | copy | query | `jobs.get` |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in http["runs"]:
        for f in http_counts.families(run):
            out.append(
                f"| {run['name']} | `{f['family']}` | {f['tables']} | "
                + " | ".join(
                    str(f.get(k, 0))
                    for k in ("tables.get", "tables.get$", "tables.insert", "tables.patch")
                )
                + f" | {f.get('max:metadata', 0)} | "
                + " | ".join(
                    str(f.get(k, 0))
                    for k in ("jobs.insert.load", "jobs.insert.copy", "jobs.insert.query")
                )
                + f" | {f.get('jobs.get', 0)} |"
            )
    out.append("")
    for run in http["runs"]:
        s = run["summary"]
        phases = ", ".join(f"{k} {v}" for k, v in s["checks_by_phase"].items())
        out.append(f"Checks' query jobs, {run['name']} (phase: table): {phases or 'none'}.")
        if "adapter_metadata_max" in s:
            out.append(
                f"The adapter's own counter (`BigQueryWarehouse.metadata_requests`, "
                f"`ensure_table` only) gives at most {s['adapter_metadata_max']} per table."
            )
        out.append("")
    verdicts = []
    for run in http["runs"]:
        s = run["summary"]
        verdicts.append(
            f"{run['name']}: {len(s['tables_over_target'])} of {s['tables']} tables over 1 "
            f"table-metadata request, {s['check_query_jobs']} check query jobs"
        )
    out.append(
        "**Target (1 table-metadata request per table per run, checks bill 0 bytes): "
        + ("met" if http["met"] else "NOT met")
        + f"** ({'; '.join(verdicts)})."
    )
    return out + objects_markdown(http.get("objects"))


def objects_markdown(objects: dict | None) -> list[str]:
    """Lines on the GCS requests of the hourly steps' own reads (``report["http"]["objects"]``,
    :func:`bench_http._object_requests`)."""
    if not objects:
        return []
    out = [
        "",
        f"Object-store requests of the same day on gcp-storage-emulator (GCS JSON API, "
        f"{objects['deliveries']} landed deliveries, 24 hours; `scripts/bench_http.py`): what "
        "the build reads before Spark (sites, landed manifests, each landed file checked) and "
        "what the two stage steps read besides their load jobs (each hour's manifest and the "
        "bytes of its files). One listing per site, no metadata request per object.",
        "",
        "| phase | requests | by operation | seconds (emulator) |",
        "|---|---|---|---|",
    ]
    for phase, counts in objects["phases"].items():
        ops = ", ".join(f"{k} {v}" for k, v in counts.items() if k != "total")
        out.append(f"| {phase} | {counts['total']} | {ops} | {objects['seconds'][phase]} |")
    return out
