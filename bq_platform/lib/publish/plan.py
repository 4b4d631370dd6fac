"""``bq-platform plan``: every warehouse request a run would send, before it sends any.

Like ``terraform plan``: per UTC day, the tables it would create or patch, every load and copy
job with its deterministic ID (the daily rollups' loads included), the jobs it would skip, and
each table's daily budget use. It
runs the publish protocol's own code against the production adapter on a
:class:`~bq_platform.lib.warehouse.recording.RecordingSession`, so the requests printed are
the ones a run would send, except the ``run_id`` label (``plan``).
"""

import collections
import dataclasses
import datetime as dt
import itertools
from collections.abc import Sequence

from bq_platform.lib.core.layout import rollup_prefix
from bq_platform.lib.core.manifest import HourManifest, read_hour_manifests
from bq_platform.lib.daily_build.rollup_files import RollupFiles, read_rollup_files, rollup_inputs
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.publish.deadletter_table import deadletter_load_plan
from bq_platform.lib.publish.job_decisions import first_decision
from bq_platform.lib.publish.protocol import (
    KINDS,
    JobPlan,
    day_copy_plan,
    stage_load_plan,
)
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.publish.rollups import rollup_load_plan
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.warehouse.base import CopyJob, Warehouse
from bq_platform.lib.warehouse.ledger import publish_ledger_spec
from bq_platform.lib.warehouse.schema import DEADLETTERS_TABLE, ROLLUP_TABLES, audit_spec

PLAN_RUN_ID = "plan"
_ASSETS = {
    "full": ("pageviews_stage", "pageviews"),
    "sample": ("pageviews_sample_stage", "pageviews_sample"),
}


@dataclasses.dataclass(frozen=True)
class PlannedJob:
    """One load or copy job of the plan.

    Attributes:
        job_id: its deterministic ID (the generation a run would use now).
        sources: URIs (load) or tables (copy).
        verdict: ``submit`` (it would be sent), ``wait`` (running: adopted) or ``skip``.
    """

    job_id: str
    kind: str
    destination: str
    sources: tuple[str, ...]
    write_disposition: str
    verdict: str
    reason: str


@dataclasses.dataclass
class DayRequests:
    """The plan of one UTC day.

    Attributes:
        built_hours: hours with an hour manifest.
        unbuilt_hours: hours without one: a run builds them first; their jobs are not known.
        jobs: the day's jobs in the order a run submits them.
    """

    day: dt.date
    built_hours: list[dt.datetime] = dataclasses.field(default_factory=list)
    unbuilt_hours: list[dt.datetime] = dataclasses.field(default_factory=list)
    jobs: list[PlannedJob] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class RequestPlan:
    """The whole plan: days, and the budget use per table.

    Attributes:
        days: one :class:`DayRequests` per UTC day, in order.
        tables: tables ``ensure_table`` would create or patch (names, in order).
        budget: table -> (jobs already used today, jobs planned, budget per day).
    """

    days: list[DayRequests]
    tables: list[str]
    budget: dict[str, tuple[int, int, int]]

    def over_budget(self) -> list[str]:
        """Tables whose jobs today plus planned would pass their daily budget."""
        return [t for t, (used, planned, limit) in self.budget.items() if used + planned > limit]


def build_plan(
    warehouse: Warehouse,
    store: ObjectStore,
    hours: Sequence[dt.datetime],
    *,
    require_partition_filter: bool,
    budget: JobBudget,
    today: dt.date | None = None,
) -> RequestPlan:
    """Run the publish protocol in plan mode over ``hours`` (grouped by UTC day).

    ``warehouse`` must be the production adapter on a recording transport: ``ensure_table``
    and ``submit_job`` are called for everything a run would create or submit.

    Raises:
        RuleViolation: if a table or job breaks BigQuery's rules (exactly as a run would).
    """
    today = today or dt.datetime.now(dt.UTC).date()
    for spec in (audit_spec(), publish_ledger_spec()):
        warehouse.ensure_table(spec)
    planned: collections.Counter[str] = collections.Counter()
    used: dict[str, int] = {}
    days: list[DayRequests] = []
    ordered = sorted(set(hours))
    for day, day_group in itertools.groupby(ordered, key=lambda h: h.date()):
        plan = DayRequests(day)
        manifests = {}
        for hour, manifest in read_hour_manifests(store, list(day_group)).items():
            if manifest is None:
                plan.unbuilt_hours.append(hour)
            else:
                plan.built_hours.append(hour)
                manifests[hour] = manifest
        for kind in KINDS:
            stage_asset, published_asset = _ASSETS[kind]
            for manifest in manifests.values():
                job_plan = stage_load_plan(
                    store, manifest, kind, asset=stage_asset, run_id=PLAN_RUN_ID
                )
                plan.jobs.append(_plan_job(warehouse, job_plan, planned, used, today))
            if manifests:
                job_plan = day_copy_plan(
                    day,
                    manifests,
                    kind,
                    asset=published_asset,
                    run_id=PLAN_RUN_ID,
                    require_partition_filter=require_partition_filter,
                )
                plan.jobs.append(_plan_job(warehouse, job_plan, planned, used, today))
        if manifests:
            job_plan = deadletter_load_plan(
                store, day, manifests, asset=DEADLETTERS_TABLE, run_id=PLAN_RUN_ID
            )
            plan.jobs.append(_plan_job(warehouse, job_plan, planned, used, today))
            for job_plan in rollup_plans(store, day, manifests, require_partition_filter):
                plan.jobs.append(_plan_job(warehouse, job_plan, planned, used, today))
        days.append(plan)
    usage = {
        table: (used[table], planned[table], budget.per_table_per_day) for table in sorted(used)
    }
    return RequestPlan(days, warehouse.ensured_tables(), usage)


#: The files of a rollup that a run builds before its load (Spark's ``part-*`` names).
UNBUILT_ROLLUP_FILES = "part-*.parquet"


def rollup_plans(
    store: ObjectStore,
    day: dt.date,
    manifests: dict[dt.datetime, HourManifest],
    require_partition_filter: bool,
) -> list[JobPlan]:
    """The loads of ``day``'s rollups, one per table, for the day published from
    ``manifests``: of the files their manifest names, or, for a rollup not built yet (a run
    builds it first), of :data:`UNBUILT_ROLLUP_FILES` in its content folder. Their job IDs are
    the run's either way (built from the content's fingerprint)."""
    inputs = rollup_inputs(day, manifests, ROLLUP_VERSION)
    found = read_rollup_files(store, inputs, ROLLUP_TABLES)
    plans = []
    for table in ROLLUP_TABLES:
        files = found[table] or RollupFiles(
            table=table,
            day=day,
            fingerprint=inputs.fingerprint,
            day_fingerprint=inputs.day_fingerprint,
            files=(f"{rollup_prefix(table, day, inputs.fingerprint)}/{UNBUILT_ROLLUP_FILES}",),
            rows=0,
            human_pageviews=0,
            bot_pageviews=0,
        )
        plans.append(
            rollup_load_plan(
                store,
                files,
                asset=table,
                run_id=PLAN_RUN_ID,
                require_partition_filter=require_partition_filter,
            )
        )
    return plans


def _plan_job(
    warehouse: Warehouse,
    job_plan: JobPlan,
    planned: collections.Counter[str],
    used: dict[str, int],
    today: dt.date,
) -> PlannedJob:
    warehouse.ensure_table(job_plan.spec)
    table = job_plan.spec.name
    if table not in used:  # counted before this plan records its own jobs
        used[table] = warehouse.jobs_submitted(table, today)
    decision = first_decision(
        warehouse,
        job_plan.make_job,
        fingerprint=job_plan.fingerprint,
        partition=job_plan.partition,
    )
    job = decision.job
    if decision.verdict == "submit":
        warehouse.submit_job(job)
        planned[table] += 1
    sources = job.sources if isinstance(job, CopyJob) else job.source_uris
    return PlannedJob(
        job_id=job.job_id,
        kind="copy" if isinstance(job, CopyJob) else "load",
        destination=job.destination,
        sources=tuple(sources),
        write_disposition=job.write_disposition,
        verdict=decision.verdict,
        reason=decision.reason,
    )


def describe(plan: RequestPlan) -> list[str]:
    """The plan as lines for a terminal: per day, its jobs; then the budget per table."""
    lines: list[str] = []
    for day in plan.days:
        counts = collections.Counter(job.verdict for job in day.jobs)
        lines.append(
            f"{day.day}: {len(day.built_hours)} built hours, {len(day.unbuilt_hours)} not built; "
            f"{counts['submit']} jobs to submit, {counts['skip']} done (skip), "
            f"{counts['wait']} running"
        )
        for job in day.jobs:
            source = job.sources[0] if len(job.sources) == 1 else f"{len(job.sources)} sources"
            lines.append(
                f"  {job.verdict:<6} {job.kind} {job.job_id} {source} -> {job.destination} "
                f"({job.write_disposition})"
            )
        if day.unbuilt_hours:
            lines.append(
                "  not built yet (a run builds them first): "
                + ", ".join(f"{h:%Y-%m-%dT%H}" for h in day.unbuilt_hours[:6])
                + (" ..." if len(day.unbuilt_hours) > 6 else "")
            )
    lines.append(f"tables ensured (created or patched where needed): {len(plan.tables)}")
    stage = {t: v for t, v in plan.budget.items() if "_stage_" in t}
    for table, (used, count, limit) in plan.budget.items():
        if table in stage:
            continue
        flag = "  OVER BUDGET" if used + count > limit else ""
        lines.append(f"  budget {table}: {used} used today + {count} planned of {limit}/day{flag}")
    if stage:
        worst = max(stage.items(), key=lambda item: item[1][0] + item[1][1])
        table, (used, count, limit) = worst
        lines.append(
            f"  budget of {len(stage)} stage tables: at most {used + count} jobs today "
            f"({table}) of {limit}/day"
        )
    return lines
