"""Object stores: a local directory (default) and Google Cloud Storage, behind one interface."""

from bq_platform.lib.storage.base import ListedObject, ObjectNotFoundError, ObjectStore, crc32c

__all__ = ["ListedObject", "ObjectNotFoundError", "ObjectStore", "crc32c"]
