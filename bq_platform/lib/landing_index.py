"""An index of the landing zone: which hours have which landed files, and their source counts.

Used by the observable source (data versions), the landing sensor (what changed) and
``bq-platform run`` (what is left to process). It reads every landed manifest once: one
listing plus one small read per file. (A production landing zone with years of data should be
scanned by recent hour prefixes; see docs/production.md.)
"""

import dataclasses
import datetime as dt

from bq_platform.lib.hours import hour_partition_key
from bq_platform.lib.jobids import input_fingerprint
from bq_platform.lib.layout import LANDING_PREFIX, parse_landed_manifest_key
from bq_platform.lib.manifest import LandedManifest
from bq_platform.lib.objectstore.base import ObjectStore


@dataclasses.dataclass(frozen=True)
class LandedHour:
    """All landed files of one UTC hour, over all sites.

    Attributes:
        hour: the UTC hour.
        manifests: the landed manifests of the hour, sorted by key.
    """

    hour: dt.datetime
    manifests: tuple[LandedManifest, ...]

    @property
    def partition_key(self) -> str:
        return hour_partition_key(self.hour)

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
        """Fingerprint of the hour's content: the set of (site, checksum) of its files."""
        return input_fingerprint((m.site, m.sha256) for m in self.manifests)


@dataclasses.dataclass(frozen=True)
class LandingIndex:
    """The landing zone by hour."""

    by_hour: dict[dt.datetime, LandedHour]

    def hours(self) -> list[LandedHour]:
        """Landed hours in time order."""
        return [self.by_hour[h] for h in sorted(self.by_hour)]

    def days(self) -> list[dt.date]:
        """UTC days with at least one landed file."""
        return sorted({h.date() for h in self.by_hour})

    def get(self, hour: dt.datetime) -> LandedHour | None:
        return self.by_hour.get(hour)


def scan_landing(store: ObjectStore) -> LandingIndex:
    """Read every landed manifest of the store.

    Raises:
        ManifestError: naming the object if a manifest is unreadable.
    """
    grouped: dict[dt.datetime, list[LandedManifest]] = {}
    for key in store.list_keys(LANDING_PREFIX):
        parsed = parse_landed_manifest_key(key)
        if parsed is None:
            continue
        _site, hour = parsed
        manifest = LandedManifest.from_json(store.read_bytes(key), where=store.uri(key))
        grouped.setdefault(hour, []).append(manifest)
    return LandingIndex(
        {
            hour: LandedHour(hour, tuple(sorted(ms, key=lambda m: m.data_key)))
            for hour, ms in grouped.items()
        }
    )
