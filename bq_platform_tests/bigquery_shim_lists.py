"""GAP-DECORATOR-LIST of :class:`~bq_platform_tests.bigquery_shim.BigQueryShim`: ``tabledata.list``
of ``table$YYYYMMDD`` answered in front of bqemulator (TEST CODE ONLY).

BigQuery lists one day partition's rows when ``tabledata.list`` names ``table$YYYYMMDD``
(cloud.google.com/bigquery/docs/reference/rest/v2/tabledata/list; a decorator addresses one
partition: cloud.google.com/bigquery/docs/managing-partitioned-table-data). bqemulator answers
404 (``test_emulator_gaps.py::test_gap_decorator_on_tabledata_list``).
The shim lists the whole table on the emulator (same ``selectedFields``, every page) and keeps
the rows whose partition column is that day, in one page.
"""

import collections
import datetime as dt
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import requests

from bq_platform_tests.http_recording import HttpCall, json_response

DATA_PATH = re.compile(
    r"^/bigquery/v2/projects/([^/]+)/datasets/([^/]+)/tables/([^/$]+)\$(\d{8})/data$"
)


class PartitionLists:
    """Mixin of :class:`~bq_platform_tests.bigquery_shim.BigQueryShim` (which provides the
    emulator ``endpoint``, its own HTTP session ``_http``, ``_table`` and ``answered``)."""

    endpoint: str
    _http: requests.Session
    answered: collections.Counter[str]
    _table: Callable[[str, str, str], Any]

    def partition_lists(self) -> Callable[[HttpCall], requests.Response | None]:
        """A responder that answers only GAP-DECORATOR-LIST (``tabledata.list`` of
        ``table$YYYYMMDD``), for tests that otherwise talk to the raw emulator."""

        def respond(call: HttpCall) -> requests.Response | None:
            match = DATA_PATH.match(unquote(call.path)) if call.method == "GET" else None
            return self._partition_list(call, *match.groups()) if match else None

        return respond

    def _partition_list(
        self, call: HttpCall, project: str, dataset: str, name: str, day: str
    ) -> requests.Response | None:
        """GAP-DECORATOR-LIST: the rows of one day partition, in one page."""
        table = self._table(project, dataset, name)
        if table is None:
            return None  # the emulator answers 404 itself
        field = table.time_partitioning.field if table.time_partitioning else None
        if field is None:
            message = f"{name}${day}: {name} is not partitioned"
            error = {"code": 400, "message": message, "errors": [{"reason": "invalid"}]}
            return json_response(400, {"error": error})
        params = {k: v for k, v in call.query.items() if k not in ("pageToken", "maxResults")}
        selected = params.get("selectedFields")
        names = selected.split(",") if selected else [f.name for f in table.schema]
        index = names.index(field)
        wanted = dt.datetime.strptime(day, "%Y%m%d").date().isoformat()
        url = f"{self.endpoint}/bigquery/v2/projects/{project}/datasets/{dataset}/tables/{name}"
        rows: list[Any] = []
        while True:
            page = self._http.get(f"{url}/data", params=params, timeout=60).json()
            rows += [r for r in page.get("rows", []) if r["f"][index]["v"] == wanted]
            if not page.get("pageToken"):
                break
            params["pageToken"] = page["pageToken"]
        self.answered["tabledata.list$"] += 1
        body = {"kind": "bigquery#tableDataList", "totalRows": str(len(rows)), "rows": rows}
        return json_response(200, body)
