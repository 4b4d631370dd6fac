"""Attempt cleanup: delete the staging Parquet and dead letters that no hour manifest names.

A rebuild, a crash or a concurrent run leaves other attempts' files behind; this module deletes
them per *unit* (one attempt's three folders of one hour). :func:`clean_staging` runs:

- the **record pass** (:func:`clean_superseded`), every time: the units the builds recorded as
  displaced (:mod:`bq_platform.lib.hourly_build.superseded`), :data:`RETENTION` after the record;
- the **full pass** (:func:`clean_attempts`), every :data:`FULL_PASS_EVERY`: the attempts not
  yet *settled*, for what no record names (a crashed attempt, a lost race). A unit whose hour's
  manifest names another attempt is deleted once seen so for :data:`RETENTION` (sightings in
  :data:`~bq_platform.lib.core.layout.ATTEMPT_REGISTRY_KEY`). An attempt is *settled* once every
  hour it holds is named by a manifest at least :data:`RETENTION` old; only a recorded build
  can displace it then.

Both passes re-read the hour's current manifest and never delete a unit it names.
:func:`clean_staging` then deletes the superseded content folders of the daily rollups
(:func:`bq_platform.lib.daily_build.retention.clean_rollups`, with the same retention).
"""

import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Sequence

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import HourManifest, ManifestError, read_hour_manifests
from bq_platform.lib.daily_build.retention import clean_rollups
from bq_platform.lib.hourly_build.superseded import (
    Unit,
    named_attempts,
    read_records,
    record_folder,
)
from bq_platform.lib.storage.base import ObjectNotFoundError, ObjectStore, side_by_side

#: How long a superseded attempt is kept after it is known superseded: longer than any build
#: or load job still reading a manifest that was just replaced.
RETENTION = dt.timedelta(days=1)
#: How often :func:`clean_staging` adds the full pass.
FULL_PASS_EVERY = dt.timedelta(days=7)
_WHOLE = "*"
#: A /2 registry (no settled attempts) is still read.
_REGISTRY_FORMAT = "bq_platform.attempt_registry/3"
_PREVIOUS_FORMAT = "bq_platform.attempt_registry/2"

Logger = logging.Logger | logging.LoggerAdapter


@dataclasses.dataclass
class CleanupReport:
    """What a cleanup did.

    Attributes:
        deleted_objects: objects removed under the attempts' prefixes.
        deleted_units: ``(attempt_id, hour label or '*')`` removed, in the order removed.
        waiting: superseded units kept until :data:`RETENTION` has passed.
        kept: units an hour manifest names, or whose hour has no manifest.
        records: superseded records done with and deleted.
        bad_records: keys of records that could not be read (kept, logged).
        settled: settled attempts the full pass did not visit.
        deleted_rollups: superseded or unfinished rollup content folders removed (their
            objects are in ``deleted_objects``).
        rollups_waiting: such folders kept until the retention has passed.
    """

    deleted_objects: int = 0
    deleted_units: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    waiting: int = 0
    kept: int = 0
    records: int = 0
    bad_records: list[str] = dataclasses.field(default_factory=list)
    full_pass: bool = False
    settled: int = 0
    deleted_rollups: list[str] = dataclasses.field(default_factory=list)
    rollups_waiting: int = 0

    def describe(self) -> str:
        """One line for people: what was deleted, what waits, what could not be read."""
        attempts = len({attempt for attempt, _ in self.deleted_units})
        text = (
            f"deleted {self.deleted_objects} files of {len(self.deleted_units)} superseded "
            f"attempt-hours ({attempts} attempts); {self.waiting} wait for the retention, "
            f"{self.kept} are named or not yet superseded; {self.records} records done"
        )
        if self.full_pass:
            text += f"; full pass ({self.settled} settled attempts not visited)"
        if self.deleted_rollups or self.rollups_waiting:
            text += (
                f"; deleted {len(self.deleted_rollups)} superseded rollup folders, "
                f"{self.rollups_waiting} wait"
            )
        if self.bad_records:
            text += (
                f"; {len(self.bad_records)} unreadable superseded records kept, e.g. "
                f"{self.bad_records[0]}: delete them (the weekly full pass finds their attempts)"
            )
        return text

    def add(self, other: "CleanupReport") -> "CleanupReport":
        """This report with ``other``'s counts added (the passes never count a unit twice)."""
        return CleanupReport(
            deleted_objects=self.deleted_objects + other.deleted_objects,
            deleted_units=self.deleted_units + other.deleted_units,
            waiting=self.waiting + other.waiting,
            kept=self.kept + other.kept,
            records=self.records + other.records,
            bad_records=self.bad_records + other.bad_records,
            full_pass=self.full_pass or other.full_pass,
            settled=self.settled + other.settled,
            deleted_rollups=self.deleted_rollups + other.deleted_rollups,
            rollups_waiting=self.rollups_waiting + other.rollups_waiting,
        )


@dataclasses.dataclass
class _Registry:
    """The full pass's bookkeeping: first sightings of superseded units, last full pass, and
    the settled attempts it no longer visits (sorted IDs)."""

    first_seen: dict[str, str]
    last_full_pass: dt.datetime | None = None
    settled: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": _REGISTRY_FORMAT,
                "last_full_pass": self.last_full_pass and self.last_full_pass.isoformat(),
                "first_seen": self.first_seen,
                "settled": self.settled,
            },
            indent=1,
        )


def clean_staging(
    store: ObjectStore,
    now: dt.datetime | None = None,
    retention: dt.timedelta = RETENTION,
    full: bool = False,
    log: Logger | None = None,
) -> CleanupReport:
    """The record pass, then the full pass if ``full`` or if none ran in the last
    :data:`FULL_PASS_EVERY`, then the rollups' superseded folders.

    Args:
        now: current UTC time; default the clock.
        retention: minimum time between a unit being known superseded and its deletion.
        full: run the full pass whenever it last ran.
        log: where to log each deletion (INFO).

    Raises:
        ManifestError: if an hour manifest is unreadable (nothing is deleted for that pass).
    """
    now = now or dt.datetime.now(dt.UTC)
    report, recorded = _record_pass(store, now, retention, log)
    registry = _read_registry(store)
    last = registry.last_full_pass
    if full or last is None or now - last >= FULL_PASS_EVERY:
        # the units a record waits for are the record pass's: counted and timed once
        report = report.add(_full_pass(store, registry, now, retention, log, skip=recorded))
    rollups = clean_rollups(store, now, retention, log)
    return report.add(
        CleanupReport(
            deleted_objects=rollups.deleted_objects,
            deleted_rollups=rollups.deleted_folders,
            rollups_waiting=rollups.waiting,
        )
    )


def clean_superseded(
    store: ObjectStore,
    now: dt.datetime | None = None,
    retention: dt.timedelta = RETENTION,
    log: Logger | None = None,
) -> CleanupReport:
    """The record pass: delete the units the builds' superseded records name, ``retention``
    after each record was written, unless the hour's current manifest names them again.

    A record that is not due yet is left for a later pass.

    Raises:
        ManifestError: if an hour manifest is unreadable (nothing is deleted then).
    """
    return _record_pass(store, now or dt.datetime.now(dt.UTC), retention, log)[0]


def _record_pass(
    store: ObjectStore, now: dt.datetime, retention: dt.timedelta, log: Logger | None
) -> tuple[CleanupReport, set[Unit]]:
    """:func:`clean_superseded`, and the units of the records not due yet."""
    log = log or logging.getLogger(__name__)
    report = CleanupReport()
    due: dict[str, tuple[Unit, ...]] = {}
    waiting: set[Unit] = set()
    for key, record in read_records(store).items():
        if isinstance(record, ManifestError):
            log.warning("%s; kept: delete it by hand (the full pass finds its units)", record)
            report.bad_records.append(key)
        elif now - record.written_at < retention:
            waiting.update(record.units)
        else:
            due[key] = record.units
    report.waiting = len(waiting)
    units = sorted({unit for record_units in due.values() for unit in record_units})
    hours = {label: layout.parse_hour_label(label) for _, label in units}
    manifests = read_hour_manifests(store, sorted(set(hours.values())))
    gone = []
    for attempt_id, label in units:
        current = manifests[hours[label]]
        if current is None or attempt_id in named_attempts(current):
            report.kept += 1
        else:
            gone.append((attempt_id, label))
    counts = side_by_side(
        lambda unit: _delete(store, layout.attempt_hour_prefixes(unit[0], hours[unit[1]])),
        gone,
        store.read_threads,
    )
    for unit, count in zip(gone, counts, strict=True):
        report.deleted_objects += count
        report.deleted_units.append(unit)
        log.info("deleted attempt %s of hour %s (superseded, recorded)", *unit)
    for key in due:
        store.delete_prefix(record_folder(key))
        report.records += 1
    return report, waiting


def list_attempts(store: ObjectStore) -> list[str]:
    """Attempt IDs with a folder in the staging or the dead-letter tree, sorted."""
    names = store.list_folders(layout.STAGING_PREFIX) + store.list_folders(layout.DEADLETTER_PREFIX)
    return sorted({a for a in map(layout.parse_attempt_folder, names) if a is not None})


def attempt_hours(store: ObjectStore, attempt_id: str) -> list[dt.datetime]:
    """UTC hours with a folder in any of the attempt's three trees, sorted."""
    staging = layout.attempt_prefix(attempt_id)
    folders = (
        store.list_folders(f"{staging}/full")
        + store.list_folders(f"{staging}/sample")
        + store.list_folders(layout.deadletter_attempt_prefix(attempt_id))
    )
    return sorted({h for h in map(layout.parse_hour_folder, folders) if h is not None})


def clean_attempts(
    store: ObjectStore,
    now: dt.datetime | None = None,
    retention: dt.timedelta = RETENTION,
    log: Logger | None = None,
) -> CleanupReport:
    """The full pass: delete the attempts (per hour) seen superseded ``retention`` ago.

    Arguments as :func:`clean_staging`'s.

    Raises:
        ManifestError: if an hour manifest is unreadable (nothing is deleted then).
    """
    return _full_pass(store, _read_registry(store), now or dt.datetime.now(dt.UTC), retention, log)


def _full_pass(
    store: ObjectStore,
    registry: _Registry,
    now: dt.datetime,
    retention: dt.timedelta,
    log: Logger | None,
    skip: set[Unit] = frozenset(),  # type: ignore[assignment]
) -> CleanupReport:
    log = log or logging.getLogger(__name__)
    seen = registry.first_seen
    still_seen: dict[str, str] = {}
    report = CleanupReport(full_pass=True)
    listed = list_attempts(store)
    settled = set(registry.settled) & set(listed)
    attempts = [a for a in listed if a not in settled]
    report.settled = len(settled)
    held = side_by_side(lambda a: attempt_hours(store, a), attempts, store.read_threads)
    hours_of = dict(zip(attempts, held, strict=True))
    manifests = read_hour_manifests(store, sorted({h for hs in hours_of.values() for h in hs}))

    def due(unit: str) -> bool:
        first = dt.datetime.fromisoformat(seen.get(unit, now.isoformat()))
        still_seen[unit] = first.isoformat()
        return now - first >= retention

    for attempt_id, hours in hours_of.items():
        if hours and all(_settles(manifests[h], attempt_id, now, retention) for h in hours):
            settled.add(attempt_id)
        deleted = 0
        for hour in hours:
            current = manifests[hour]
            if (attempt_id, layout.hour_label(hour)) in skip:
                continue  # a record waits for it (record pass)
            if current is None or attempt_id in named_attempts(current):
                report.kept += 1
                continue
            unit = f"{attempt_id}/{layout.hour_label(hour)}"
            if not due(unit):
                report.waiting += 1
                continue
            report.deleted_objects += _delete(store, layout.attempt_hour_prefixes(attempt_id, hour))
            report.deleted_units.append((attempt_id, layout.hour_label(hour)))
            still_seen.pop(unit)
            deleted += 1
            log.info("deleted attempt %s of hour %s (superseded)", attempt_id, hour)
        if hours and deleted < len(hours):
            continue
        if not hours and not due(f"{attempt_id}/{_WHOLE}"):
            report.waiting += 1
            continue
        prefixes = (layout.attempt_prefix(attempt_id), layout.deadletter_attempt_prefix(attempt_id))
        report.deleted_objects += _delete(store, prefixes)
        report.deleted_units.append((attempt_id, _WHOLE))
        still_seen.pop(f"{attempt_id}/{_WHOLE}", None)
        log.info("deleted attempt %s (no hour manifest names it)", attempt_id)
    registry = _Registry(still_seen, now, sorted(settled))
    store.write_text(layout.ATTEMPT_REGISTRY_KEY, registry.to_json())
    return report


def _settles(
    manifest: HourManifest | None, attempt_id: str, now: dt.datetime, retention: dt.timedelta
) -> bool:
    """Whether ``manifest`` (an hour's current one) names ``attempt_id`` and was written
    ``retention`` ago or more: a build that raced it for the hour has written by then."""
    return (
        manifest is not None
        and attempt_id in named_attempts(manifest)
        and now - manifest.created_at >= retention
    )


def _delete(store: ObjectStore, prefixes: Sequence[str]) -> int:
    return sum(store.delete_prefix(prefix) for prefix in prefixes)


def _read_registry(store: ObjectStore) -> _Registry:
    """The registry; empty if missing or unreadable (which only delays deletions by one
    retention). A flat JSON object is the first format (first sightings only)."""
    try:
        data = json.loads(store.read_bytes(layout.ATTEMPT_REGISTRY_KEY))
    except ObjectNotFoundError:
        return _Registry({})
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _Registry({})
    if not isinstance(data, dict):
        return _Registry({})
    if data.get("format") not in (_REGISTRY_FORMAT, _PREVIOUS_FORMAT):
        return _Registry({str(k): str(v) for k, v in data.items()})
    try:
        last = data.get("last_full_pass")
        last_full_pass = dt.datetime.fromisoformat(last) if last else None
        first_seen = {str(k): str(v) for k, v in dict(data.get("first_seen") or {}).items()}
        settled = [str(a) for a in data.get("settled") or []]
    except (TypeError, ValueError):
        return _Registry({})
    return _Registry(first_seen, last_full_pass, settled)
