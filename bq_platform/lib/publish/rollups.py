"""The publish of a day's rollups: one ``WRITE_TRUNCATE`` load job per rollup table and day of
the Parquet files the rollup's manifest names into ``table$YYYYMMDD``, idempotent like every
job (:mod:`bq_platform.lib.publish.idempotent_jobs`). Load jobs are free
(cloud.google.com/bigquery/pricing, "Free operations"); a query over ``pageviews`` would bill
the day's columns every day.

A day's rollups are computed from what ``pageviews$YYYYMMDD`` holds: the hours whose day
fingerprint its publish record names (:func:`published_day_inputs`). Their fingerprint, hence
their job IDs and publish records, is
:func:`~bq_platform.lib.core.job_ids.rollup_fingerprint` of that day fingerprint and
:data:`~bq_platform.lib.daily_build.rollups.ROLLUP_VERSION`.
"""

import dataclasses
import datetime as dt
import logging
from collections.abc import Sequence

from bq_platform.lib.core import commands
from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform.lib.core.job_ids import day_fingerprint, day_partition, job_id, job_labels
from bq_platform.lib.core.manifest import HourManifest, read_hour_manifests
from bq_platform.lib.daily_build.rollup_files import RollupFiles, RollupInputs, rollup_inputs
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.publish.idempotent_jobs import JobOutcome
from bq_platform.lib.publish.protocol import JobPlan, day_completeness, run_plans
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.warehouse.base import LoadJob, Warehouse
from bq_platform.lib.warehouse.schema import PAGEVIEWS_TABLE, rollup_spec


class RollupInputError(ValueError):
    """The day's rollups cannot be computed from what ``pageviews`` holds: the day is not
    published, or its hours changed since; the message says what to run."""


def published_day_inputs(
    warehouse: Warehouse,
    store: ObjectStore,
    day: dt.date,
    max_rejected_share: float | None,
) -> RollupInputs:
    """The inputs of ``day``'s rollups: the hours ``pageviews$YYYYMMDD`` was published from.

    Those are the hours whose day fingerprint ``pageviews``' publish record names: every
    built hour, or the hours the completeness gate let through
    (:func:`~bq_platform.lib.publish.protocol.day_completeness` with ``max_rejected_share``,
    then without the rejected-share gate, as ``allow_rejected_share`` publishes).

    Raises:
        RollupInputError: ``pageviews`` has no record of the day, or no such set of hours
            gives its fingerprint (an hour was built again since the day was published).
    """
    partition = day_partition(day)
    record = warehouse.read_publish_record(PAGEVIEWS_TABLE, partition)
    if record is None:
        raise RollupInputError(
            f"{PAGEVIEWS_TABLE}${partition} is not published, so its rollups cannot be "
            f"computed. Fix: publish the day: {commands.run_day(day)}"
        )
    built = {h: m for h, m in read_hour_manifests(store, day_hours(day)).items() if m}

    def fingerprint(hours: dict[dt.datetime, HourManifest]) -> str:
        return day_fingerprint({hour_label(h): m.fingerprint for h, m in hours.items()})

    candidates = [built]
    for share in dict.fromkeys([max_rejected_share, None]):
        gate = day_completeness(warehouse, store, day, "full", max_rejected_share=share)
        candidates.append({h: m for h, m in gate.manifests.items() if h not in gate.problems})
    for hours in candidates:
        if hours and fingerprint(hours) == record.fingerprint:
            return rollup_inputs(day, hours, ROLLUP_VERSION)
    raise RollupInputError(
        f"{PAGEVIEWS_TABLE}${partition} holds content {record.fingerprint[:12]} (job "
        f"{record.job_id}), but the hours of {day} built now give another: an hour was built "
        f"again after the day was published. Fix: publish the day again: {commands.run_day(day)}"
    )


def rollup_load_plan(
    store: ObjectStore,
    files: RollupFiles,
    *,
    asset: str,
    run_id: str,
    require_partition_filter: bool,
) -> JobPlan:
    """The WRITE_TRUNCATE load job of ``files`` into ``<table>$YYYYMMDD``."""
    spec = rollup_spec(files.table, require_partition_filter)
    partition = day_partition(files.day)
    uris = tuple(store.uri(key) for key in files.files)
    destination = f"{spec.name}${partition}"

    def make_job(generation: int) -> LoadJob:
        return LoadJob(
            job_id=job_id("load", spec.name, partition, files.fingerprint, generation),
            destination=destination,
            source_uris=uris,
            spec=spec,
            write_disposition="WRITE_TRUNCATE",
            labels=job_labels(asset, partition, run_id, files.fingerprint),
        )

    return JobPlan(spec, make_job, files.fingerprint, partition)


@dataclasses.dataclass(frozen=True)
class RollupPublishResult:
    """One day's rollup load: the job's outcome and the partition's rows afterwards."""

    files: RollupFiles
    destination: str
    outcome: JobOutcome
    partition_rows: int


def publish_rollups(
    warehouse: Warehouse,
    store: ObjectStore,
    rollups: Sequence[RollupFiles],
    *,
    asset: str,
    run_id: str,
    require_partition_filter: bool,
    budget: JobBudget | None = None,
    log: logging.Logger | None = None,
) -> list[RollupPublishResult]:
    """Load each rollup into its day partition, at most once per content: all jobs submitted
    before any is waited for; one result per rollup, in order.

    Raises:
        JobFailedError / QuotaBudgetExceededError / RuleViolation: see
            :func:`~bq_platform.lib.publish.idempotent_jobs.run_idempotent_jobs`.
    """
    plans = [
        rollup_load_plan(
            store,
            files,
            asset=asset,
            run_id=run_id,
            require_partition_filter=require_partition_filter,
        )
        for files in rollups
    ]
    outcomes = run_plans(warehouse, plans, budget=budget, log=log)
    return [
        RollupPublishResult(
            files=files,
            destination=f"{plan.spec.name}${plan.partition}",
            outcome=outcome,
            partition_rows=warehouse.partition_rows(plan.spec.name, files.day),
        )
        for files, plan, outcome in zip(rollups, plans, outcomes, strict=True)
    ]
