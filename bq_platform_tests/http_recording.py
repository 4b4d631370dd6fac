"""HTTP recording and simulated answers for the Google clients in tests (offline).

:class:`RecordingSession` is an HTTP session for the official clients (``Client(_http=...)``)
that records every request and can answer selected ones itself: it captures the exact job
resources sent (``jobs.insert`` bodies are ``job.to_api_repr()``), and :class:`SimulatedJobs`
answers what the emulator cannot (partition decorators, 409 on a reused job ID, failed jobs)
the way BigQuery does. The emulators themselves: :mod:`bq_platform_tests.emulators`.
"""

import copy
import dataclasses
import datetime as dt
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import requests

from bq_platform_tests.emulators import BQ_PROJECT


@dataclasses.dataclass
class HttpCall:
    """One request made through a :class:`RecordingSession`.

    Attributes:
        method: HTTP method.
        path: URL path, e.g. ``/bigquery/v2/projects/p/jobs``.
        query: query-string parameters (first value of each).
        body: the JSON body, parsed (None for no body).
        status: HTTP status of the answer.
        simulated: True if a responder answered instead of the emulator.
    """

    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int = 0
    simulated: bool = False


Responder = Callable[[HttpCall], "requests.Response | None"]


def json_response(
    status: int, payload: Any, url: str = "http://simulated/", method: str = "GET"
) -> requests.Response:
    """A ``requests.Response`` with a JSON body, as the Google clients expect."""
    response = requests.Response()
    response.request = requests.Request(method, url).prepare()
    response.status_code = status
    response._content = json.dumps(payload).encode()
    response.headers["Content-Type"] = "application/json; charset=UTF-8"
    response.url = url
    response.encoding = "utf-8"
    return response


class RecordingSession(requests.Session):
    """A requests session that records calls and lets responders answer some of them.

    Responders are tried in order; the first that returns a response answers, otherwise the
    request goes to the real server (the emulator).
    """

    def __init__(self) -> None:
        super().__init__()
        self.trust_env = False  # loopback only: ignore proxy settings
        self.calls: list[HttpCall] = []
        self.responders: list[Responder] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        parts = urlsplit(url)
        data = kwargs.get("data")
        body: Any = None
        if data:
            try:
                body = json.loads(data)
            except (TypeError, ValueError):
                body = data
        call = HttpCall(
            method=method.upper(),
            path=parts.path,
            query={k: v[0] for k, v in parse_qs(parts.query).items()},
            body=body,
        )
        self.calls.append(call)
        for responder in self.responders:
            response = responder(call)
            if response is not None:
                call.status, call.simulated = response.status_code, True
                return response
        response = super().request(method, url, *args, **kwargs)
        call.status = response.status_code
        return response

    def job_inserts(self) -> list[dict[str, Any]]:
        """Bodies of ``jobs.insert`` requests for load and copy jobs, in order."""
        return [
            c.body
            for c in self.calls
            if c.method == "POST"
            and c.path.endswith("/jobs")
            and isinstance(c.body, dict)
            and ({"load", "copy"} & set(c.body.get("configuration", {})))
        ]

    def table_metadata_calls(self, table: str) -> list[HttpCall]:
        """``tables.get``/``insert``/``patch``/``update`` requests that concern ``table``."""
        out = []
        for c in self.calls:
            if "/tables" not in c.path or "/jobs" in c.path:
                continue
            if c.path.endswith(f"/tables/{table}"):
                out.append(c)
            elif c.method == "POST" and c.path.endswith("/tables") and isinstance(c.body, dict):
                if c.body.get("tableReference", {}).get("tableId") == table:
                    out.append(c)
        return out


def _now_ms() -> str:
    return str(int(dt.datetime.now(dt.UTC).timestamp() * 1000))


class SimulatedJobs:
    """Answers ``jobs.insert``/``jobs.get`` for selected jobs the way BigQuery does.

    Used where bqemulator differs from BigQuery (each use names the gap):

    - ``intercept(body)`` decides which inserted jobs are simulated (e.g. copies into
      ``table$YYYYMMDD``, which the emulator rejects with 400); they finish DONE at once, with
      ``statistics.copy.copiedRows = copied_rows``;
    - a simulated job ID that is inserted again gets HTTP 409 ``duplicate`` (the emulator runs
      the job a second time);
    - :meth:`add_existing` plants a job (DONE, RUNNING, or failed with an ``errorResult``) that
      ``jobs.get`` returns and ``jobs.insert`` conflicts with.
    """

    def __init__(self, intercept: Callable[[dict[str, Any]], bool], copied_rows: int = 0) -> None:
        self.intercept = intercept
        self.copied_rows = copied_rows
        self.jobs: dict[str, dict[str, Any]] = {}
        self.running_polls: dict[str, int] = {}
        self.hidden_gets: dict[str, int] = {}

    def add_existing(
        self,
        body: dict[str, Any],
        *,
        state: str = "DONE",
        error: dict[str, str] | None = None,
        running_polls: int = 0,
        hidden_gets: int = 0,
    ) -> None:
        """Plant a job resource (what another run submitted before).

        Args:
            body: the job resource as inserted (``jobReference`` + ``configuration``).
            state: ``DONE``, ``RUNNING`` or ``PENDING``.
            error: an ``errorResult`` (``{"reason", "message"}``): the job failed.
            running_polls: answer ``RUNNING`` to this many ``jobs.get`` first, then DONE.
            hidden_gets: answer 404 to this many ``jobs.get`` first (the job was inserted by
                another run between our lookup and our insert: the 409 race).
        """
        resource = self._resource(body)
        resource["status"] = {"state": state}
        if error is not None:
            resource["status"] = {"state": "DONE", "errorResult": error, "errors": [error]}
        self.jobs[body["jobReference"]["jobId"]] = resource
        if running_polls:
            self.running_polls[body["jobReference"]["jobId"]] = running_polls
        if hidden_gets:
            self.hidden_gets[body["jobReference"]["jobId"]] = hidden_gets

    def _resource(self, body: dict[str, Any]) -> dict[str, Any]:
        resource = copy.deepcopy(body)
        job_id = resource["jobReference"]["jobId"]
        project = resource["jobReference"].get("projectId", BQ_PROJECT)
        resource["jobReference"].setdefault("location", "US")
        resource["id"] = f"{project}:US.{job_id}"
        resource["kind"] = "bigquery#job"
        resource["status"] = {"state": "DONE"}
        statistics: dict[str, Any] = {
            "creationTime": _now_ms(),
            "startTime": _now_ms(),
            "endTime": _now_ms(),
        }
        if "copy" in resource.get("configuration", {}):
            statistics["copy"] = {"copiedRows": str(self.copied_rows)}
        resource["statistics"] = statistics
        return resource

    def __call__(self, call: HttpCall) -> requests.Response | None:
        if call.method == "POST" and call.path.endswith("/jobs") and isinstance(call.body, dict):
            job_id = call.body.get("jobReference", {}).get("jobId")
            if job_id in self.jobs:
                return json_response(
                    409,
                    {
                        "error": {
                            "code": 409,
                            "status": "ALREADY_EXISTS",
                            "message": f"Already Exists: Job {BQ_PROJECT}:US.{job_id}",
                            "errors": [
                                {
                                    "reason": "duplicate",
                                    "domain": "global",
                                    "message": f"Already Exists: Job {job_id}",
                                }
                            ],
                        }
                    },
                )
            if self.intercept(call.body):
                self.jobs[job_id] = self._resource(call.body)
                return json_response(200, self.jobs[job_id])
            return None
        if call.method == "GET" and "/jobs/" in call.path:
            job_id = call.path.rsplit("/", 1)[-1]
            if self.hidden_gets.get(job_id, 0) > 0:
                self.hidden_gets[job_id] -= 1
                return json_response(
                    404,
                    {
                        "error": {
                            "code": 404,
                            "message": f"Not found: Job {BQ_PROJECT}:US.{job_id}",
                            "errors": [{"reason": "notFound", "message": "Not found"}],
                        }
                    },
                )
            if job_id in self.jobs:
                resource = copy.deepcopy(self.jobs[job_id])
                if self.running_polls.get(job_id, 0) > 0:
                    self.running_polls[job_id] -= 1
                    resource["status"] = {"state": "RUNNING"}
                return json_response(200, resource)
        return None
