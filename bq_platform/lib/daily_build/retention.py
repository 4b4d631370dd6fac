"""Rollup cleanup: delete the content folders of a day's rollup that a newer content replaced.

A day's rollup of one table is written to ``staging/rollups/<table>/day=<D>/<fingerprint>/``
(:func:`bq_platform.lib.core.layout.rollup_prefix`), one folder per content; a rebuilt hour, a
reclassification or a new ``ROLLUP_VERSION`` gives the day a new folder. The rule, per table
and day:

- the folder whose ``_ROLLUP.json`` was written last (``created_at``) is the current content,
  the one the day's publish loads: it is **never** deleted;
- every other folder with a ``_ROLLUP.json`` was superseded when the current one was written,
  and is deleted :data:`RETENTION` after that (a load job that was still reading it has ended);
- a folder without ``_ROLLUP.json`` (a build that did not finish) is deleted once it has been
  seen unfinished for :data:`RETENTION` (first sightings in
  :data:`~bq_platform.lib.core.layout.ROLLUP_REGISTRY_KEY`); no build runs that long.

A deleted content is rebuilt from the hours' files if a publish needs it again
(:func:`bq_platform.lib.daily_build.build.build_rollups` builds every content without a
manifest), so the rule costs at most a rebuild, never a row.
"""

import dataclasses
import datetime as dt
import json
import logging
from collections import defaultdict

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import ManifestError
from bq_platform.lib.daily_build.rollup_files import RollupFiles
from bq_platform.lib.storage.base import ObjectNotFoundError, ObjectStore

#: How long a superseded or unfinished rollup folder is kept.
RETENTION = dt.timedelta(days=1)
_REGISTRY_FORMAT = "bq_platform.rollup_registry/1"

Logger = logging.Logger | logging.LoggerAdapter


@dataclasses.dataclass
class RollupCleanup:
    """What :func:`clean_rollups` did.

    Attributes:
        deleted_folders: the content folders deleted, sorted.
        deleted_objects: objects in them.
        waiting: superseded or unfinished folders kept until :data:`RETENTION` has passed.
        kept: current folders, and folders whose manifest could not be read.
    """

    deleted_folders: list[str] = dataclasses.field(default_factory=list)
    deleted_objects: int = 0
    waiting: int = 0
    kept: int = 0


def content_folders(store: ObjectStore) -> dict[str, dict[str, bool]]:
    """``<table>/day=<D>`` -> content folder (its full prefix) -> whether it holds its
    ``_ROLLUP.json``, from one listing of the rollups' tree."""
    found: dict[str, dict[str, bool]] = defaultdict(dict)
    for key in store.list_keys(layout.ROLLUPS_PREFIX):
        parts = key[len(layout.ROLLUPS_PREFIX) + 1 :].split("/")
        if len(parts) < 4:
            continue  # bookkeeping at the top of the tree
        table_day = f"{parts[0]}/{parts[1]}"
        folder = f"{layout.ROLLUPS_PREFIX}/{table_day}/{parts[2]}"
        complete = parts[3] == layout.ROLLUP_MANIFEST_NAME and len(parts) == 4
        found[table_day][folder] = found[table_day].get(folder, False) or complete
    return dict(found)


def clean_rollups(
    store: ObjectStore,
    now: dt.datetime | None = None,
    retention: dt.timedelta = RETENTION,
    log: Logger | None = None,
) -> RollupCleanup:
    """Delete the superseded and unfinished rollup folders due under the module's rule.

    Args:
        now: current UTC time; default the clock.
        retention: minimum time between a folder being superseded (or first seen unfinished)
            and its deletion.
        log: where to log each deletion (INFO) and each unreadable manifest (WARNING; its
            folder is kept).
    """
    now = now or dt.datetime.now(dt.UTC)
    log = log or logging.getLogger(__name__)
    report = RollupCleanup()
    groups = content_folders(store)
    seen = _read_registry(store)
    if not groups and not seen:
        return report
    still_seen: dict[str, str] = {}
    due: list[str] = []
    for _, folders in sorted(groups.items()):
        complete = sorted(f for f, done in folders.items() if done)
        for folder in sorted(f for f, done in folders.items() if not done):
            first = seen.get(folder, now.isoformat())
            if now - dt.datetime.fromisoformat(first) >= retention:
                due.append(folder)
            else:
                still_seen[folder] = first
                report.waiting += 1
        if len(complete) < 2:
            report.kept += len(complete)
            continue
        written = _written_at(store, complete, log)
        readable = {f: t for f, t in written.items() if t is not None}
        report.kept += len(complete) - len(readable)  # unreadable: kept, logged
        if not readable:
            continue
        current = max(readable, key=lambda f: (readable[f], f))
        report.kept += 1
        for folder in sorted(readable):
            if folder == current:
                continue
            if now - readable[current] >= retention:
                due.append(folder)
            else:
                report.waiting += 1
    for folder in sorted(due):
        report.deleted_objects += store.delete_prefix(folder)
        report.deleted_folders.append(folder)
        log.info("deleted rollup folder %s (superseded or unfinished)", folder)
    if still_seen or seen:
        store.write_text(
            layout.ROLLUP_REGISTRY_KEY,
            json.dumps({"format": _REGISTRY_FORMAT, "first_seen": still_seen}, indent=1),
        )
    return report


def _written_at(
    store: ObjectStore, folders: list[str], log: Logger
) -> dict[str, dt.datetime | None]:
    """Each folder's manifest ``created_at``; None (logged) where it cannot be read."""
    keys = {folder: f"{folder}/{layout.ROLLUP_MANIFEST_NAME}" for folder in folders}
    texts = store.read_many(list(keys.values()))
    written: dict[str, dt.datetime | None] = {}
    for folder, key in keys.items():
        text = texts[key]
        try:
            if isinstance(text, ObjectNotFoundError):
                raise ManifestError(f"{store.uri(key)}: gone while the cleanup read it")
            written[folder] = RollupFiles.from_json(text, where=store.uri(key)).created_at
        except ManifestError as exc:
            log.warning("%s; its folder is kept: delete it by hand", exc)
            written[folder] = None
    return written


def _read_registry(store: ObjectStore) -> dict[str, str]:
    """First sightings of unfinished folders; empty if missing or unreadable (which only
    delays their deletion by one retention)."""
    try:
        data = json.loads(store.read_bytes(layout.ROLLUP_REGISTRY_KEY))
    except (ObjectNotFoundError, json.JSONDecodeError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != _REGISTRY_FORMAT:
        return {}
    first_seen = data.get("first_seen")
    if not isinstance(first_seen, dict):
        return {}
    valid = {}
    for folder, when in first_seen.items():
        try:
            dt.datetime.fromisoformat(str(when))
        except ValueError:
            continue
        valid[str(folder)] = str(when)
    return valid
