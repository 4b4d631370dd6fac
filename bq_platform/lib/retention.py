"""Attempt cleanup: delete the staging Parquet and dead letters that no hour manifest names.

Every build attempt writes under its own prefix (:func:`bq_platform.lib.layout.attempt_prefix`,
:func:`~bq_platform.lib.layout.deadletter_attempt_prefix`) and the hour manifest, written last,
names the files that count. A crash, a ``--force`` or a concurrent run leaves the other
attempts' files behind: they cost storage and a glob of the dead letters counts them again
(issue 7). This module removes them, per attempt and hour:

- a unit (one attempt's three folders of one hour) is *superseded* when the hour's manifest
  exists and names another attempt: a newer attempt is complete. A unit whose hour has no
  manifest is kept: nothing newer is complete, and its attempt may still be running;
- a superseded unit is deleted only once it has been seen superseded for :data:`RETENTION`
  (first sightings are kept in :data:`~bq_platform.lib.layout.ATTEMPT_REGISTRY_KEY`, so the rule
  works on any object store, without object timestamps). An attempt that is still writing, or a
  load job still reading a manifest that was just replaced, finishes long before that;
- an attempt with no hour folder left (all its hours deleted, or a crash before it wrote one,
  e.g. Spark's ``_temporary``) is deleted whole, with the same retention.

Deleting is idempotent; two cleaners at once at worst forget a sighting (a unit is then kept
one retention longer), never delete a named file: a pass reads the hours' manifests (once each,
side by side) before it deletes anything, and a unit must have been seen superseded for
:data:`RETENTION`, far longer than a pass.
"""

import dataclasses
import datetime as dt
import json
import logging

from bq_platform.lib import layout
from bq_platform.lib.manifest import HourManifest
from bq_platform.lib.manifest_reads import read_hour_manifests
from bq_platform.lib.objectstore.base import ObjectNotFoundError, ObjectStore, side_by_side

#: How long a superseded attempt is kept after cleanup first sees it (issue 7: "a short
#: retention"). Longer than any build or load: a local day takes minutes, a cluster hour less.
RETENTION = dt.timedelta(days=1)
_WHOLE = "*"

Logger = logging.Logger | logging.LoggerAdapter


@dataclasses.dataclass
class CleanupReport:
    """What one cleanup pass did.

    Attributes:
        deleted_objects: objects removed (Parquet files and anything else under the prefixes).
        deleted_units: ``(attempt_id, hour label or '*')`` removed.
        waiting: superseded units kept because they were first seen less than
            :data:`RETENTION` ago.
        kept: units an hour manifest names, or whose hour has no manifest yet.
    """

    deleted_objects: int = 0
    deleted_units: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    waiting: int = 0
    kept: int = 0


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


def names_attempt(manifest: HourManifest, attempt_id: str) -> bool:
    """True if ``manifest`` is the attempt's or names any file under the attempt's prefixes."""
    if manifest.attempt_id == attempt_id:
        return True
    prefixes = (
        layout.attempt_prefix(attempt_id) + "/",
        layout.deadletter_attempt_prefix(attempt_id) + "/",
    )
    files = manifest.full_files + manifest.sample_files + manifest.deadletter_files
    return any(key.startswith(prefixes) for key in files)


def clean_attempts(
    store: ObjectStore,
    now: dt.datetime | None = None,
    retention: dt.timedelta = RETENTION,
    log: Logger | None = None,
) -> CleanupReport:
    """Delete the attempts (per hour) that a newer complete attempt superseded ``retention`` ago.

    Args:
        store: the lake.
        now: current UTC time (tests pass one); default the clock.
        retention: minimum time between first seeing a unit superseded and deleting it.
        log: where to log each deletion (INFO).

    Returns:
        A :class:`CleanupReport`.

    Raises:
        ManifestError: if an hour manifest is unreadable (nothing is deleted for that hour).
    """
    now = now or dt.datetime.now(dt.UTC)
    log = log or logging.getLogger(__name__)
    seen = _read_registry(store)
    still_seen: dict[str, str] = {}
    report = CleanupReport()
    attempts = list_attempts(store)
    listed = side_by_side(lambda a: attempt_hours(store, a), attempts, store.read_threads)
    hours_of = dict(zip(attempts, listed, strict=True))  # GCS: 3 listings each, side by side
    # Every hour's manifest once, side by side (on GCS an existence check and a read per hour,
    # one after the other, were two requests in a row per hour any attempt holds).
    manifests = read_hour_manifests(store, sorted({h for hs in hours_of.values() for h in hs}))

    def due(unit: str) -> bool:
        first = dt.datetime.fromisoformat(seen.get(unit, now.isoformat()))
        still_seen[unit] = first.isoformat()
        return now - first >= retention

    for attempt_id, hours in hours_of.items():
        deleted = 0
        for hour in hours:
            current = manifests[hour]
            if current is None or names_attempt(current, attempt_id):
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
    if still_seen != seen:
        store.write_text(layout.ATTEMPT_REGISTRY_KEY, json.dumps(still_seen, indent=1))
    return report


def _delete(store: ObjectStore, prefixes: tuple[str, ...]) -> int:
    return sum(store.delete_prefix(prefix) for prefix in prefixes)


def _read_registry(store: ObjectStore) -> dict[str, str]:
    try:  # one request: no existence check first
        data = json.loads(store.read_bytes(layout.ATTEMPT_REGISTRY_KEY))
    except ObjectNotFoundError:
        return {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}  # a lost registry only delays deletions by one retention
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
