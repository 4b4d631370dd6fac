"""The object-store interface: a local directory (:mod:`.local`) or a GCS bucket (:mod:`.gcs`).

Keys are relative ``/``-separated paths (see :mod:`bq_platform.lib.core.layout`).
"""

import abc
import base64
import concurrent.futures
import dataclasses
from collections.abc import Callable, Sequence
from typing import TypeVar

import google_crc32c

T = TypeVar("T")
R = TypeVar("R")

#: Threads of :meth:`ObjectStore.read_many` (the storage client's connection pool holds 10).
READ_THREADS = 8


def side_by_side(call: Callable[[T], R], items: Sequence[T], threads: int) -> list[R]:
    """``[call(item) for item in items]``, in order, on up to ``threads`` threads (inline for
    ``threads`` < 2 or fewer than 2 items). An exception of ``call`` propagates.
    """
    if threads < 2 or len(items) < 2:
        return [call(item) for item in items]
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(call, items))


def crc32c(data: bytes) -> str:
    """The CRC32C of ``data`` as GCS reports an object's: base64 of the 4-byte big-endian
    checksum (RFC 4960 appendix B), e.g. ``"ROPt5Q=="`` (cloud.google.com/storage/docs/
    json_api/v1/objects, field ``crc32c``)."""
    return base64.b64encode(google_crc32c.Checksum(data).digest()).decode("ascii")


@dataclasses.dataclass(frozen=True)
class ListedObject:
    """One object as a listing returns it: ``size`` in bytes, and ``crc32c`` in
    :func:`crc32c`'s encoding when the store keeps one (GCS does, for every object)."""

    size: int
    crc32c: str | None = None


class ObjectNotFoundError(FileNotFoundError):
    """The key does not exist in the store. The message names the full URI."""


class ObjectStore(abc.ABC):
    """Minimal blob store: whole-object reads and writes, recursive listing, URIs for Spark."""

    @abc.abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """Return the whole object; ``ObjectNotFoundError`` if ``key`` does not exist."""

    @abc.abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None:
        """Create or replace the object atomically (readers see the old or the new bytes)."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """True if an object with exactly this key exists."""

    @abc.abstractmethod
    def stat(self, key: str) -> ListedObject:
        """The object's size and, where the store keeps one, its CRC32C (no download);
        ``ObjectNotFoundError`` if ``key`` does not exist."""

    def size(self, key: str) -> int:
        """Size of the object in bytes; ``ObjectNotFoundError`` if ``key`` does not exist."""
        return self.stat(key).size

    @abc.abstractmethod
    def list_objects(
        self, prefix: str, *, start: str | None = None, end: str | None = None
    ) -> dict[str, ListedObject]:
        """Every key under ``prefix`` (recursive) with its size and checksum, in key order.

        ``prefix`` is a folder, no trailing ``/``. ``start``/``end``: only keys
        ``start <= key < end`` (by code point, as GCS orders object names: objects.list
        ``startOffset``/``endOffset``, cloud.google.com/storage/docs/json_api/v1/objects/list).
        """

    def list_sizes(
        self, prefix: str, *, start: str | None = None, end: str | None = None
    ) -> dict[str, int]:
        """The sizes in bytes of :meth:`list_objects`, in key order."""
        listed = self.list_objects(prefix, start=start, end=end)
        return {key: obj.size for key, obj in listed.items()}

    def list_keys(
        self, prefix: str, *, start: str | None = None, end: str | None = None
    ) -> list[str]:
        """The keys of :meth:`list_objects`, sorted."""
        return list(self.list_objects(prefix, start=start, end=end))

    @abc.abstractmethod
    def list_folders(self, prefix: str) -> list[str]:
        """Immediate sub-folder names under ``prefix`` (e.g. ``site=epa.gov``), sorted."""

    @abc.abstractmethod
    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; return how many were deleted."""

    @abc.abstractmethod
    def uri(self, key: str) -> str:
        """URI of ``key`` that Spark and the warehouse can read (a path or ``gs://...``)."""

    @abc.abstractmethod
    def key_for_uri(self, uri: str) -> str:
        """Inverse of :meth:`uri`; ``ValueError`` if ``uri`` is not inside this store."""

    @staticmethod
    def in_range(key: str, start: str | None, end: str | None) -> bool:
        """``start <= key < end``, either bound optional (the filter of :meth:`list_objects`)."""
        return (start is None or key >= start) and (end is None or key < end)

    #: Threads of :meth:`read_many` for this store.
    read_threads: int = READ_THREADS

    def read_many(self, keys: Sequence[str]) -> dict[str, bytes | ObjectNotFoundError]:
        """The objects ``keys``, read by :attr:`read_threads` threads. A key that does not
        exist maps to its ``ObjectNotFoundError``, for the caller to report in its own order.
        """

        def read(key: str) -> bytes | ObjectNotFoundError:
            try:
                return self.read_bytes(key)
            except ObjectNotFoundError as exc:
                return exc

        return dict(zip(keys, side_by_side(read, keys, self.read_threads), strict=True))

    def read_text(self, key: str) -> str:
        """Read an object as UTF-8 text."""
        return self.read_bytes(key).decode("utf-8")

    def write_text(self, key: str, text: str) -> None:
        """Write ``text`` as UTF-8."""
        self.write_bytes(key, text.encode("utf-8"))
