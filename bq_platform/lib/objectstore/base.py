"""The object-store interface the pipeline is written against.

Keys are relative ``/``-separated paths (see :mod:`bq_platform.lib.layout`). Implementations:
:class:`bq_platform.lib.objectstore.local.LocalObjectStore` (a directory on disk) and
:class:`bq_platform.lib.objectstore.gcs.GCSObjectStore` (a GCS bucket).
"""

import abc
import concurrent.futures
from collections.abc import Sequence

#: Threads of :meth:`ObjectStore.read_many` (the storage client's connection pool holds 10).
READ_THREADS = 8


class ObjectNotFoundError(FileNotFoundError):
    """The key does not exist in the store. The message names the full URI."""


class ObjectStore(abc.ABC):
    """Minimal blob store: whole-object reads and writes, recursive listing, URIs for Spark."""

    @abc.abstractmethod
    def read_bytes(self, key: str) -> bytes:
        """Return the whole object.

        Raises:
            ObjectNotFoundError: if ``key`` does not exist.
        """

    @abc.abstractmethod
    def write_bytes(self, key: str, data: bytes) -> None:
        """Create or replace the object atomically (readers see the old or the new bytes)."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool:
        """True if an object with exactly this key exists."""

    @abc.abstractmethod
    def size(self, key: str) -> int:
        """Size of the object in bytes.

        Raises:
            ObjectNotFoundError: if ``key`` does not exist.
        """

    @abc.abstractmethod
    def list_sizes(
        self, prefix: str, *, start: str | None = None, end: str | None = None
    ) -> dict[str, int]:
        """Every key under ``prefix`` (recursive) with its size in bytes, in key order.

        ``prefix`` is a folder, no trailing ``/``. ``start``/``end``: only keys
        ``start <= key < end`` (by code point, as GCS orders object names), e.g. a site's hour
        folders from one hour to another. One listing: on GCS a listing is one request per
        1,000 objects and carries each object's size (objects.list, with ``startOffset`` and
        ``endOffset``: cloud.google.com/storage/docs/json_api/v1/objects/list), where
        :meth:`size` is one request per object.
        """

    def list_keys(
        self, prefix: str, *, start: str | None = None, end: str | None = None
    ) -> list[str]:
        """The keys of :meth:`list_sizes`, sorted."""
        return list(self.list_sizes(prefix, start=start, end=end))

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
        """Inverse of :meth:`uri`.

        Raises:
            ValueError: if ``uri`` is not inside this store.
        """

    @staticmethod
    def in_range(key: str, start: str | None, end: str | None) -> bool:
        """``start <= key < end``, either bound optional (the filter of :meth:`list_keys`)."""
        return (start is None or key >= start) and (end is None or key < end)

    #: Threads of :meth:`read_many` for this store.
    read_threads: int = READ_THREADS

    def read_many(self, keys: Sequence[str]) -> dict[str, bytes | ObjectNotFoundError]:
        """The objects ``keys``, read by :attr:`read_threads` threads: on GCS each read is a
        request of ~20-100 ms, so reading a few thousand small objects (landed manifests) one
        after the other takes minutes. A key that does not exist maps to its
        ``ObjectNotFoundError``, for the caller to report in its own order.
        """
        threads = self.read_threads

        def read(key: str) -> bytes | ObjectNotFoundError:
            try:
                return self.read_bytes(key)
            except ObjectNotFoundError as exc:
                return exc

        if len(keys) < 2 or threads < 2:
            return {k: read(k) for k in keys}
        with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
            return dict(zip(keys, pool.map(read, keys), strict=True))

    def read_text(self, key: str) -> str:
        """Read an object as UTF-8 text."""
        return self.read_bytes(key).decode("utf-8")

    def write_text(self, key: str, text: str) -> None:
        """Write ``text`` as UTF-8."""
        self.write_bytes(key, text.encode("utf-8"))
