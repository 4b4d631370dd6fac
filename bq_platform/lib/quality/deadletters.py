"""Dead letters of the current attempts: the rejected and out-of-window lines, for operators.

Reads exactly the dead-letter files the hour manifests name (other attempts' files hold the
same lines again) through the :class:`~bq_platform.lib.storage.base.ObjectStore`, for
``bq-platform deadletters``; ``pageview_deadletters`` is loaded from the same files.
"""

import collections
import dataclasses
import datetime as dt
import io
from collections.abc import Iterable, Iterator

import pyarrow.parquet as pq

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.storage.base import ObjectStore

#: Width to which raw lines are cut for display (characters).
RAW_WIDTH = 120


@dataclasses.dataclass(frozen=True)
class DeadLetter:
    """One rejected or out-of-window line.

    Attributes:
        hour: UTC hour of the delivery (the landing folder).
        data_key: object key of the landed file the line is in.
        line_no: 1-based line number in that file.
    """

    site: str
    hour: dt.datetime
    data_key: str
    line_no: int
    reason: str
    raw: str


@dataclasses.dataclass(frozen=True)
class DeadLetterReport:
    """Counts per reason (all matching lines) and the first ``limit`` lines as samples."""

    counts: dict[str, int]
    samples: list[DeadLetter]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def built_hours(store: ObjectStore) -> list[dt.datetime]:
    """UTC hours with an hour manifest, sorted."""
    hours = map(layout.parse_hour_folder, store.list_folders(layout.STAGING_PREFIX))
    return [h for h in sorted(x for x in hours if x) if store.exists(layout.hour_manifest_key(h))]


def read_dead_letters(store: ObjectStore, hours: Iterable[dt.datetime]) -> Iterator[DeadLetter]:
    """The dead letters the hour manifests of ``hours`` name, hour by hour, in file order
    (hours without a manifest are skipped).

    Raises:
        ManifestError: if a manifest is unreadable.
        ObjectNotFoundError: if a manifest names a file that is gone.
    """
    for hour in hours:
        key = layout.hour_manifest_key(hour)
        if not store.exists(key):
            continue
        manifest = HourManifest.from_json(store.read_bytes(key), where=store.uri(key))
        for file_key in manifest.deadletter_files:
            table = pq.read_table(io.BytesIO(store.read_bytes(file_key)))
            for row in table.to_pylist():
                yield DeadLetter(
                    site=str(row.get("site") or ""),
                    hour=hour,
                    data_key=str(row.get("data_key") or ""),
                    line_no=int(row.get("line_no") or 0),
                    reason=str(row.get("reason") or "unknown"),
                    raw=_text(row.get("raw")),
                )


def summarize(
    letters: Iterable[DeadLetter], reason: str | None = None, limit: int = 20
) -> DeadLetterReport:
    """Count ``letters`` per reason (only ``reason`` if given) and keep the first ``limit``."""
    counts: collections.Counter[str] = collections.Counter()
    samples: list[DeadLetter] = []
    for letter in letters:
        if reason is not None and letter.reason != reason:
            continue
        counts[letter.reason] += 1
        if len(samples) < limit:
            samples.append(letter)
    return DeadLetterReport(counts=dict(counts.most_common()), samples=samples)


def cut(text: str, width: int = RAW_WIDTH) -> str:
    """``text`` on one line (control characters shown as ``\\xNN``), cut to ``width`` chars."""
    shown = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" for c in text)
    return shown if len(shown) <= width else shown[: width - 3] + "..."


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return "" if value is None else str(value)
