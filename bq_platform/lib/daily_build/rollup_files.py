"""What a day's rollups are built from, and the manifest that names the files they were
written to.

A day's rollups are built from the full Parquet files of the hours ``pageviews$YYYYMMDD`` was
published from (:class:`RollupInputs`). Their fingerprint
(:func:`bq_platform.lib.core.job_ids.rollup_fingerprint`) names the folder the files go to
(:func:`bq_platform.lib.core.layout.rollup_prefix`), so the same content always has the same
folder; the :class:`RollupFiles` manifest is written there after the files and is what a load
job loads. A folder without its manifest holds a build that did not finish: the next build
replaces it.
"""

import dataclasses
import datetime as dt
import json
from collections.abc import Mapping, Sequence

from bq_platform.lib.core.hours import hour_label
from bq_platform.lib.core.job_ids import day_fingerprint, rollup_fingerprint
from bq_platform.lib.core.layout import rollup_manifest_key
from bq_platform.lib.core.manifest import HourManifest, ManifestError, stage_files
from bq_platform.lib.storage.base import ObjectNotFoundError, ObjectStore

ROLLUP_MANIFEST_FORMAT = "bq_platform.rollup/1"


@dataclasses.dataclass(frozen=True)
class RollupInputs:
    """The content of one day's rollups.

    Attributes:
        day: the UTC day.
        hour_fingerprints: ``YYYY-MM-DDTHH`` -> fingerprint of each hour published into
            ``pageviews$YYYYMMDD`` (:func:`bq_platform.lib.core.job_ids.day_fingerprint` of
            them is the day's publish fingerprint).
        files: object keys of those hours' full Parquet files, as their manifests name them.
        version: the aggregation's version
            (:data:`bq_platform.lib.daily_build.rollups.ROLLUP_VERSION`).
    """

    day: dt.date
    hour_fingerprints: Mapping[str, str]
    files: tuple[str, ...]
    version: str

    @property
    def day_fingerprint(self) -> str:
        """The fingerprint of the published day these rollups are computed from."""
        return day_fingerprint(self.hour_fingerprints)

    @property
    def fingerprint(self) -> str:
        """The rollups' content fingerprint: the day's fingerprint and :attr:`version`."""
        return rollup_fingerprint(self.day_fingerprint, self.version)

    @property
    def hours(self) -> list[str]:
        """The hours (``YYYY-MM-DDTHH``), in order."""
        return sorted(self.hour_fingerprints)


def rollup_inputs(
    day: dt.date, manifests: Mapping[dt.datetime, HourManifest], version: str
) -> RollupInputs:
    """The inputs of ``day``'s rollups from the manifests of the hours published into it.

    Raises:
        ValueError: if ``manifests`` is empty or names an hour of another day.
    """
    if not manifests:
        raise ValueError(f"no hour of {day} was published: nothing to roll up")
    other = [hour_label(h) for h in manifests if h.date() != day]
    if other:
        raise ValueError(f"hours {', '.join(sorted(other))} are not of {day}")
    ordered = sorted(manifests)
    return RollupInputs(
        day=day,
        hour_fingerprints={hour_label(h): manifests[h].fingerprint for h in ordered},
        files=tuple(key for h in ordered for key in stage_files(manifests[h], "full")),
        version=version,
    )


@dataclasses.dataclass(frozen=True)
class RollupFiles:
    """The manifest of one day's rollup of one table: its Parquet files and what they hold.

    Attributes:
        table: the rollup table (``pageviews_daily_by_site`` or ``pageviews_daily_by_page``).
        fingerprint: :attr:`RollupInputs.fingerprint` of the content.
        day_fingerprint: the published day's fingerprint it was computed from.
        files: object keys of the Parquet files, in order.
        rows: rows in the files.
        human_pageviews, bot_pageviews: sums of those columns over the rows (``bot_pageviews``
            0 for a table without that column).
    """

    table: str
    day: dt.date
    fingerprint: str
    day_fingerprint: str
    files: tuple[str, ...]
    rows: int
    human_pageviews: int
    bot_pageviews: int
    created_at: dt.datetime = dataclasses.field(
        default_factory=lambda: dt.datetime.now(dt.UTC).replace(microsecond=0)
    )

    @property
    def key(self) -> str:
        """Where this manifest is stored."""
        return rollup_manifest_key(self.table, self.day, self.fingerprint)

    def to_json(self) -> str:
        """Serialize as an indented JSON document."""
        return json.dumps(
            {
                "format": ROLLUP_MANIFEST_FORMAT,
                "table": self.table,
                "day": self.day.isoformat(),
                "fingerprint": self.fingerprint,
                "day_fingerprint": self.day_fingerprint,
                "files": list(self.files),
                "rows": self.rows,
                "human_pageviews": self.human_pageviews,
                "bot_pageviews": self.bot_pageviews,
                "created_at": self.created_at.isoformat(),
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes, where: str = "<rollup manifest>") -> "RollupFiles":
        """Parse a rollup manifest; ManifestError naming ``where`` if it is not valid."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ManifestError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict) or data.get("format") != ROLLUP_MANIFEST_FORMAT:
            raise ManifestError(f"{where}: expected format {ROLLUP_MANIFEST_FORMAT!r}")
        try:
            return cls(
                table=str(data["table"]),
                day=dt.date.fromisoformat(data["day"]),
                fingerprint=str(data["fingerprint"]),
                day_fingerprint=str(data["day_fingerprint"]),
                files=tuple(str(k) for k in data["files"]),
                rows=int(data["rows"]),
                human_pageviews=int(data["human_pageviews"]),
                bot_pageviews=int(data["bot_pageviews"]),
                created_at=dt.datetime.fromisoformat(data["created_at"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestError(f"{where}: bad or missing field: {exc}") from exc


def read_rollup_files(
    store: ObjectStore, inputs: RollupInputs, tables: Sequence[str]
) -> dict[str, RollupFiles | None]:
    """Each table's rollup manifest for ``inputs``' content (None: not built yet), read side by
    side.

    Raises:
        ManifestError: if a manifest is unreadable or names another table, day or content
            (delete its folder and run again).
    """
    keys = {t: rollup_manifest_key(t, inputs.day, inputs.fingerprint) for t in tables}
    texts = store.read_many(list(keys.values()))
    found: dict[str, RollupFiles | None] = {}
    for table, key in keys.items():
        text = texts[key]
        if isinstance(text, ObjectNotFoundError):
            found[table] = None
            continue
        files = RollupFiles.from_json(text, where=store.uri(key))
        if (files.table, files.day, files.fingerprint) != (table, inputs.day, inputs.fingerprint):
            raise ManifestError(
                f"{store.uri(key)} names {files.table} of {files.day} ({files.fingerprint[:12]})"
                f", not {table} of {inputs.day} ({inputs.fingerprint[:12]}): delete its folder "
                "and publish the day again"
            )
        found[table] = files
    return found
