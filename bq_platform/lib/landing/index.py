"""An index of the landing zone: which hours have which landed files, and their source counts.

A data file that no manifest of its hour folder names is an *orphan*: an incomplete delivery
(the manifest is written last). Orphans change the hour's input fingerprint, so the hour is
built again, recorded incomplete and held from publishing until the manifest arrives.
"""

import dataclasses
import datetime as dt
from collections.abc import Iterable

from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.job_ids import input_fingerprint
from bq_platform.lib.core.layout import (
    LANDING_PREFIX,
    is_landed_manifest_name,
    landing_hour_prefix,
    parse_landed_key,
    validate_site,
)
from bq_platform.lib.core.manifest import LandedManifest, LandingError
from bq_platform.lib.storage.base import ObjectNotFoundError, ObjectStore

#: The landing zone's site folders: ``landing/pageviews/site=<name>``.
SITE_FOLDER = "site="


@dataclasses.dataclass(frozen=True)
class LandedHour:
    """All landed files of one UTC hour, over all sites.

    Attributes:
        manifests: the landed manifests of the hour, sorted by key.
        orphans: keys of the hour's data files that no manifest names, sorted.
    """

    hour: dt.datetime
    manifests: tuple[LandedManifest, ...]
    orphans: tuple[str, ...] = ()

    @property
    def partition_key(self) -> str:
        return hour_label(self.hour)

    @property
    def files(self) -> int:
        return len(self.manifests)

    @property
    def source_lines(self) -> int:
        """Lines announced by every delivered manifest (duplicate deliveries included)."""
        return sum(m.lines for m in self.manifests)

    @property
    def sites(self) -> tuple[str, ...]:
        return tuple(sorted({m.site for m in self.manifests}))

    @property
    def input_fingerprint(self) -> str:
        """:func:`hour_input_fingerprint` of the hour."""
        return hour_input_fingerprint(self.manifests, self.orphans)


def orphan_checksum(key: str) -> str:
    """What an orphan data file contributes to its hour's input fingerprint (its key)."""
    return f"orphan:{key}"


def hour_input_fingerprint(manifests: Iterable[LandedManifest], orphans: Iterable[str]) -> str:
    """Input fingerprint of one hour: its files' ``(site, sha256)`` and its orphans' keys.

    Without orphans it is :func:`bq_platform.lib.core.job_ids.input_fingerprint` of the
    manifests. The build records the same value in the hour manifest.
    """
    pairs = [(m.site, m.sha256) for m in manifests]
    for key in orphans:
        parsed = parse_landed_key(key)
        pairs.append((parsed[0] if parsed else "", orphan_checksum(key)))
    return input_fingerprint(pairs)


def find_orphans(keys: Iterable[str], manifests: Iterable[LandedManifest]) -> list[str]:
    """Data keys among ``keys`` (objects of landing hour folders) that no manifest names."""
    named = {m.data_key for m in manifests}
    orphans = []
    for key in keys:
        parsed = parse_landed_key(key)
        if parsed is not None and not is_landed_manifest_name(parsed[2]) and key not in named:
            orphans.append(key)
    return sorted(orphans)


@dataclasses.dataclass(frozen=True)
class LandingIndex:
    """The landing zone by hour.

    ``since``: the first UTC day the scan covered; None: all of them.
    """

    by_hour: dict[dt.datetime, LandedHour]
    since: dt.date | None = None

    def empty_reason(self) -> str:
        """Why there is nothing to plan when no hour is landed, with what to do."""
        if self.since is None:
            return "the landing zone is empty: land files first (bq-platform land)"
        return (
            f"nothing landed from {self.since} on (BQ_PLATFORM_LOOKBACK_DAYS: older days are "
            "not planned; backfill their partitions, or unset it for bq-platform run)"
        )

    def hours(self) -> list[LandedHour]:
        """Landed hours in time order."""
        return [self.by_hour[h] for h in sorted(self.by_hour)]

    def days(self) -> list[dt.date]:
        """UTC days with at least one landed file."""
        return sorted({h.date() for h in self.by_hour})

    def get(self, hour: dt.datetime) -> LandedHour | None:
        return self.by_hour.get(hour)


def scan_landing(store: ObjectStore, since: dt.date | None = None) -> LandingIndex:
    """Read the landed manifests of the store and find the orphan data files.

    ``since``: only the UTC days from this one on; None: the whole landing zone (one listing,
    else one per site starting at ``since``'s folder).

    Raises:
        ManifestError: naming the object if a manifest is unreadable.
        ObjectNotFoundError: a manifest was deleted between the listing and its read.
        LandingError: a ``site=`` folder has a name the pipeline cannot use (with ``since``).
    """
    grouped: dict[dt.datetime, list[LandedManifest]] = {}
    data_keys: dict[dt.datetime, list[str]] = {}
    manifest_keys: list[tuple[dt.datetime, str]] = []
    if since is None:
        listed = store.list_keys(LANDING_PREFIX)
    else:
        first = dt.datetime.combine(since, dt.time(), tzinfo=dt.UTC)
        listed = [
            key
            for site in list_sites(store)
            for key in store.list_keys(
                f"{LANDING_PREFIX}/{SITE_FOLDER}{site}",
                start=landing_hour_prefix(site, first) + "/",
            )
        ]
    for key in listed:
        parsed = parse_landed_key(key)
        if parsed is None:
            continue
        _site, hour, name = parsed
        if is_landed_manifest_name(name):
            manifest_keys.append((hour, key))
        else:
            data_keys.setdefault(hour, []).append(key)
    texts = store.read_many([key for _, key in manifest_keys])
    for hour, key in manifest_keys:
        text = texts[key]
        if isinstance(text, ObjectNotFoundError):  # deleted since the listing
            raise text
        grouped.setdefault(hour, []).append(LandedManifest.from_json(text, where=store.uri(key)))
    by_hour = {}
    for hour in sorted(set(grouped) | set(data_keys)):
        manifests = grouped.get(hour, [])
        by_hour[hour] = LandedHour(
            hour,
            tuple(sorted(manifests, key=lambda m: m.data_key)),
            tuple(find_orphans(data_keys.get(hour, []), manifests)),
        )
    return LandingIndex(by_hour, since)


def list_sites(store: ObjectStore) -> list[str]:
    """Sites with a landing folder (``landing/pageviews/site=<name>``), sorted.

    Raises:
        LandingError: if a ``site=`` folder has a name the pipeline cannot use.
    """
    sites = []
    for folder in store.list_folders(LANDING_PREFIX):
        if not folder.startswith(SITE_FOLDER):
            continue
        name = folder[len(SITE_FOLDER) :]
        try:
            sites.append(validate_site(name))
        except ValueError as exc:
            uri = store.uri(f"{LANDING_PREFIX}/{folder}")
            raise LandingError(f"{uri}: {exc}; rename the folder and land its files again") from exc
    return sites
