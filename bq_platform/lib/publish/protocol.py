"""The publish protocol, idempotent through deterministic job IDs: hourly load jobs into stage
tables (:func:`load_stage_hours`), the completeness gate (:func:`day_completeness`), and one
``WRITE_TRUNCATE`` copy job per day into the day partition (:func:`publish_days`).
"""

import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence

from bq_platform.lib.core.hours import day_hours
from bq_platform.lib.core.job_ids import (
    day_fingerprint,
    day_partition,
    hour_partition,
    job_id,
    job_labels,
)
from bq_platform.lib.core.layout import hour_label
from bq_platform.lib.core.manifest import HourManifest, read_hour_manifests, stage_files
from bq_platform.lib.publish.idempotent_jobs import JobOutcome, JobRequest, run_idempotent_jobs
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.quality import rejected_share as quality
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.warehouse.base import CopyJob, Job, LoadJob, Warehouse
from bq_platform.lib.warehouse.schema import (
    TableSpec,
    pageviews_sample_spec,
    pageviews_spec,
    stage_spec,
)

KINDS = ("full", "sample")
#: How :func:`day_completeness` starts the problem of an hour above the rejected share.
REJECTED_SHARE_PROBLEM = "rejected share above"


def published_spec(kind: str, require_partition_filter: bool) -> TableSpec:
    """Spec of the published table of ``kind`` (``full`` -> pageviews, ``sample``)."""
    if kind == "full":
        return pageviews_spec(require_partition_filter)
    if kind == "sample":
        return pageviews_sample_spec(require_partition_filter)
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")


def expected_rows(manifest: HourManifest, kind: str) -> int:
    """Rows the hour's ``kind`` files hold according to its manifest."""
    return manifest.rows if kind == "full" else manifest.sample_rows


@dataclasses.dataclass(frozen=True)
class StageResult:
    """Outcome of one hour's load: the job and the rows found in the stage table afterwards."""

    hour: dt.datetime
    table: str
    outcome: JobOutcome
    table_rows: int | None
    expected_rows: int

    @property
    def matches(self) -> bool:
        return self.table_rows == self.expected_rows


@dataclasses.dataclass(frozen=True)
class JobPlan:
    """One idempotent job as the publish protocol builds it (``run`` runs it, ``plan`` shows it).

    ``spec`` is ensured before the job; ``make_job`` builds the job of a generation;
    ``partition`` is ``YYYYMMDDHH`` (an hour's stage table) or ``YYYYMMDD`` (a day partition).
    """

    spec: TableSpec
    make_job: Callable[[int], Job]
    fingerprint: str
    partition: str


def run_plan(
    warehouse: Warehouse,
    plan: JobPlan,
    *,
    budget: JobBudget | None = None,
    log: logging.Logger | None = None,
) -> JobOutcome:
    """Ensure the plan's destination table, then run its job at most once per content.

    Raises:
        JobFailedError / QuotaBudgetExceededError / RuleViolation: see
            :func:`~bq_platform.lib.publish.idempotent_jobs.run_idempotent_job`.
    """
    (outcome,) = run_plans(warehouse, [plan], budget=budget, log=log)
    return outcome


def run_plans(
    warehouse: Warehouse,
    plans: Sequence[JobPlan],
    *,
    budget: JobBudget | None = None,
    log: logging.Logger | None = None,
) -> list[JobOutcome]:
    """:func:`run_plan` for many plans, all submitted before any is waited for; one outcome per
    plan, in order.

    Raises:
        JobFailedError / QuotaBudgetExceededError / RuleViolation: the first job's error, see
            :func:`~bq_platform.lib.publish.idempotent_jobs.run_idempotent_jobs`.
    """
    warehouse.ensure_tables([plan.spec for plan in plans])
    return run_idempotent_jobs(
        warehouse,
        [JobRequest(p.make_job, p.fingerprint, p.partition) for p in plans],
        budget=budget,
        log=log,
    )


def stage_load_plan(
    store: ObjectStore, manifest: HourManifest, kind: str, *, asset: str, run_id: str
) -> JobPlan:
    """The WRITE_TRUNCATE load job of one hour's ``kind`` Parquet files into its stage table."""
    spec = stage_spec(kind, manifest.hour)
    uris = tuple(store.uri(key) for key in stage_files(manifest, kind))
    partition = hour_partition(manifest.hour)
    fingerprint = manifest.fingerprint

    def make_job(generation: int) -> LoadJob:
        return LoadJob(
            job_id=job_id("load", spec.name, partition, fingerprint, generation),
            destination=spec.name,
            source_uris=uris,
            spec=spec,
            write_disposition="WRITE_TRUNCATE",
            labels=job_labels(asset, partition, run_id, fingerprint),
        )

    return JobPlan(spec, make_job, fingerprint, partition)


def day_copy_plan(
    day: dt.date,
    ready: Mapping[dt.datetime, HourManifest],
    kind: str,
    *,
    asset: str,
    run_id: str,
    require_partition_filter: bool,
) -> JobPlan:
    """The WRITE_TRUNCATE copy job of the ``ready`` hours' stage tables into ``table$YYYYMMDD``.

    Raises:
        ValueError: if ``ready`` is empty.
    """
    spec = published_spec(kind, require_partition_filter)
    if not ready:
        raise ValueError(f"no hour of {day} is ready to publish into {spec.name}")
    partition = day_partition(day)
    fingerprint = day_fingerprint({hour_label(h): m.fingerprint for h, m in ready.items()})
    # Each source names the day's partition: see job_rules.check_copy_job.
    sources = tuple(f"{stage_spec(kind, h).name}${partition}" for h in sorted(ready))
    destination = f"{spec.name}${partition}"

    def make_job(generation: int) -> CopyJob:
        return CopyJob(
            job_id=job_id("copy", spec.name, partition, fingerprint, generation),
            sources=sources,
            destination=destination,
            write_disposition="WRITE_TRUNCATE",
            labels=job_labels(asset, partition, run_id, fingerprint),
        )

    return JobPlan(spec, make_job, fingerprint, partition)


def load_stage_hours(
    warehouse: Warehouse,
    store: ObjectStore,
    manifests: Sequence[HourManifest],
    assets: Mapping[str, str],
    *,
    run_id: str,
    budget: JobBudget | None = None,
    log: logging.Logger | None = None,
) -> dict[str, list[StageResult]]:
    """Load each hour's Parquet files of each kind into its stage table, at most once per
    content: one load job per hour and kind, all submitted before any is waited for.
    ``assets`` maps each kind (``full``, ``sample``) to the asset its jobs' labels name.
    Returns kind -> one :class:`StageResult` per manifest, in order.

    Raises:
        JobFailedError: if a load job fails (bad Parquet, schema drift); the other jobs are
            waited for and recorded first.
        QuotaBudgetExceededError: if a stage table's daily budget is spent.
        RuleViolation: if BigQuery would refuse a table or a job.
    """
    planned = [
        (kind, manifest, stage_load_plan(store, manifest, kind, asset=asset, run_id=run_id))
        for kind, asset in assets.items()
        for manifest in manifests
    ]
    outcomes = run_plans(warehouse, [plan for *_, plan in planned], budget=budget, log=log)
    rows = warehouse.tables_rows([plan.spec.name for *_, plan in planned])
    results: dict[str, list[StageResult]] = {kind: [] for kind in assets}
    for (kind, manifest, plan), outcome in zip(planned, outcomes, strict=True):
        results[kind].append(
            StageResult(
                hour=manifest.hour,
                table=plan.spec.name,
                outcome=outcome,
                table_rows=rows[plan.spec.name],
                expected_rows=expected_rows(manifest, kind),
            )
        )
    return results


@dataclasses.dataclass(frozen=True)
class DayCompleteness:
    """Which hours of a day are ready to publish.

    ``manifests``: hour -> manifest of the built hours; ``problems``: hour -> why it is not
    ready.
    """

    day: dt.date
    manifests: dict[dt.datetime, HourManifest]
    problems: dict[dt.datetime, list[str]]

    @property
    def complete(self) -> bool:
        return not self.problems

    def describe(self, limit: int = 10) -> str:
        items = sorted(self.problems.items())
        text = "; ".join(f"{hour_label(h)}: {', '.join(p)}" for h, p in items[:limit])
        return text + (f"; and {len(items) - limit} more hours" if len(items) > limit else "")


def day_completeness(
    warehouse: Warehouse,
    store: ObjectStore,
    day: dt.date,
    kind: str,
    max_rejected_share: float | None = None,
) -> DayCompleteness:
    """Check every hour of ``day``: built, accounting balanced, audited, stage rows as written
    (manifests and table metadata only, no scans).

    Args:
        max_rejected_share: when set (0..1), an hour with a site whose rejected share grades
            ``error`` (:func:`bq_platform.lib.quality.rejected_share.grade`) is a problem too;
            None skips this gate.
    """
    manifests: dict[dt.datetime, HourManifest] = {}
    problems: dict[dt.datetime, list[str]] = {}
    hours = day_hours(day)
    audited = warehouse.audited_builds(hours[0], hours[-1] + dt.timedelta(hours=1))
    read = read_hour_manifests(store, hours)
    stage_rows = warehouse.tables_rows([stage_spec(kind, h).name for h, m in read.items() if m])
    for hour, manifest in read.items():
        if manifest is None:
            problems[hour] = ["not built (no hour manifest)"]
            continue
        manifests[hour] = manifest
        reasons = []
        bad = [c.site for c in manifest.counts if not c.balanced]
        if bad:
            reasons.append(f"accounting does not balance for {', '.join(bad)}")
        if manifest.file_mismatches:
            reasons.append(f"{len(manifest.file_mismatches)} files disagree with their manifests")
        if manifest.orphan_files:
            shown = ", ".join(manifest.orphan_files[:3])
            more = len(manifest.orphan_files) - 3
            reasons.append(
                f"{len(manifest.orphan_files)} data files without a manifest (incomplete "
                f"delivery): {shown}" + (f" and {more} more" if more > 0 else "")
            )
        if max_rejected_share is not None:
            reasons += [
                f"{REJECTED_SHARE_PROBLEM} {max_rejected_share:.1%}: {v.describe()}"
                for v in quality.blocking(quality.grade_counts(manifest.counts, max_rejected_share))
            ]
        if (hour, manifest.fingerprint) not in audited:
            reasons.append("audit rows missing or from another build")
        table = stage_spec(kind, hour).name
        rows = stage_rows[table]
        want = expected_rows(manifest, kind)
        if rows is None:
            reasons.append(f"stage table {table} missing")
        elif rows != want:
            reasons.append(f"stage table {table} has {rows} rows, manifest says {want}")
        if reasons:
            problems[hour] = reasons
    return DayCompleteness(day, manifests, problems)


@dataclasses.dataclass(frozen=True)
class PublishResult:
    """Outcome of a day's publish."""

    day: dt.date
    table: str
    destination: str
    hours: int
    fingerprint: str
    outcome: JobOutcome
    expected_rows: int
    partition_rows: int


def publish_days(
    warehouse: Warehouse,
    days: Sequence[DayCompleteness],
    kind: str,
    *,
    asset: str,
    run_id: str,
    require_partition_filter: bool,
    budget: JobBudget | None = None,
    log: logging.Logger | None = None,
) -> list[PublishResult]:
    """Copy each day's stage tables into ``<table>$YYYYMMDD``, one WRITE_TRUNCATE copy job a
    day, all submitted before any is waited for; one result per day, in order. Only hours
    with a manifest and no problem are copied.

    Raises:
        ValueError: if no hour of a day is publishable.
        JobFailedError / QuotaBudgetExceededError: see
            :func:`~bq_platform.lib.publish.idempotent_jobs.run_idempotent_jobs`.
    """
    readies = [{h: m for h, m in c.manifests.items() if h not in c.problems} for c in days]
    plans = [
        day_copy_plan(
            c.day,
            ready,
            kind,
            asset=asset,
            run_id=run_id,
            require_partition_filter=require_partition_filter,
        )
        for c, ready in zip(days, readies, strict=True)
    ]
    outcomes = run_plans(warehouse, plans, budget=budget, log=log)
    return [
        PublishResult(
            day=c.day,
            table=plan.spec.name,
            destination=f"{plan.spec.name}${plan.partition}",
            hours=len(ready),
            fingerprint=plan.fingerprint,
            outcome=outcome,
            expected_rows=sum(expected_rows(m, kind) for m in ready.values()),
            partition_rows=warehouse.partition_rows(plan.spec.name, c.day),
        )
        for c, ready, plan, outcome in zip(days, readies, plans, outcomes, strict=True)
    ]
