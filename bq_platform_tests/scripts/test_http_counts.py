"""The per-table counting of ``scripts/http_counts.py`` on recorded calls (no emulator).

The calls are what :class:`~bq_platform_tests.http_recording.RecordingSession` records for the
BigQuery REST API v2; the expected counts are worked out by hand from the list.
"""

from typing import Any

import bench_http_report
import http_counts

from bq_platform_tests.http_recording import HttpCall

P = "/bigquery/v2/projects/p"
D = f"{P}/datasets/d"
LEDGER_SELECT = "SELECT * FROM `p.d._bq_platform_published` WHERE destination = @destination"


def _get(path: str) -> HttpCall:
    return HttpCall("GET", path, {}, None)


def _job(job_id: str, configuration: dict[str, Any]) -> HttpCall:
    body = {"jobReference": {"projectId": "p", "jobId": job_id}, "configuration": configuration}
    return HttpCall("POST", f"{P}/jobs", {}, body)


def _dest(table: str) -> dict[str, str]:
    return {"projectId": "p", "datasetId": "d", "tableId": table}


def _run() -> tuple[list[HttpCall], dict[int, Any], list[tuple[str, int]]]:
    calls = [
        _get(D),  # 0 datasets.get
        _get(f"{D}/tables"),  # 1 tables.list
        HttpCall("POST", f"{D}/tables", {}, {"tableReference": _dest("stage_1995080100")}),
        _get(f"{P}/jobs/load-1"),  # 3 jobs.get before the insert (404): still the stage's
        _job("load-1", {"load": {"destinationTable": _dest("stage_1995080100")}}),
        _get(f"{D}/tables/stage_1995080100"),  # 5 tables.get (numRows)
        _get(f"{D}/tables/pageviews%2419950801"),  # 6 a partition's tables.get, URL-quoted
        HttpCall("PATCH", f"{D}/tables/pageviews", {}, {"labels": {}}),
        _job("q-1", {"query": {"query": LEDGER_SELECT}}),  # 8 a check
        _get(f"{P}/queries/q-1"),  # 9
        _job(
            "q-2", {"query": {"query": "INSERT INTO `p.d._bq_platform_published` (a) VALUES (1)"}}
        ),
        _get(f"{P}/jobs/copy-old"),  # 11 a job of an earlier run
        _get(f"{P}/jobs"),  # 12 jobs.list
    ]
    answers = {
        8: {"statistics": {"query": {"totalBytesBilled": "10485760", "totalBytesProcessed": "7"}}},
        9: {"totalBytesProcessed": "7"},
    }
    return calls, answers, [("loads", 0), ("checks", 8)]


def test_counts_per_table() -> None:
    calls, answers, phases = _run()
    run = http_counts.count_calls(calls, answers, phases, known_jobs={"copy-old": "pageviews"})
    assert run["requests"] == 13 and run["unclassified"] == []
    assert run["dataset_requests"] == {"datasets.get": 1, "tables.list": 1, "jobs.list": 1}
    assert run["tables"] == {
        "_bq_platform_published": {
            "jobs.insert.query": 2,
            "getQueryResults": 1,
            "metadata": 0,
            "table_metadata": 0,
            "metadata_writes": 0,
            "jobs": 2,
        },
        "pageviews": {
            "tables.get$": 1,
            "tables.patch": 1,
            "jobs.get": 1,
            "metadata": 2,
            "table_metadata": 1,
            "metadata_writes": 1,
            "jobs": 0,
        },
        "stage_1995080100": {
            "tables.insert": 1,
            "jobs.get": 1,
            "jobs.insert.load": 1,
            "tables.get": 1,
            "metadata": 2,
            "table_metadata": 2,
            "metadata_writes": 1,
            "jobs": 1,
        },
    }
    assert run["query_jobs"] == [
        {
            "job_id": "q-1",
            "table": "_bq_platform_published",
            "statement": "SELECT",
            "phase": "checks",
            "check": True,
            "bytes_billed": 10485760,
            "bytes_processed": 7,
        },
        {
            "job_id": "q-2",
            "table": "_bq_platform_published",
            "statement": "INSERT",
            "phase": "checks",
            "check": False,
            "bytes_billed": None,
            "bytes_processed": None,
        },
    ]
    summary = run["summary"]
    assert (summary["tables"], summary["metadata_max"], summary["metadata_total"]) == (3, 2, 4)
    assert summary["tables_over_target"] == ["stage_1995080100"]  # pageviews: 1 + a partition
    assert (summary["table_metadata_max"], summary["partition_gets"]) == (2, 1)
    assert summary["jobs_by_type"] == {"load": 1, "query": 2}
    assert (summary["jobs_total"], summary["jobs_max"], summary["jobs_get"]) == (3, 2, 2)
    assert summary["check_query_jobs"] == 1
    assert summary["checks_by_phase"] == {"checks: _bq_platform_published": 1}
    assert summary["check_bytes_billed"] == 10485760
    assert summary["met"] is False


def test_target_met_and_unknown_bytes() -> None:
    one_each = [
        HttpCall("POST", f"{D}/tables", {}, {"tableReference": _dest("stage_1995080100")}),
        _job("load-1", {"load": {"destinationTable": _dest("stage_1995080100$19950801")}}),
        _get(f"{D}/tables/pageviews"),
        _job("copy-1", {"copy": {"destinationTable": _dest("pageviews$19950801")}}),
    ]
    run = http_counts.count_calls(one_each)
    assert run["summary"]["metadata_max"] == 1 and run["summary"]["met"] is True
    assert run["tables"]["pageviews"]["jobs.insert.copy"] == 1
    assert run["summary"]["check_bytes_billed"] == 0  # no check ran

    with_check = [*one_each, _job("q-9", {"query": {"query": "/* gate */ " + LEDGER_SELECT}})]
    summary = http_counts.count_calls(with_check)["summary"]
    assert summary["check_query_jobs"] == 1 and summary["met"] is False
    assert summary["check_bytes_billed"] is None  # no answer carried the figure
    assert summary["check_bytes_min_bigquery"] == 10 * 2**20


def test_report_section() -> None:
    calls, answers, phases = _run()
    run = http_counts.count_calls(calls, answers, phases, known_jobs={"copy-old": "pageviews"})
    http = {"site": "s", "day": "1995-08-01", "lines": 10, "met": False}
    http["runs"] = [{"name": "first run", **run}]
    text = "\n".join(bench_http_report.http_markdown(http))
    # whole-table metadata 2 (max) / 3 (total), 1 insert/patch, 1 partition get, 0 lists
    row = "| first run | 13 | 3 | 2 / 3 | 1 | 1 | 0 | 2 / 3 | load 1, query 2 | 2 | 2 | 1 |"
    assert row in text
    assert "| first run | `stage_<hour>` | 1 | 1 | 0 | 1 | 0 | 2 | 1 | 0 | 0 | 1 |" in text
    assert "checks bill 0 bytes): NOT met** (first run: 1 of 3 tables" in text
    assert "Not measured in this run" in "\n".join(bench_http_report.http_markdown(None))


def test_tabledata_list_is_a_free_read_not_metadata() -> None:
    calls = [
        _get(f"{D}/tables/_bq_platform_published/data"),
        _get(f"{D}/tables/pageviews_audit%2419950801/data"),  # one day partition, URL-quoted
    ]
    run = http_counts.count_calls(calls)
    assert run["unclassified"] == [] and run["dataset_requests"] == {}
    assert run["tables"]["_bq_platform_published"]["tabledata.list"] == 1
    assert run["tables"]["pageviews_audit"]["tabledata.list$"] == 1
    assert all(t["metadata"] == 0 for t in run["tables"].values())
    assert run["summary"]["met"] is True and run["summary"]["check_query_jobs"] == 0


def test_object_requests_by_gcs_operation_and_their_report() -> None:
    b = "/storage/v1/b/lake"
    calls = [
        _get(b),  # buckets.get
        HttpCall("GET", f"{b}/o", {"prefix": "landing/pageviews/site=a/"}, None),
        HttpCall("GET", f"{b}/o/landing%2Fm.json", {"alt": "media"}, None),
        HttpCall("GET", f"/download{b}/o/landing%2Fx.gz", {"alt": "media"}, None),
        _get(f"{b}/o/landing%2Fx.gz"),  # metadata only: a size or existence request
        HttpCall("POST", "/upload/storage/v1/b/lake/o", {"uploadType": "media"}, b"x"),
        HttpCall("DELETE", f"{b}/o/landing%2Fx.gz", {}, None),
        HttpCall("PATCH", f"{b}/o/landing%2Fx.gz", {}, None),
    ]
    counts = http_counts.count_object_calls(calls)
    assert counts == {
        "PATCH /storage/v1/b/lake/o/landing/x.gz": 1,
        "buckets.get": 1,
        "objects.delete": 1,
        "objects.get": 1,
        "objects.get (media)": 2,
        "objects.insert": 1,
        "objects.list": 1,
        "total": 8,
    }
    objects = {"deliveries": 3, "phases": {"reads": counts}, "seconds": {"reads": 0.5}}
    text = "\n".join(bench_http_report.objects_markdown(objects))
    assert "| reads | 8 | PATCH " in text and "objects.get (media) 2" in text
    assert "| 0.5 |" in text and "3 landed deliveries" in text
    assert bench_http_report.objects_markdown(None) == []
