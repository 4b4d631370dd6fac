"""The landing registry: what was landed of each source file, so a growing log counts once.

A log shipper remembers how far it has read each file. Filebeat keeps a registry
(``registry.path``, ``filebeat/data.json``) with one state per file: its ``source`` path, the
``offset`` read so far and the file's identity (device and inode by default; since 8.x also
``file_identity.fingerprint``, a hash of the file's first bytes, elastic/beats PR 35734).
Fluent Bit's tail input keeps the same in an SQLite database (``db``, table ``in_tail_files``:
name, offset, inode, rotated), matched by inode and optionally the name
(``db.compare_filename``). Both resume at the offset and start over when the file was rotated
or truncated.

Here the input is a file handed to ``bq-platform land`` (a cron copy of ``access.log``, say),
often on another machine, so inodes mean nothing. A source is identified by its site and its
name (the file's basename or ``--source``), and its identity is the content landed so far:

- ``bytes``: how many uncompressed bytes of the source were landed;
- ``sha256``: SHA-256 of those bytes (a full prefix fingerprint, not only the first KB);
- ``lines``: the lines they held; ``partial``: the length of the last one if it had no ``\\n``.

When the same source arrives again and its first ``bytes`` bytes have that SHA-256, only what
follows is new. Otherwise (rotated, truncated, another file under the same name) it is new
content from byte 0. Each landing is recorded as a :class:`Delivery` (its byte range, the hour
window and default hour it was split with, and the landed object of each hour), so a landed
object that went missing or corrupt can be rebuilt from the source byte for byte.

The entry is stored in the object store next to the landing zone
(:func:`bq_platform.lib.core.layout.landing_registry_key`) and written *after* the data and
manifests: a crash in between leaves the old entry, the next landing re-lands the same bytes
into the same objects, and nothing counts twice.
"""

import dataclasses
import datetime as dt
import hashlib
import json
from typing import Any

from bq_platform.lib.core.layout import hour_label, landing_registry_key, parse_hour_label
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.core.partition_window import HourWindow

REGISTRY_FORMAT = "bq_platform.landing_registry/1"


class RegistryError(ValueError):
    """A registry entry is unreadable or has the wrong format (names the object)."""


@dataclasses.dataclass(frozen=True)
class Delivery:
    """One landing of a byte range of a source.

    Attributes:
        start / end: uncompressed byte offsets in the source, ``[start, end)``.
        window: the hour window lines were placed with.
        default_hour: the hour for a range without any placeable timestamp, if one was given.
        objects: UTC hour -> data key of the landed object holding that hour's lines.
        carry_hour: the hour of the line before ``start`` (the previous delivery's last), which
            leading lines without a placeable timestamp take, as in a whole-file landing.
        last_hour: the hour its last line was placed in.
    """

    start: int
    end: int
    window: HourWindow
    default_hour: dt.datetime | None
    objects: dict[dt.datetime, str]
    carry_hour: dt.datetime | None = None
    last_hour: dt.datetime | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "start": self.start,
            "end": self.end,
            "window": self.window.to_json(),
            "default_hour": hour_label(self.default_hour) if self.default_hour else None,
            "objects": {hour_label(h): k for h, k in sorted(self.objects.items())},
            "carry_hour": hour_label(self.carry_hour) if self.carry_hour else None,
            "last_hour": hour_label(self.last_hour) if self.last_hour else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Delivery":
        default, carry, last = (data.get(k) for k in ("default_hour", "carry_hour", "last_hour"))
        return cls(
            start=int(data["start"]),
            end=int(data["end"]),
            window=HourWindow.from_json(data["window"]),
            default_hour=parse_hour_label(default) if default else None,
            objects={parse_hour_label(h): str(k) for h, k in data["objects"].items()},
            carry_hour=parse_hour_label(carry) if carry else None,
            last_hour=parse_hour_label(last) if last else None,
        )


@dataclasses.dataclass(frozen=True)
class SourceState:
    """What was landed of one source (see the module docstring)."""

    site: str
    source: str
    bytes: int
    lines: int
    sha256: str
    partial: int
    deliveries: tuple[Delivery, ...]

    def continues(self, data: bytes) -> bool:
        """True if ``data`` starts with exactly the bytes landed so far."""
        return (
            len(data) >= self.bytes
            and hashlib.sha256(memoryview(data)[: self.bytes]).hexdigest() == self.sha256
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "format": REGISTRY_FORMAT,
                "site": self.site,
                "source": self.source,
                "bytes": self.bytes,
                "lines": self.lines,
                "sha256": self.sha256,
                "partial": self.partial,
                "deliveries": [d.to_json() for d in self.deliveries],
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes, where: str) -> "SourceState":
        """Parse an entry.

        Raises:
            RegistryError: naming ``where`` if it is not a valid entry.
        """
        try:
            data = json.loads(text)
            if data.get("format") != REGISTRY_FORMAT:
                raise ValueError(f"expected format {REGISTRY_FORMAT!r}, got {data.get('format')!r}")
            return cls(
                site=str(data["site"]),
                source=str(data["source"]),
                bytes=int(data["bytes"]),
                lines=int(data["lines"]),
                sha256=str(data["sha256"]),
                partial=int(data["partial"]),
                deliveries=tuple(Delivery.from_json(d) for d in data["deliveries"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RegistryError(
                f"{where}: not a landing registry entry ({exc}); delete it to land the source "
                "from byte 0 (its lines already landed would then count again)"
            ) from exc


def read_state(store: ObjectStore, site: str, source: str) -> SourceState | None:
    """The registry entry of ``source`` of ``site``, or None if it was never landed.

    Raises:
        RegistryError: if the entry exists but cannot be read.
    """
    key = landing_registry_key(site, source)
    if not store.exists(key):
        return None
    return SourceState.from_json(store.read_bytes(key), where=store.uri(key))


def write_state(store: ObjectStore, state: SourceState) -> None:
    """Store the entry (after the data and manifests it describes)."""
    store.write_text(landing_registry_key(state.site, state.source), state.to_json())
