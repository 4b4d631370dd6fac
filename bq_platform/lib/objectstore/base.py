"""The object-store interface the pipeline is written against.

Keys are relative ``/``-separated paths (see :mod:`bq_platform.lib.layout`). Implementations:
:class:`bq_platform.lib.objectstore.local.LocalObjectStore` (a directory on disk) and
:class:`bq_platform.lib.objectstore.gcs.GCSObjectStore` (a GCS bucket).
"""

import abc


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
    def list_keys(self, prefix: str) -> list[str]:
        """All keys under ``prefix`` (recursive), sorted. ``prefix`` is a folder, no trailing /."""

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

    def read_text(self, key: str) -> str:
        """Read an object as UTF-8 text."""
        return self.read_bytes(key).decode("utf-8")

    def write_text(self, key: str, text: str) -> None:
        """Write ``text`` as UTF-8."""
        self.write_bytes(key, text.encode("utf-8"))
