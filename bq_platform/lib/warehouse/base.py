"""The warehouse interface: BigQuery's job model, which the local DuckDB warehouse imitates.

The pipeline talks to a warehouse only through :class:`Warehouse`: it ensures tables, submits
load and copy *jobs* with caller-chosen deterministic IDs, looks jobs up, and reads row counts
from metadata. :mod:`bq_platform.lib.jobs` runs the lookup-before-submit state machine on top.

Semantics every implementation keeps (they are BigQuery's):

- a job ID is used once: submitting an existing ID raises :class:`JobConflictError` (HTTP 409);
- ``WRITE_TRUNCATE`` replaces the destination (a whole table, or one day partition when the
  destination has a partition decorator ``table$YYYYMMDD``) atomically: a failed job leaves it
  as it was;
- a copy into ``table$YYYYMMDD`` fails if a source row's partition column is another day.
"""

import abc
import dataclasses
import datetime as dt
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from bq_platform.lib.warehouse.schema import TableSpec

WriteDisposition = Literal["WRITE_TRUNCATE", "WRITE_APPEND", "WRITE_EMPTY"]
JobState = Literal["PENDING", "RUNNING", "DONE"]

_DECORATOR_RE = re.compile(r"^(?P<table>[A-Za-z_][A-Za-z0-9_]*)(?:\$(?P<day>\d{8}))?$")


class WarehouseError(RuntimeError):
    """A warehouse operation failed; the message names the table or job and what to do."""


class JobConflictError(WarehouseError):
    """A job with this ID already exists (BigQuery answers HTTP 409 ``duplicate``)."""


class JobFailedError(WarehouseError):
    """A job we submitted finished with an error. ``status`` holds the job's error result."""

    def __init__(self, message: str, status: "JobStatus") -> None:
        super().__init__(message)
        self.status = status


class SchemaMismatchError(WarehouseError):
    """An existing table's schema or layout differs from its spec in a non-additive way."""


@dataclasses.dataclass(frozen=True)
class LoadJob:
    """Load Parquet files into a table (BigQuery ``jobs.insert`` with ``configuration.load``).

    Attributes:
        job_id: deterministic ID (see :mod:`bq_platform.lib.jobids`).
        destination: table name, optionally with a partition decorator ``$YYYYMMDD``.
        source_uris: Parquet files (``gs://`` URIs or local paths); at most 10,000
            (cloud.google.com/bigquery/quotas#load_jobs).
        spec: the destination's table spec (explicit schema, never autodetect).
        write_disposition: ``WRITE_TRUNCATE`` replaces the destination.
        labels: job labels (asset, partition, run_id, fingerprint).
    """

    job_id: str
    destination: str
    source_uris: tuple[str, ...]
    spec: TableSpec
    write_disposition: WriteDisposition = "WRITE_TRUNCATE"
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class CopyJob:
    """Copy tables into a destination (BigQuery ``configuration.copy``).

    Attributes:
        job_id: deterministic ID.
        sources: source table names.
        destination: ``table$YYYYMMDD`` to replace one day partition, or a table name.
        write_disposition: ``WRITE_TRUNCATE`` replaces the destination partition.
        labels: job labels.
    """

    job_id: str
    sources: tuple[str, ...]
    destination: str
    write_disposition: WriteDisposition = "WRITE_TRUNCATE"
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)


Job = LoadJob | CopyJob


@dataclasses.dataclass(frozen=True)
class JobStatus:
    """What a job lookup returns.

    Attributes:
        job_id: the job's ID.
        state: ``PENDING``, ``RUNNING`` or ``DONE``.
        error_reason: BigQuery error reason (``invalid``, ``backendError``...) when DONE and failed.
        error_message: human-readable error when DONE and failed.
        output_rows: rows the job wrote (loads and copies), when known.
        labels: the job's labels.
    """

    job_id: str
    state: JobState
    error_reason: str | None = None
    error_message: str | None = None
    output_rows: int | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.state == "DONE"

    @property
    def succeeded(self) -> bool:
        return self.state == "DONE" and self.error_reason is None


@dataclasses.dataclass(frozen=True)
class PublishRecord:
    """What was last published into a destination partition, for later runs and auditors.

    Attributes:
        destination: table name (``pageviews``, ``pageviews_stage_1995080104``...).
        partition: ``YYYYMMDD`` or ``YYYYMMDDHH``; ``""`` for a whole table.
        job_id: the job that wrote it.
        fingerprint: content fingerprint the job ID was built from.
        rows: rows written.
        published_at: UTC time of the record.
    """

    destination: str
    partition: str
    job_id: str
    fingerprint: str
    rows: int
    published_at: dt.datetime


def split_decorator(destination: str) -> tuple[str, dt.date | None]:
    """``'pageviews$19950801'`` -> ``('pageviews', date(1995, 8, 1))``; no decorator -> None.

    Raises:
        ValueError: if the name or the decorator is malformed.
    """
    match = _DECORATOR_RE.match(destination)
    if not match:
        raise ValueError(f"not a table name with an optional $YYYYMMDD decorator: {destination!r}")
    day = match["day"]
    return match["table"], (dt.datetime.strptime(day, "%Y%m%d").date() if day else None)


class Warehouse(abc.ABC):
    """Tables and jobs. Implementations: DuckDB (local) and BigQuery (production)."""

    @abc.abstractmethod
    def ensure_table(self, spec: TableSpec) -> None:
        """Create the table if missing, else check it against ``spec``; cached per fingerprint.

        Additive changes (new NULLABLE columns) are applied; anything else raises.

        Raises:
            SchemaMismatchError: if the table exists with an incompatible schema or layout.
        """

    @abc.abstractmethod
    def table_exists(self, table: str) -> bool:
        """True if the table exists."""

    @abc.abstractmethod
    def get_job(self, job_id: str) -> JobStatus | None:
        """Look a job up by ID; None if no such job exists."""

    @abc.abstractmethod
    def submit_job(self, job: Job) -> JobStatus:
        """Submit a job with its own ID and return its status (may still be running).

        Raises:
            JobConflictError: if a job with this ID already exists.
        """

    @abc.abstractmethod
    def wait_job(self, job_id: str, timeout_s: float = 3600.0) -> JobStatus:
        """Block until the job is DONE (or ``timeout_s`` seconds pass) and return its status.

        Raises:
            TimeoutError: if the job is not DONE within ``timeout_s``.
        """

    @abc.abstractmethod
    def table_rows(self, table: str) -> int | None:
        """Rows in a table from metadata (no scan); None if the table does not exist."""

    @abc.abstractmethod
    def partition_rows(self, table: str, day: dt.date) -> int:
        """Rows of a day partition from metadata (``INFORMATION_SCHEMA.PARTITIONS``); 0 if empty."""

    @abc.abstractmethod
    def jobs_submitted(self, table: str, day: dt.date) -> int:
        """Jobs submitted with ``table`` as destination on UTC ``day`` (for budgets)."""

    @abc.abstractmethod
    def read_publish_record(self, destination: str, partition: str) -> PublishRecord | None:
        """The last :class:`PublishRecord` for a destination partition, or None."""

    @abc.abstractmethod
    def write_publish_record(self, record: PublishRecord) -> None:
        """Store ``record``, replacing the previous one for the same destination partition."""

    @abc.abstractmethod
    def replace_audit_rows(
        self, hours: Sequence[dt.datetime], rows: Sequence[Mapping[str, Any]]
    ) -> None:
        """Atomically replace ``pageviews_audit`` rows of ``hours`` (UTC) with ``rows``."""

    @abc.abstractmethod
    def audit_rows(self, start: dt.datetime, end: dt.datetime) -> list[dict[str, Any]]:
        """``pageviews_audit`` rows with ``start <= hour < end`` (UTC), ordered by hour, site."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default does nothing."""
