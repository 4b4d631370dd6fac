"""The landing registry: what was landed of each source file, so a growing log counts once.

Like Filebeat's registry (``file_identity.fingerprint``, elastic/beats#35734), it resumes at
the offset read so far and starts over when the file was rotated or truncated. A source is its
site and name (basename or ``--source``); its identity is the content landed so far: ``bytes``
landed (uncompressed), their ``sha256``, their ``lines``, and ``partial``, the length of a last
line without ``\\n``. When the source arrives again starting with those bytes, only what follows
is new. Each landing is a :class:`Delivery`, so a lost object can be rebuilt byte for byte.

Keys: one entry per source at :func:`~bq_platform.lib.core.layout.landing_registry_key`, named
by the SHA-256 of the source name, so any file name fits; the entry holds the full name and
:func:`read_state` checks it. An entry under the URL-quoted key
(:func:`~bq_platform.lib.core.layout.quoted_registry_key`) is read when the hashed one is
absent; the next write goes to the hashed key, and the quoted entry is left as it is.

Order: the entry is written *before* the data and manifests, with ``pending_from`` set to the
first delivery whose objects are about to be written, then again without it once they are all
written. A landing that stops in between (a crash, a full disk, a refused write) leaves an
entry that names what was meant to be there: the next landing of the source writes those
deliveries again from the source's bytes (each is deterministic), then lands what is new, so
every line counts once. Objects are never written without an entry that covers them. If the
source no longer starts with the bytes of such an entry (rotated meanwhile), its unfinished
deliveries cannot be rebuilt: the lander warns, naming the source and the byte range.
"""

import dataclasses
import datetime as dt
import errno
import hashlib
import json
from typing import Any

from bq_platform.lib.core.layout import (
    hour_label,
    landing_registry_key,
    parse_hour_label,
    quoted_registry_key,
)
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
    """What was landed of one source (see the module docstring).

    Attributes:
        pending_from: index of the first delivery whose objects may not all be written yet
            (a landing is under way, or stopped); None when every object was written.
    """

    site: str
    source: str
    bytes: int
    lines: int
    sha256: str
    partial: int
    deliveries: tuple[Delivery, ...]
    pending_from: int | None = None

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
                "pending_from": self.pending_from,
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
            pending = data.get("pending_from")
            return cls(
                site=str(data["site"]),
                source=str(data["source"]),
                bytes=int(data["bytes"]),
                lines=int(data["lines"]),
                sha256=str(data["sha256"]),
                partial=int(data["partial"]),
                deliveries=tuple(Delivery.from_json(d) for d in data["deliveries"]),
                pending_from=None if pending is None else int(pending),
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RegistryError(
                f"{where}: not a landing registry entry ({exc}); delete it to land the source "
                "from byte 0 (its lines already landed would then count again)"
            ) from exc


def read_state(store: ObjectStore, site: str, source: str) -> SourceState | None:
    """The registry entry of ``source`` of ``site`` (its hashed key, else its URL-quoted key),
    or None if it was never landed.

    Raises:
        RegistryError: if the entry cannot be read, or names another site or source than asked
            (the message names the object and what to do).
        ValueError: for an invalid site or source name.
    """
    key = landing_registry_key(site, source)
    if not store.exists(key):
        key = _quoted_key_present(store, site, source)
        if key is None:
            return None
    where = store.uri(key)
    state = SourceState.from_json(store.read_bytes(key), where=where)
    if (state.site, state.source) != (site, source):
        raise RegistryError(
            f"{where}: this registry entry is of source {state.source!r} of site "
            f"{state.site!r}, not of {source!r} of {site!r} (it was copied or edited); put the "
            f"right entry back, or delete it to land {source!r} from byte 0 (its lines already "
            "landed would then count again)"
        )
    return state


def _quoted_key_present(store: ObjectStore, site: str, source: str) -> str | None:
    """The URL-quoted key of the source if the store holds it; None if it does not, or if the
    store cannot hold such a key (a name too long for the file system)."""
    key = quoted_registry_key(site, source)
    if key is None:
        return None
    try:
        return key if store.exists(key) else None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return None
        raise


def write_state(store: ObjectStore, state: SourceState) -> None:
    """Store the entry under its hashed key (see the module docstring for when)."""
    store.write_text(landing_registry_key(state.site, state.source), state.to_json())
