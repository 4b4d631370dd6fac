"""Object stores: a local directory (default) and Google Cloud Storage, behind one interface."""

from bq_platform.lib.objectstore.base import ObjectNotFoundError, ObjectStore

__all__ = ["ObjectNotFoundError", "ObjectStore"]
