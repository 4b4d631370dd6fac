"""What needs to run: the one answer, used by ``bq-platform run`` and by the automation sensor.

A day is up to date when each of its 24 hour manifests has the fingerprint of the content now
landed, the publish records of :data:`PUBLISHED_TABLES` name the day's fingerprint, and its
latest publish run did not fail (:class:`FailedPublish`, read from the orchestrator by the
caller); the state is read from what is materialized and recorded, never from a cursor.

An hour is *closed* :data:`CLOSE_AFTER` after it ends. The automation builds closed hours with
landed data or an earlier build, a day's empty hours once the whole day is closed, and
publishes a closed day whose 24 hours are current. ``now=None`` (``bq-platform run``) treats
every hour as closed. A day whose latest publish run failed is published again: by
``bq-platform run`` at once, by the automation after :meth:`FailedPublish.retry_at`.

An hour whose landed input is unchanged since its build, but whose manifest names another
traffic classifier than the installed one with the configured thresholds (an upgraded crawler
list or ua-parser rules, another threshold), is a :class:`Reclassification`: rebuilding it
restates the classification of lines already published, so it is never done on the next run
by itself. :func:`plan_day` lists such hours apart, builds them only for ``reclassify=True``
(``bq-platform run --reclassify``; the automation never passes it) and holds the day's publish
while any is pending. Hours with new landed input are built as always, with the installed
classifier.
"""

import dataclasses
import datetime as dt
from collections.abc import Collection, Iterable, Mapping, Sequence

from bq_platform.lib.core import commands
from bq_platform.lib.core.hours import day_hours, hour_label
from bq_platform.lib.core.job_ids import (
    day_fingerprint,
    day_partition,
    hour_fingerprint,
    input_fingerprint,
    rollup_fingerprint,
    sha256_json,
)
from bq_platform.lib.core.manifest import UNCLASSIFIED, HourManifest, read_hour_manifests
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS, key_id
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.hourly_build.transform import TRANSFORM_VERSION
from bq_platform.lib.landing.deliveries import landed_hours
from bq_platform.lib.landing.index import (
    LandingIndex,
    hour_input_fingerprint,
    list_sites,
    scan_landing,
)
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.version import classifier_version
from bq_platform.lib.warehouse.base import Warehouse
from bq_platform.lib.warehouse.schema import (
    DEADLETTERS_TABLE,
    PAGEVIEWS_SAMPLE_TABLE,
    PAGEVIEWS_TABLE,
    ROLLUP_TABLES,
)

#: Tables a day is published into, each with a publish record naming the day's fingerprint.
PUBLISHED_TABLES = (PAGEVIEWS_TABLE, PAGEVIEWS_SAMPLE_TABLE, DEADLETTERS_TABLE, *ROLLUP_TABLES)
CLOSE_AFTER = dt.timedelta(minutes=15)
"""An hour is closed this long after its end; later files re-run their hour."""
RETRY_BACKOFF = dt.timedelta(minutes=5)
"""The automation publishes a day again this long after its publish run failed, twice as long
after each further failure in a row, at most :data:`MAX_RETRY_BACKOFF`."""
MAX_RETRY_BACKOFF = dt.timedelta(hours=6)


@dataclasses.dataclass(frozen=True)
class FailedPublish:
    """A day's latest publish run (the daily job) ended without success.

    Attributes:
        run_id: that run's ID.
        status: ``failed`` or ``canceled``.
        steps: the step keys that failed in it; empty if it failed outside a step or was
            canceled.
        failures: publish runs of the day in a row that did not succeed, up to the latest
            (at least 1).
        ended: when the latest one ended (timezone-aware).
    """

    run_id: str
    status: str
    steps: tuple[str, ...]
    failures: int
    ended: dt.datetime

    def describe(self) -> str:
        """``last publish run <ID prefix> failed in <steps>``, for the plan's reason."""
        where = f" in {', '.join(self.steps)}" if self.steps else ""
        return f"last publish run {self.run_id[:8]} {self.status}{where}"

    def retry_at(self) -> dt.datetime:
        """When the automation publishes the day again: :data:`RETRY_BACKOFF` after the end of
        the latest failure, doubled for each earlier one in the row, at most
        :data:`MAX_RETRY_BACKOFF` (bounded retries with exponential backoff)."""
        doublings = min(max(self.failures - 1, 0), 16)
        return self.ended + min(RETRY_BACKOFF * 2**doublings, MAX_RETRY_BACKOFF)


@dataclasses.dataclass(frozen=True)
class Reclassification:
    """A built hour whose landed input is unchanged but whose traffic classifier is not the
    current one: building it again restates only the classification of the same lines.

    Attributes:
        hour: the UTC hour.
        built_with: the classifier its manifest names (:data:`UNCLASSIFIED`: built without
            traffic classification).
        current: the classifier a build would use now
            (:func:`~bq_platform.lib.traffic.version.classifier_version`).
    """

    hour: dt.datetime
    built_with: str
    current: str


def reclassification(
    hour: dt.datetime, manifest: HourManifest | None, landed_input: str, current: str
) -> Reclassification | None:
    """The :class:`Reclassification` of ``hour`` when its ``manifest`` was built from the input
    of fingerprint ``landed_input`` (the one landed now) with a classifier other than
    ``current``; None when it was never built, its input changed or its classifier is
    ``current``."""
    if (
        manifest is None
        or manifest.input_fingerprint != landed_input
        or manifest.classifier == current
    ):
        return None
    return Reclassification(hour, manifest.classifier, current)


def _version_parts(version: str) -> dict[str, str]:
    """``{name: value}`` of a classifier version's ``;``-separated ``name==value`` and
    ``name=value`` parts, in order."""
    parts: dict[str, str] = {}
    for part in filter(None, version.split(";")):
        name, _, value = part.partition("==") if "==" in part else part.partition("=")
        parts[name] = value
    return parts


def classifier_change(old: str, new: str) -> str:
    """The parts of two classifier versions that differ, short and readable:
    ``crawler-user-agents 1.66.0 -> 1.67.0, heuristics heuristic:page_rate>720/h ->
    heuristic:page_rate>5/h`` (a heuristic list shows only the heuristics that differ;
    ``none`` where a part is missing). ``old`` :data:`UNCLASSIFIED`: ``unclassified -> the
    installed classifier``."""
    if old == UNCLASSIFIED:
        return "unclassified -> the installed classifier"
    before, after = _version_parts(old), _version_parts(new)
    changes = []
    for name in dict.fromkeys([*after, *before]):
        was, now = before.get(name, ""), after.get(name, "")
        if was == now:
            continue
        if "," in was + now or name == "heuristics":
            was_items, now_items = was.split(","), now.split(",")
            was = ",".join(i for i in was_items if i not in now_items)
            now = ",".join(i for i in now_items if i not in was_items)
        changes.append(f"{name} {was or 'none'} -> {now or 'none'}")
    return ", ".join(changes) or "the same parts in another order"


def _hour_list(hours: Sequence[dt.datetime], shown: int = 3) -> str:
    """``H1, H2, H3 ...``: the first ``shown`` hour labels, ``...`` when there are more."""
    return ", ".join(hour_label(h) for h in hours[:shown]) + (" ..." if len(hours) > shown else "")


def describe_reclassifications(changes: Sequence[Reclassification]) -> str:
    """``N hours (H1, H2, H3 ...) from <change>`` per distinct pair of classifiers
    (:func:`classifier_change`), joined by ``; ``."""
    groups: dict[tuple[str, str], list[dt.datetime]] = {}
    for change in changes:
        groups.setdefault((change.built_with, change.current), []).append(change.hour)
    return "; ".join(
        f"{len(hours)} hours ({_hour_list(sorted(hours))}) from {classifier_change(*pair)}"
        for pair, hours in groups.items()
    )


def reclassify_fix() -> str:
    """What to run to reclassify held hours, for messages."""
    return (
        f"preview the change with {commands.RECLASSIFY_PREVIEW}, then run "
        f"{commands.RUN_RECLASSIFY} (Dagster: run config {commands.RECLASSIFY_RUN_CONFIG})"
    )


def reclassify_refusal(changes: Sequence[Reclassification]) -> str:
    """Why a build of hours including ``changes`` (at least one) does not run without
    reclassifying: which hours, from which classifier to which, and the fix."""
    return (
        f"not reclassified without a request: {describe_reclassifications(changes)} (their "
        f"landed input is unchanged: building them again restates the traffic classification "
        f"of rows already published). To do it: {reclassify_fix()}"
    )


def landed_input_fingerprint(index: LandingIndex, hour: dt.datetime) -> str:
    """The input fingerprint of what is landed for ``hour`` in ``index`` (an empty hour has
    one too)."""
    landed = index.get(hour)
    return landed.input_fingerprint if landed else input_fingerprint(())


def landed_input_fingerprints(
    store: ObjectStore, hours: Sequence[dt.datetime]
) -> dict[dt.datetime, str]:
    """The input fingerprint of what is landed now for each of ``hours``, as the build
    records it, from one listing per site of these hours only.

    Raises:
        LandingError: a landed manifest of these hours is unreadable or misplaced.
    """
    sites = list_sites(store)
    scanned = landed_hours(store, sites, hours)
    return {
        hour: hour_input_fingerprint(
            [d.manifest for s in sites for d in scanned[(s, hour)][0]],
            [k for s in sites for k in scanned[(s, hour)][1]],
        )
        for hour in hours
    }


def reclassifications(
    store: ObjectStore,
    hours: Sequence[dt.datetime],
    thresholds: ClassificationThresholds | None = None,
) -> list[Reclassification]:
    """The :class:`Reclassification` among ``hours`` (UTC), in hour order, for the installed
    classifier with ``thresholds`` (None: the defaults). Reads the hours' manifests, and lists
    the landing zone only for hours built with another classifier.

    Raises:
        ManifestError: an hour manifest is unreadable (names the object).
        LandingError: a landed manifest of such an hour is unreadable or misplaced.
    """
    current = classifier_version(thresholds or ClassificationThresholds())
    manifests = read_hour_manifests(store, sorted(set(hours)))
    other = {h: m for h, m in manifests.items() if m is not None and m.classifier != current}
    if not other:
        return []
    landed = landed_input_fingerprints(store, list(other))
    found = (reclassification(h, m, landed[h], current) for h, m in other.items())
    return [r for r in found if r is not None]


@dataclasses.dataclass(frozen=True)
class DayPlan:
    """One day and what it needs.

    Attributes:
        due: something must run (``build`` or ``publish``).
        reason: one line for logs, the CLI and sensor skip reasons.
        build: closed hours to (re)build, stage and audit, in time order.
        publish: every hour is current and the day is closed: publish it.
        hour_fingerprints: ``{hour label: expected fingerprint}`` of all 24 hours.
        failed: the day's latest publish run, if it did not succeed.
        reclassify: the closed hours whose input is unchanged but whose classifier is not the
            current one; in ``build`` only when the caller passed ``reclassify=True``, else
            :attr:`held` and the day is not published.
    """

    day: dt.date
    due: bool
    reason: str
    build: tuple[dt.datetime, ...] = ()
    publish: bool = False
    closed: bool = True
    hour_fingerprints: dict[str, str] = dataclasses.field(default_factory=dict)
    failed: FailedPublish | None = None
    reclassify: tuple[Reclassification, ...] = ()

    @property
    def held(self) -> tuple[dt.datetime, ...]:
        """The hours of :attr:`reclassify` that are not built: they wait for a caller that
        reclassifies (``bq-platform run --reclassify``)."""
        return tuple(r.hour for r in self.reclassify if r.hour not in self.build)

    @property
    def fingerprint(self) -> str:
        """The day's fingerprint if it were published now."""
        return day_fingerprint(self.hour_fingerprints)


def lookback_start(now: dt.datetime, lookback_days: int) -> dt.date | None:
    """The first UTC day the automation sensor and ``bq-platform run`` plan: ``lookback_days``
    days before ``now``'s UTC day (``BQ_PLATFORM_LOOKBACK_DAYS``); None for 0, every landed day.
    Older days are left to backfills.

    Raises:
        ValueError: if ``lookback_days`` is negative or ``now`` naive.
    """
    if lookback_days < 0:
        raise ValueError(f"lookback_days must be >= 0, got {lookback_days}")
    if now.tzinfo is None:
        raise ValueError(f"now must be timezone-aware UTC, got {now!r}")
    if not lookback_days:
        return None
    return now.astimezone(dt.UTC).date() - dt.timedelta(days=lookback_days)


def scan_window(
    store: ObjectStore, lookback_days: int, now: dt.datetime | None = None
) -> LandingIndex:
    """The landing zone from :func:`lookback_start` on (all of it for ``lookback_days`` 0).

    Raises:
        ValueError: if ``lookback_days`` is negative or ``now`` naive.
        ManifestError, ObjectNotFoundError, LandingError: as ``scan_landing``.
    """
    since = lookback_start(now or dt.datetime.now(dt.UTC), lookback_days)
    return scan_landing(store, since=since)


def expected_hour_fingerprint(
    index: LandingIndex,
    hour: dt.datetime,
    visitor_key: str,
    thresholds: ClassificationThresholds | None = None,
) -> str:
    """The fingerprint a fresh build of ``hour`` would have now (an empty hour has one too),
    with the installed traffic classifier and ``thresholds`` (None: the defaults)."""
    input_fp = landed_input_fingerprint(index, hour)
    classifier = classifier_version(thresholds or ClassificationThresholds())
    return hour_fingerprint(
        input_fp, TRANSFORM_VERSION, key_id(visitor_key), SAMPLE_MODULUS, classifier
    )


def is_closed(hour: dt.datetime, now: dt.datetime | None) -> bool:
    """True when ``hour`` ended at least :data:`CLOSE_AFTER` before ``now`` (or ``now`` is None)."""
    return now is None or hour + dt.timedelta(hours=1) + CLOSE_AFTER <= now


def plan_day(
    day: dt.date,
    index: LandingIndex,
    store: ObjectStore,
    warehouse: Warehouse,
    visitor_key: str,
    now: dt.datetime | None = None,
    failed_publishes: Mapping[dt.date, FailedPublish] | None = None,
    thresholds: ClassificationThresholds | None = None,
    reclassify: bool = False,
) -> DayPlan:
    """Decide what ``day`` needs; reads hour manifests and publish records only (no scans).

    ``now``: the current UTC time for the automation; None (the CLI) treats every hour as
    closed. ``failed_publishes``: the days whose latest publish run did not succeed
    (:func:`bq_platform.defs.publish_status.failed_publishes`); such a closed day with current
    hours is due to publish, with the failure in the reason, for the automation not before
    :meth:`FailedPublish.retry_at`. ``reclassify``: build the hours of
    :attr:`DayPlan.reclassify` too; without it they are held, the reason names them, the
    classifiers and the fix, and the day is not published.

    Raises:
        ManifestError: if an hour manifest is unreadable (names the object).
    """
    hours = day_hours(day)
    expected = {
        hour_label(h): expected_hour_fingerprint(index, h, visitor_key, thresholds) for h in hours
    }
    current = classifier_version(thresholds or ClassificationThresholds())
    closed = is_closed(hours[-1], now)
    stale: list[dt.datetime] = []
    changes: list[Reclassification] = []
    upgraded = False  # an hour with new input built with an earlier classifier
    manifests = read_hour_manifests(store, [h for h in hours if is_closed(h, now)])
    for hour, manifest in manifests.items():
        if manifest is not None and manifest.fingerprint == expected[hour_label(hour)]:
            continue
        change = reclassification(hour, manifest, landed_input_fingerprint(index, hour), current)
        if change is not None:
            changes.append(change)
            if not reclassify:
                continue
        elif manifest is not None and manifest.classifier != current:
            upgraded = True
        # An empty hour never built waits for the day to close; one with data or an earlier
        # build (a late file, a changed transform) is rebuilt as soon as it is closed.
        if closed or manifest is not None or index.get(hour) is not None:
            stale.append(hour)
    held = "" if reclassify or not changes else describe_reclassifications(changes)
    if stale:
        reason = f"{len(stale)} hours to build ({_hour_list(stale)})"
        if reclassify and changes:
            reason += f", reclassifying {describe_reclassifications(changes)}"
        elif held or upgraded:
            reason += " with the installed classifier"
        if held:
            reason += f"; held, not reclassified: {held}; {reclassify_fix()}"
        return DayPlan(
            day,
            True,
            reason,
            tuple(stale),
            False,
            closed,
            expected,
            reclassify=tuple(changes),
        )
    if held:
        return DayPlan(
            day,
            False,
            f"held, not reclassified nor published: {held}; {reclassify_fix()}",
            closed=closed,
            hour_fingerprints=expected,
            reclassify=tuple(changes),
        )
    if not closed:
        return DayPlan(
            day,
            False,
            f"open until {hour_label(hours[-1] + dt.timedelta(hours=1))}+{CLOSE_AFTER}",
            closed=False,
            hour_fingerprints=expected,
        )
    want = day_fingerprint(expected)
    failed = (failed_publishes or {}).get(day)
    reasons = [failed.describe()] if failed else []
    for table in PUBLISHED_TABLES:
        record = warehouse.read_publish_record(table, day_partition(day))
        # A rollup's record names its own fingerprint, derived from the day's.
        content = rollup_fingerprint(want, ROLLUP_VERSION) if table in ROLLUP_TABLES else want
        if record is None or record.fingerprint != content:
            reasons.insert(0, f"{table}${day_partition(day)} not published for this content")
            break
    if not reasons:
        return DayPlan(day, False, "up to date", hour_fingerprints=expected)
    reason = "; ".join(reasons)
    if failed and now is not None and now < failed.retry_at():
        retry = failed.retry_at().astimezone(dt.UTC)
        return DayPlan(
            day,
            False,
            f"{reason}; the automation publishes it again from {retry:%Y-%m-%dT%H:%M}Z",
            hour_fingerprints=expected,
            failed=failed,
        )
    return DayPlan(day, True, reason, publish=True, hour_fingerprints=expected, failed=failed)


def contiguous(hours: Sequence[dt.datetime]) -> list[list[dt.datetime]]:
    """Split sorted UTC hours into runs of consecutive hours (one run request each)."""
    runs: list[list[dt.datetime]] = []
    for hour in hours:
        if runs and hour - runs[-1][-1] == dt.timedelta(hours=1):
            runs[-1].append(hour)
        else:
            runs.append([hour])
    return runs


@dataclasses.dataclass(frozen=True)
class Request:
    """One run the automation asks for.

    Attributes:
        kind: ``build`` (hourly job over ``hours``) or ``publish`` (daily job for ``day``).
        hours: consecutive hours to build (empty for ``publish``).
        run_key: deterministic: the same work on the same content is requested once.
    """

    kind: str
    day: dt.date
    hours: tuple[dt.datetime, ...]
    run_key: str
    reason: str


@dataclasses.dataclass(frozen=True)
class AutomationPlan:
    """The runs to request now, and why the other landed days need nothing."""

    requests: list[Request]
    notes: list[str]
    days: int
    empty_reason: str = ""
    """What to say when no day is landed (:meth:`LandingIndex.empty_reason`)."""
    held: list[str] = dataclasses.field(default_factory=list)
    """``<day>: <reason>`` of each day with hours held for reclassification
    (:attr:`DayPlan.held`): the automation never reclassifies."""

    def skip_reason(self) -> str:
        """One line for the sensor tick when nothing is requested; the days held for
        reclassification first."""
        if not self.days:
            return self.empty_reason
        notes = [*self.held, *(n for n in self.notes if n not in self.held)]
        return f"nothing to run for {self.days} landed days: " + "; ".join(notes[:8])


def plan_automation(
    index: LandingIndex,
    store: ObjectStore,
    warehouse: Warehouse,
    visitor_key: str,
    now: dt.datetime,
    busy_days: Collection[dt.date] = (),
    failed_publishes: Mapping[dt.date, FailedPublish] | None = None,
    thresholds: ClassificationThresholds | None = None,
) -> AutomationPlan:
    """Runs the automation requests for every landed day except ``busy_days`` (a run is
    queued or running); ``failed_publishes`` as :func:`plan_day`. Run keys carry the content
    fingerprint, so a tick repeats nothing already requested, and a late file gets a new key;
    a publish after a failed one carries the failed run's ID too. Hours to reclassify are
    never requested (:attr:`AutomationPlan.held`)."""
    requests: list[Request] = []
    notes: list[str] = []
    held: list[str] = []
    days = index.days()
    for day in days:
        if day in busy_days:
            notes.append(f"{day}: a run is queued or in progress")
            continue
        plan = plan_day(
            day,
            index,
            store,
            warehouse,
            visitor_key,
            now=now,
            failed_publishes=failed_publishes,
            thresholds=thresholds,
        )
        if plan.held:
            held.append(f"{day}: {plan.reason}")
        if plan.build:
            for run in contiguous(plan.build):
                content = sha256_json([plan.hour_fingerprints[hour_label(h)] for h in run])
                requests.append(
                    Request(
                        "build",
                        day,
                        tuple(run),
                        f"build:{hour_label(run[0])}:{hour_label(run[-1])}:{content[:16]}",
                        plan.reason,
                    )
                )
        elif plan.publish:
            key = f"publish:{day}:{plan.fingerprint[:16]}"
            if plan.failed:
                key += f":after:{plan.failed.run_id}"
            requests.append(Request("publish", day, (), key, plan.reason))
        else:
            notes.append(f"{day}: {plan.reason}")
    return AutomationPlan(requests, notes, len(days), index.empty_reason(), held)


def days_of(hours: Iterable[dt.datetime]) -> list[dt.date]:
    """The sorted UTC days of ``hours``."""
    return sorted({h.date() for h in hours})


#: Consecutive due days one ``bq-platform run`` builds in one hourly run (each run has fixed
#: costs). A batch whose build fails is built again day by day, so a bad hour holds only its day.
MAX_BATCH_DAYS = 7


def batches(
    hours_of: Mapping[dt.date, Sequence[dt.datetime]], max_days: int = MAX_BATCH_DAYS
) -> list[dict[dt.date, list[dt.datetime]]]:
    """Group days into batches that one hourly run builds: each batch's hours are consecutive
    (no gap between its days' hours) and span at most ``max_days`` days; in time order."""
    out: list[dict[dt.date, list[dt.datetime]]] = []
    last: dt.datetime | None = None
    for day in sorted(hours_of):
        hours = sorted(hours_of[day])
        if not hours:
            continue
        joined = last is not None and hours[0] - last == dt.timedelta(hours=1)
        if out and joined and len(out[-1]) < max_days and len(contiguous(hours)) == 1:
            out[-1][day] = hours
        else:
            out.append({day: hours})
        last = hours[-1]
    return out
