"""BigQuery's job model: load and copy jobs, what a job lookup returns, and the check of a job
against BigQuery's rules before it is sent or run (:mod:`.rules`, :mod:`.job_rules`).
"""

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Literal

from bq_platform.lib.warehouse import job_rules, rules
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform.lib.warehouse.schema import TableSpec

WriteDisposition = Literal["WRITE_TRUNCATE", "WRITE_APPEND", "WRITE_EMPTY"]
JobState = Literal["PENDING", "RUNNING", "DONE"]


@dataclasses.dataclass(frozen=True)
class LoadJob:
    """Load Parquet files into a table (BigQuery ``jobs.insert`` with ``configuration.load``).

    Attributes:
        job_id: deterministic ID (see :mod:`bq_platform.lib.core.job_ids`).
        destination: table name, optionally with a partition decorator ``$YYYYMMDD``.
        source_uris: Parquet files (``gs://`` URIs or local paths); at most 10,000.
        spec: the destination's table spec (explicit schema, never autodetect).
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
        sources: source table names, each with the destination's schema, partitioning and
            clustering (:func:`bq_platform.lib.warehouse.job_rules.check_copy_job`).
        destination: ``table$YYYYMMDD`` to replace one day partition, or a table name.
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
        error_reason: BigQuery error reason (``invalid``, ``backendError``...) when DONE and failed.
        output_rows: rows the job wrote, when known.
        ended: UTC time the job finished, when known.
    """

    job_id: str
    state: JobState
    error_reason: str | None = None
    error_message: str | None = None
    output_rows: int | None = None
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ended: dt.datetime | None = None

    @property
    def done(self) -> bool:
        return self.state == "DONE"

    @property
    def succeeded(self) -> bool:
        return self.state == "DONE" and self.error_reason is None


def job_tables(job: Job) -> list[str]:
    """The tables ``job`` names (no decorators): its destination, then a copy's sources, each
    once."""
    names = [rules.split_destination(job.destination)[0]]
    if isinstance(job, CopyJob):
        names += [rules.split_destination(source)[0] for source in job.sources]
    return list(dict.fromkeys(names))


def validate_job(job: Job, spec_of: Callable[[str], TableSpec | None]) -> None:
    """Check a load or copy job against BigQuery's rules (:mod:`.rules`).

    Args:
        job: the job.
        spec_of: the spec of a table (no decorator), None if it does not exist.

    Raises:
        RuleViolation: naming the job, the rule and its source, if BigQuery would refuse it.
    """
    table, _ = rules.split_destination(job.destination)
    if isinstance(job, LoadJob):
        job_rules.check_load_job(
            job.job_id,
            job.destination,
            job.source_uris,
            job.spec,
            spec_of(table) or job.spec,
            job.write_disposition,
            job.labels,
        )
        return
    destination_spec = spec_of(table)
    if destination_spec is None:
        raise RuleViolation(
            f"BigQuery would refuse copy job {job.job_id}: destination table {table} does not "
            "exist and we never let a copy create a table (CREATE_NEVER); ensure it first "
            "(source: /bigquery/docs/reference/rest/v2/Job#JobConfigurationTableCopy)"
        )
    sources = sorted({rules.split_destination(s)[0] for s in job.sources})
    job_rules.check_copy_job(
        job.job_id,
        job.destination,
        job.sources,
        {name: spec_of(name) for name in sources},
        destination_spec,
        job.write_disposition,
        job.labels,
    )
