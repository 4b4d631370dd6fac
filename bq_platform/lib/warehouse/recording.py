"""A BigQuery transport that records every write and sends none: what ``bq-platform plan`` uses.

The requests printed are the REST resources the official client builds, never a separate
rendering.

- Writes (``tables.insert``, ``tables.patch``/``update``, ``jobs.insert``) are recorded in
  :attr:`RecordingSession.requests` and answered as a success (resource echoed, job DONE).
- Reads (``GET``) go to BigQuery through the wrapped authorized session; with
  ``offline=True`` nothing is sent: the dataset exists and is empty.
- Any other request (a query job, ``datasets.insert``) raises :class:`PlanRefusedError`: a
  plan must not bill or change anything.

REST paths: cloud.google.com/bigquery/docs/reference/rest (``/bigquery/v2/projects/{p}/...``).
"""

import dataclasses
import datetime as dt
import io
import json
import re
from typing import Any

import requests
import requests.adapters
import urllib3

_PATH = re.compile(
    r"/bigquery/v2/projects/(?P<project>[^/]+)"
    r"(?:/datasets/(?P<dataset>[^/]+)(?:/tables(?:/(?P<table>[^/?]+))?)?"
    r"|/jobs(?:/(?P<job>[^/?]+))?)?/?$"
)


@dataclasses.dataclass(frozen=True)
class RecordedRequest:
    """One write the adapter would have sent: ``api`` (``tables.insert``, ``tables.patch`` or
    ``jobs.insert``) and ``resource``, the JSON body as the client serialized it."""

    api: str
    resource: dict[str, Any]

    def to_json(self) -> str:
        """``{"api": ..., "resource": {...}}`` on one line."""
        return json.dumps({"api": self.api, "resource": self.resource}, sort_keys=True)


class PlanRefusedError(RuntimeError):
    """The adapter tried a request a plan may not make (a query, a dataset write)."""


def _response(status: int, payload: dict[str, Any], method: str, url: str) -> requests.Response:
    raw = urllib3.HTTPResponse(
        body=io.BytesIO(json.dumps(payload).encode()),
        status=status,
        headers={"Content-Type": "application/json"},
        preload_content=False,
    )
    request = requests.Request(method, url).prepare()
    return requests.adapters.HTTPAdapter().build_response(request, raw)


def _not_found(method: str, url: str, what: str) -> requests.Response:
    error = {"code": 404, "message": f"Not found: {what}", "errors": [{"reason": "notFound"}]}
    return _response(404, {"error": error}, method, url)


class RecordingSession(requests.Session):
    """A ``requests.Session`` for ``bigquery.Client(_http=...)`` that records writes in
    :attr:`requests`. ``inner``: the authorized session reads go through (unused
    ``offline``); ``location``: the dataset location reported offline."""

    def __init__(
        self, inner: requests.Session | None = None, *, offline: bool, location: str = "US"
    ) -> None:
        super().__init__()
        if inner is None and not offline:
            raise ValueError("an online plan needs the authorized session to read through")
        self.inner = inner
        self.offline = offline
        self.location = location
        self.requests: list[RecordedRequest] = []
        #: Read by google-cloud-core to pick the mTLS endpoint (AuthorizedSession has it).
        self.is_mtls = bool(getattr(inner, "is_mtls", False))

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        path = url.split("://", 1)[-1]
        path = "/" + path.split("/", 1)[1] if "/" in path else "/"
        path = path.split("?", 1)[0]
        match = _PATH.search(path)
        method = method.upper()
        if method == "GET":
            if not self.offline:
                assert self.inner is not None
                return self.inner.request(method, url, *args, **kwargs)
            return self._offline_read(method, url, match)
        body = kwargs.get("data") or (args[0] if args else None)
        resource = json.loads(body) if body else {}
        if match and method == "POST" and match["job"] is None and path.endswith("/jobs"):
            if "query" in resource.get("configuration", {}):
                raise PlanRefusedError(
                    "bq-platform plan refused a query job: a plan sends no query (it would "
                    f"bill bytes): {resource['configuration']['query'].get('query', '')[:200]}"
                )
            self.requests.append(RecordedRequest("jobs.insert", resource))
            return _response(200, _done_job(resource), method, url)
        if match and match["dataset"] and match["table"] is None and path.endswith("/tables"):
            if method == "POST":
                self.requests.append(RecordedRequest("tables.insert", resource))
                return _response(200, _created_table(resource), method, url)
        if match and match["table"] and method in ("PATCH", "PUT"):
            self.requests.append(RecordedRequest("tables.patch", resource))
            return _response(200, _created_table(resource), method, url)
        raise PlanRefusedError(f"bq-platform plan refused {method} {path}: not a planned write")

    def _offline_read(
        self, method: str, url: str, match: re.Match[str] | None
    ) -> requests.Response:
        if match is None:
            return _not_found(method, url, url)
        if match["table"]:
            return _not_found(method, url, f"Table {match['dataset']}.{match['table']}")
        if match["dataset"] and url.split("?", 1)[0].endswith("/tables"):
            return _response(200, {"kind": "bigquery#tableList", "tables": []}, method, url)
        if match["dataset"]:
            reference = {"projectId": match["project"], "datasetId": match["dataset"]}
            payload = {"datasetReference": reference, "location": self.location}
            return _response(200, payload, method, url)
        if match["job"]:
            return _not_found(method, url, f"Job {match['project']}:{match['job']}")
        return _response(200, {"kind": "bigquery#jobList", "jobs": []}, method, url)

    def close(self) -> None:
        if self.inner is not None:
            self.inner.close()
        super().close()


def _now_ms() -> str:
    return str(int(dt.datetime.now(dt.UTC).timestamp() * 1000))


def _created_table(resource: dict[str, Any]) -> dict[str, Any]:
    return {**resource, "creationTime": _now_ms(), "numRows": "0", "type": "TABLE"}


def _done_job(resource: dict[str, Any]) -> dict[str, Any]:
    now = _now_ms()
    return {
        **resource,
        "status": {"state": "DONE"},
        "statistics": {"creationTime": now, "startTime": now, "endTime": now},
    }
