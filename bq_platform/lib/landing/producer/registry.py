"""The landing registry: what was landed of each source file, so a growing log counts once.

Like Filebeat's registry (``file_identity.fingerprint``, elastic/beats#35734), it resumes at
the offset read so far and starts over when the file was rotated or truncated. A source is its
site and name (basename or ``--source``); its identity is the content landed so far: ``bytes``
landed (uncompressed), their ``sha256``, their ``lines``, and ``partial``, the length of a last
line without ``\\n``. When the source arrives again starting with those bytes, only what follows
is new. Each landing is a :class:`Delivery`, so a lost object can be rebuilt byte for byte.

The entry is written *after* the data and manifests: after a crash the next landing re-lands
the same bytes into the same objects, and nothing counts twice.
"""

import dataclasses
import datetime as dt
import hashlib
import json
from typing import Any

from bq_platform.lib.core.layout import hour_label, landing_registry_key, parse_hour_label
from bq_platform.lib.core.partition_window import HourWindow
from bq_platform.lib.storage.base import ObjectStore

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
        carry_hour: the hour of the line before ``start``, which leading unplaceable lines take.
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
        """Parse an entry; :class:`RegistryError` naming ``where`` if it is not one."""
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
    """The registry entry of ``source`` of ``site``, or None if it was never landed;
    :class:`RegistryError` if it cannot be read."""
    key = landing_registry_key(site, source)
    if not store.exists(key):
        return None
    return SourceState.from_json(store.read_bytes(key), where=store.uri(key))


def write_state(store: ObjectStore, state: SourceState) -> None:
    """Store the entry (after the data and manifests it describes)."""
    store.write_text(landing_registry_key(state.site, state.source), state.to_json())
