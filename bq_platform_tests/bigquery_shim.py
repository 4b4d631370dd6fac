"""BigQueryShim: what bqemulator lacks of BigQuery's documented behaviour, answered in front of it.

TEST CODE ONLY: never import this from ``bq_platform``. The production adapter
(:class:`~bq_platform.lib.warehouse.bigquery.warehouse.BigQueryWarehouse`) talks to bqemulator
through a
:class:`~bq_platform_tests.http_recording.RecordingSession` that has a :class:`BigQueryShim` as its
responder. The shim answers the requests below itself, the way BigQuery documents them, by
running plain SQL and whole-table loads on the emulator (which it does support), and passes
every other request through unchanged. Each behaviour names its source and the emulator gap it
covers; ``bq_platform_tests/lib/warehouse/bigquery/test_warehouse.py`` keeps a test per gap that
runs the
raw emulator and fails the day the emulator learns the behaviour, so the shim can shrink.

Behaviours (cloud.google.com pages unless stated):

- **tables.get of a table or of ``table$YYYYMMDD``** answers ``numRows`` of the table or of
  that day partition (``/bigquery/docs/reference/rest/v2/tables#Table``: ``numRows``;
  ``/bigquery/docs/managing-partitioned-table-data``: ``$YYYYMMDD`` addresses one partition;
  ``bq show 'dataset.table$YYYYMMDD'``). GAP-DECORATOR-GET: the emulator answers 404 for a
  decorated ID; GAP-NUMROWS: its ``numRows`` is not updated by DML, copies or failed loads.
  Counted with ``COUNT(*)`` on the emulator (the shim's cost, not production's: BigQuery
  reads it from metadata, 0 bytes billed).
- **tabledata.list of ``table$YYYYMMDD``** lists that day partition's rows
  (``/bigquery/docs/reference/rest/v2/tabledata/list``; ``/bigquery/docs/
  managing-partitioned-table-data``: a decorator addresses one partition). GAP-DECORATOR-LIST:
  the emulator answers 404. :mod:`bq_platform_tests.bigquery_shim_lists` lists the whole
  table on the emulator and keeps that day's rows.
- **jobs.insert with a job ID that exists** answers HTTP 409 ``duplicate``
  (``/bigquery/docs/running-jobs#generate-jobid``: "If you use the same job ID ... the job
  is not run again"; ``/bigquery/docs/error-messages``: ``duplicate``, 409). GAP-409: the
  emulator runs the job again.
- **load jobs** (``/bigquery/docs/reference/rest/v2/Job#JobConfigurationLoad``): the files are
  loaded into a scratch table first; ``WRITE_TRUNCATE`` then replaces the destination (or the
  day partition of ``table$YYYYMMDD``) in one transaction, so a failed load leaves the
  destination as it was ("Each action is atomic": ``writeDisposition``; GAP-TRUNCATE: the
  emulator empties it), ``statistics.load.outputRows`` is the rows this job wrote
  (GAP-OUTPUT-ROWS: the emulator reports the table total), and ``table$YYYYMMDD`` works
  (GAP-DECORATOR: 400 "Invalid table id").
- **copy jobs** (``/bigquery/docs/managing-partitioned-tables#copy_partitions``, "Modifying
  partitioned tables"): all sources are copied (GAP-COPY-MULTI: only the first is),
  ``WRITE_TRUNCATE`` into ``table$YYYYMMDD`` replaces that one day partition atomically (a
  DELETE of the day and an INSERT ... SELECT in one transaction script; GAP-DECORATOR), and
  ``statistics.copy.copiedRows`` is set (REST ``JobStatistics5``; GAP-COPY-STATS).
- **The rules**: before a load or copy runs, the shim applies BigQuery's rules from
  :mod:`bq_platform.lib.warehouse.rules` (job ID, labels, decorator only on a DAY-partitioned
  table, copy sources partitioned and clustered like the destination, at most 10,000 URIs)
  and answers 400 ``invalid`` as BigQuery would; a write into ``table$YYYYMMDD`` with rows of
  another day fails the job with BigQuery's text ("Some rows belong to different partitions
  rather than destination partition YYYYMMDD"; mozilla/bigquery-etl PR 4419).

Not answered (passed through): ``jobs.list`` (the shim's jobs are not in the emulator's list;
budget tests use the emulator's own jobs), query jobs, datasets, table create/patch/delete.
"""

import collections
import copy
import datetime as dt
import re
import uuid
from typing import Any
from urllib.parse import unquote

import requests
from google.api_core import exceptions as api_exceptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery

from bq_platform.lib.warehouse import job_rules, rules
from bq_platform.lib.warehouse.bigquery.warehouse import schema_fields, spec_of
from bq_platform.lib.warehouse.schema import Column, TableSpec
from bq_platform_tests.bigquery_shim_lists import DATA_PATH, PartitionLists
from bq_platform_tests.http_recording import HttpCall, RecordingSession, json_response

_TABLE_PATH = re.compile(r"^/bigquery/v2/projects/([^/]+)/datasets/([^/]+)/tables/([^/]+)$")
_JOBS_PATH = re.compile(r"^/bigquery/v2/projects/([^/]+)/jobs$")
_JOB_PATH = re.compile(r"^/bigquery/v2/projects/([^/]+)/jobs/([^/]+)$")
SCRATCH_PREFIX = "_shim_scratch_"


def _now_ms() -> str:
    return str(int(dt.datetime.now(dt.UTC).timestamp() * 1000))


def error_response(code: int, reason: str, message: str) -> requests.Response:
    """An API error as BigQuery sends it (``error.errors[0].reason``)."""
    status = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND", 409: "ALREADY_EXISTS"}.get(code, "")
    return json_response(
        code,
        {
            "error": {
                "code": code,
                "message": message,
                "status": status,
                "errors": [{"reason": reason, "domain": "global", "message": message}],
            }
        },
    )


class JobRefused(Exception):
    """A load or copy the shim fails as BigQuery would: (reason, message) of ``errorResult``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class BigQueryShim(PartitionLists):
    """A responder for :class:`RecordingSession` that gives bqemulator BigQuery's behaviour.

    Args:
        endpoint: the emulator's REST base URL.
        project: the emulator's project.

    Attributes:
        jobs: job resources of the loads and copies the shim ran, by job ID.
        answered: how often each behaviour answered (``tables.get``, ``tables.get$``,
            ``409``, ``load``, ``copy``, ``jobs.get``, ``tabledata.list$``), so tests can see the
            shim was used.
    """

    def __init__(self, endpoint: str, project: str) -> None:
        self.endpoint = endpoint.rstrip("/")
        self._http = requests.Session()
        self._http.trust_env = False  # loopback only
        self.project = project
        self.backend = bigquery.Client(
            project=project,
            location="US",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": endpoint},
            _http=self._http,
        )
        self.jobs: dict[str, dict[str, Any]] = {}
        self.answered: collections.Counter[str] = collections.Counter()

    def close(self) -> None:
        """Close the shim's own HTTP session to the emulator."""
        self._http.close()

    def session(self) -> RecordingSession:
        """A new recording session answered by this shim (one per warehouse object = run)."""
        session = RecordingSession()
        session.responders.append(self)
        return session

    # -- dispatch ----------------------------------------------------------------------------

    def __call__(self, call: HttpCall) -> requests.Response | None:
        path = unquote(call.path)
        if call.method == "GET" and (match := DATA_PATH.match(path)):
            return self._partition_list(call, *match.groups())
        if call.method == "GET" and (match := _TABLE_PATH.match(path)):
            return self._table_get(*match.groups())
        if call.method == "GET" and (match := _JOB_PATH.match(path)):
            resource = self.jobs.get(match[2])
            if resource is not None:
                self.answered["jobs.get"] += 1
                return json_response(200, resource)
            return None
        if call.method == "POST" and _JOBS_PATH.match(path) and isinstance(call.body, dict):
            configuration = call.body.get("configuration", {})
            if "load" in configuration or "copy" in configuration:
                return self._job_insert(call.body)
        return None

    # -- tables.get --------------------------------------------------------------------------

    def _table(self, project: str, dataset: str, name: str) -> bigquery.Table | None:
        try:
            return self.backend.get_table(f"{project}.{dataset}.{name}")
        except api_exceptions.NotFound:
            return None

    def _count(self, sql: str, params: list[Any] | None = None) -> int:
        config = bigquery.QueryJobConfig(query_parameters=params or [])
        rows = list(self.backend.query(sql, job_config=config).result())
        return int(rows[0][0])

    def _table_get(self, project: str, dataset: str, table_id: str) -> requests.Response | None:
        try:
            name, day = rules.split_destination(table_id)
        except rules.RuleViolation as exc:
            return error_response(400, "invalid", str(exc))
        table = self._table(project, dataset, name)
        if table is None:
            return None  # the emulator answers 404 itself
        ref = f"`{project}.{dataset}.{name}`"
        resource = table.to_api_repr()
        if day is None:
            self.answered["tables.get"] += 1
            resource["numRows"] = str(self._count(f"SELECT COUNT(*) FROM {ref}"))
            return json_response(200, resource)
        field = table.time_partitioning.field if table.time_partitioning else None
        if field is None:
            return error_response(
                400, "invalid", f"{table_id}: a partition decorator needs a partitioned table"
            )
        self.answered["tables.get$"] += 1
        rows = self._count(
            f"SELECT COUNT(*) FROM {ref} WHERE {field} = @day",
            [bigquery.ScalarQueryParameter("day", "DATE", day)],
        )
        resource["numRows"] = str(rows)
        resource["tableReference"]["tableId"] = table_id
        return json_response(200, resource)

    # -- jobs.insert -------------------------------------------------------------------------

    def _job_insert(self, body: dict[str, Any]) -> requests.Response:
        ref = body.get("jobReference", {})
        job_id = ref.get("jobId") or f"shim_{uuid.uuid4().hex}"
        if job_id in self.jobs:
            self.answered["409"] += 1
            return error_response(
                409, "duplicate", f"Already Exists: Job {ref.get('projectId')}:US.{job_id}"
            )
        configuration = body["configuration"]
        kind = "load" if "load" in configuration else "copy"
        created = _now_ms()
        try:
            if kind == "load":
                stats = {"outputRows": str(self._load(job_id, configuration))}
            else:
                stats = {"copiedRows": str(self._copy(job_id, configuration))}
            error = None
        except rules.RuleViolation as exc:
            return error_response(400, "invalid", str(exc))
        except JobRefused as exc:
            stats, error = {}, {"reason": exc.reason, "message": str(exc)}
        self.answered[kind] += 1
        resource = copy.deepcopy(body)
        resource["jobReference"] = {
            "projectId": ref.get("projectId", self.project),
            "jobId": job_id,
            "location": ref.get("location", "US"),
        }
        resource.update(kind="bigquery#job", id=f"{self.project}:US.{job_id}")
        resource["status"] = {"state": "DONE"}
        if error is not None:
            resource["status"].update(errorResult=error, errors=[error])
        resource["statistics"] = {"creationTime": created, "startTime": created}
        resource["statistics"]["endTime"] = _now_ms()
        if stats:
            resource["statistics"][kind] = stats
        self.jobs[job_id] = resource
        return json_response(200, resource)

    def _spec(self, table: dict[str, str]) -> tuple[str, TableSpec | None]:
        """(fully qualified name without decorator, spec or None) of a table reference."""
        name, _ = rules.split_destination(table["tableId"])
        found = self._table(table["projectId"], table["datasetId"], name)
        full = f"{table['projectId']}.{table['datasetId']}.{name}"
        return full, spec_of(found) if found is not None else None

    def _load(self, job_id: str, configuration: dict[str, Any]) -> int:
        load = configuration["load"]
        destination = load["destinationTable"]
        full, spec = self._spec(destination)
        if spec is None:
            raise JobRefused("notFound", f"Not found: Table {full}")
        schema = TableSpec(
            name=spec.name,
            columns=tuple(
                Column(f["name"], f.get("type", "STRING"), f.get("mode", "NULLABLE"))
                for f in load.get("schema", {}).get("fields", [])
            ),
        )
        disposition = load.get("writeDisposition", "WRITE_APPEND")
        job_rules.check_load_job(
            job_id,
            destination["tableId"],
            load["sourceUris"],
            schema,
            spec,
            disposition,
            configuration.get("labels", {}),
        )
        scratch = f"{full.rsplit('.', 1)[0]}.{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}"
        self.backend.create_table(bigquery.Table(scratch, schema=schema_fields(schema.columns)))
        try:
            try:
                loaded = self.backend.load_table_from_uri(
                    load["sourceUris"],
                    scratch,
                    job_config=bigquery.LoadJobConfig(
                        schema=schema_fields(schema.columns),
                        source_format=load.get("sourceFormat", "PARQUET"),
                        write_disposition="WRITE_TRUNCATE",
                    ),
                ).result()
            except api_exceptions.GoogleAPIError as exc:
                errors = getattr(exc, "errors", None) or [{}]
                reason = errors[0].get("reason") if isinstance(errors[0], dict) else None
                raise JobRefused(reason or "invalid", exc.message) from exc
            # The scratch table is new, so the emulator's table total is this job's rows.
            rows = int(loaded.output_rows or 0)
            sources = [(scratch, "")]
            return self._write(destination["tableId"], full, spec, sources, disposition, rows)
        finally:
            self.backend.delete_table(scratch, not_found_ok=True)

    def _copy(self, job_id: str, configuration: dict[str, Any]) -> int:
        job = configuration["copy"]
        destination = job["destinationTable"]
        full, spec = self._spec(destination)
        if spec is None:
            raise JobRefused("notFound", f"Not found: Table {full} (createDisposition)")
        sources = job.get("sourceTables") or [job["sourceTable"]]
        specs: dict[str, TableSpec | None] = {}
        selects: list[tuple[str, str]] = []
        for source in sources:
            source_full, source_spec = self._spec(source)
            specs[source_spec.name if source_spec else source["tableId"]] = source_spec
            _, day = rules.split_destination(source["tableId"])
            where = ""
            if day is not None and source_spec is not None and source_spec.partition_field:
                where = f" WHERE {source_spec.partition_field} = DATE '{day.isoformat()}'"
            selects.append((source_full, where))
        job_rules.check_copy_job(
            job_id,
            destination["tableId"],
            [s["tableId"] for s in sources],
            specs,
            spec,
            job.get("writeDisposition", "WRITE_EMPTY"),
            configuration.get("labels", {}),
        )
        disposition = job.get("writeDisposition", "WRITE_EMPTY")
        return self._write(destination["tableId"], full, spec, selects, disposition)

    def _write(
        self,
        destination: str,
        full: str,
        spec: TableSpec,
        sources: list[tuple[str, str]],
        disposition: str,
        rows: int | None = None,
    ) -> int:
        """Write the rows of ``sources`` (``(table, " WHERE ..." or "")``) into the destination,
        replacing it or its day partition for WRITE_TRUNCATE, in one transaction script.
        ``rows``: the sources' row count when known (else counted).

        Returns:
            The rows written.

        Raises:
            JobRefused: rows of another day for ``table$YYYYMMDD``, WRITE_EMPTY into a
                non-empty destination, or a failed script (nothing changed).
        """
        _, day = rules.split_destination(destination)
        columns = ", ".join(c.name for c in spec.columns)
        union = " UNION ALL ".join(f"SELECT {columns} FROM `{t}`{w}" for t, w in sources)
        if rows is None:
            rows = self._count(f"SELECT COUNT(*) FROM ({union})")
        target = "TRUE"
        if day is not None:
            field = spec.partition_field
            # Dates come from validated decorators; scripts do not bind parameters (emulator).
            target = f"{field} = DATE '{day.isoformat()}'"
            others = self.backend.query(
                f"SELECT DISTINCT {field} FROM ({union}) "
                f"WHERE {field} IS NULL OR {field} != DATE '{day.isoformat()}' LIMIT 3"
            ).result()
            try:
                job_rules.check_partition_rows(destination, day, [r[0] for r in others])
            except rules.RuleViolation as exc:
                raise JobRefused("invalid", str(exc)) from exc
        if disposition == "WRITE_EMPTY" and self._count(
            f"SELECT COUNT(*) FROM `{full}` WHERE {target}"
        ):
            raise JobRefused("duplicate", f"Already Exists: {destination} is not empty")
        delete = f"DELETE FROM `{full}` WHERE {target}; " if disposition == "WRITE_TRUNCATE" else ""
        script = (
            f"BEGIN TRANSACTION; {delete}"
            f"INSERT INTO `{full}` ({columns}) {union}; COMMIT TRANSACTION;"
        )
        try:
            self.backend.query(script).result()
        except api_exceptions.GoogleAPIError as exc:
            raise JobRefused("invalid", exc.message) from exc
        return rows
