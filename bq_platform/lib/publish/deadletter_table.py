"""The dead-letter table for operators: each day's rejected and out-of-window lines, loaded once
per content into ``pageview_deadletters$YYYYMMDD``.

One ``WRITE_TRUNCATE`` load job per UTC delivery day takes exactly the dead-letter files the
day's hour manifests name; its ID is built from the day's hour fingerprints. Every built hour
counts, complete or not: the dead letters are what an operator reads to repair an hour the
completeness gate holds back.
"""

import dataclasses
import datetime as dt
import logging
from collections.abc import Mapping

from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform.lib.core.job_ids import day_fingerprint, day_partition, job_id, job_labels
from bq_platform.lib.core.manifest import HourManifest, read_hour_manifests
from bq_platform.lib.publish.idempotent_jobs import JobOutcome
from bq_platform.lib.publish.protocol import JobPlan, run_plan
from bq_platform.lib.publish.quota import JobBudget
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.warehouse.base import LoadJob, Warehouse
from bq_platform.lib.warehouse.schema import deadletters_spec


def dead_letter_lines(manifest: HourManifest) -> int:
    """Lines the hour's dead-letter files hold per its counts: rejected + out_of_window."""
    return sum(c.rejected + c.out_of_window for c in manifest.counts)


def deadletter_load_plan(
    store: ObjectStore,
    day: dt.date,
    built: Mapping[dt.datetime, HourManifest],
    *,
    asset: str,
    run_id: str,
) -> JobPlan:
    """The WRITE_TRUNCATE load job of the ``built`` hours' dead-letter files into
    ``pageview_deadletters$YYYYMMDD``.

    ``built``: hour -> manifest, for the hours of ``day`` (UTC delivery day) that were built.

    Raises:
        ValueError: if ``built`` is empty, or holds an hour of another day.
    """
    spec = deadletters_spec()
    if not built:
        raise ValueError(f"no hour of {day} is built: nothing to load into {spec.name}")
    other = [hour_label(h) for h in built if h.date() != day]
    if other:
        raise ValueError(f"hours {', '.join(other)} are not of {day}")
    partition = day_partition(day)
    fingerprint = day_fingerprint({hour_label(h): m.fingerprint for h, m in built.items()})
    uris = tuple(store.uri(key) for h in sorted(built) for key in built[h].deadletter_files)
    destination = f"{spec.name}${partition}"

    def make_job(generation: int) -> LoadJob:
        return LoadJob(
            job_id=job_id("load", spec.name, partition, fingerprint, generation),
            destination=destination,
            source_uris=uris,
            spec=spec,
            write_disposition="WRITE_TRUNCATE",
            labels=job_labels(asset, partition, run_id, fingerprint),
        )

    return JobPlan(spec, make_job, fingerprint, partition)


@dataclasses.dataclass(frozen=True)
class DeadLetterLoad:
    """Outcome of a day's dead-letter load.

    Attributes:
        hours: built hours whose dead letters were loaded.
        files: dead-letter Parquet files loaded.
        expected_rows: rejected + out_of_window lines the manifests count.
        partition_rows: rows in the day partition afterwards (table metadata).
        rejected_by_reason: rejected lines per reason code, most frequent first.
        out_of_window: out-of-window lines, all three reasons together.
    """

    day: dt.date
    destination: str
    hours: int
    files: int
    outcome: JobOutcome
    expected_rows: int
    partition_rows: int
    rejected_by_reason: dict[str, int]
    out_of_window: int

    @property
    def matches(self) -> bool:
        return self.partition_rows == self.expected_rows


def built_hours_of(store: ObjectStore, day: dt.date) -> dict[dt.datetime, HourManifest]:
    """Hour -> manifest for the hours of ``day`` that were built (24 manifest reads).

    Raises:
        ManifestError: if a manifest is unreadable (names the object).
    """
    manifests = read_hour_manifests(store, day_hours(day))
    return {h: m for h, m in manifests.items() if m is not None}


def load_day_deadletters(
    warehouse: Warehouse,
    store: ObjectStore,
    day: dt.date,
    *,
    asset: str,
    run_id: str,
    budget: JobBudget | None = None,
    log: logging.Logger | None = None,
) -> DeadLetterLoad:
    """Replace ``pageview_deadletters$YYYYMMDD`` with the dead letters of the day's built hours,
    at most once per content.

    Raises:
        ValueError: if no hour of ``day`` is built.
        JobFailedError: if the load job fails (a file missing or of another schema).
        QuotaBudgetExceededError: if the table's daily job budget is spent.
        RuleViolation: if BigQuery would refuse the table or the job (nothing was sent).
    """
    built = built_hours_of(store, day)
    plan = deadletter_load_plan(store, day, built, asset=asset, run_id=run_id)
    outcome = run_plan(warehouse, plan, budget=budget, log=log)
    counts = [c for m in built.values() for c in m.counts]
    by_reason: dict[str, int] = {}
    for site_hour in counts:
        for reason, lines in site_hour.rejected_reasons.items():
            by_reason[reason] = by_reason.get(reason, 0) + lines
    return DeadLetterLoad(
        day=day,
        destination=f"{plan.spec.name}${plan.partition}",
        hours=len(built),
        files=len(plan.make_job(0).source_uris),
        outcome=outcome,
        expected_rows=sum(dead_letter_lines(m) for m in built.values()),
        partition_rows=warehouse.partition_rows(plan.spec.name, day),
        rejected_by_reason=dict(sorted(by_reason.items(), key=lambda item: (-item[1], item[0]))),
        out_of_window=sum(c.out_of_window for c in counts),
    )
