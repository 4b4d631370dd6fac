"""A local object store that counts the calls that are requests on GCS.

Locally a listing, read or size lookup costs microseconds; on GCS each is an HTTP request of
~20-100 ms (issue 9, docs/PERFORMANCE.md). Tests assert on :attr:`CountingStore.calls` to pin
how many a piece of code sends.
"""

import collections
from collections.abc import Callable
from typing import Any

from bq_platform.lib.storage.local import LocalObjectStore


def _counted(method: str, label: str) -> Callable[..., Any]:
    """``LocalObjectStore.<method>``, counting each call under ``label``."""
    parent = getattr(LocalObjectStore, method)

    def counted(self: "CountingStore", *args: Any, **kwargs: Any) -> Any:
        self.calls[label] += 1
        return parent(self, *args, **kwargs)

    counted.__name__ = method
    return counted


class CountingStore(LocalObjectStore):
    """:class:`LocalObjectStore` counting, per method, the calls GCS would answer as requests.

    ``calls`` keys: ``list`` (every listing: ``list_keys`` and ``list_sizes`` go through
    ``list_objects``), ``list_folders`` (on GCS a listing with a delimiter), ``read_bytes``,
    ``size`` (every metadata request: ``size`` goes through ``stat``), ``exists``,
    ``delete_prefix`` (on GCS a listing, then deletions). ``read_many`` counts one
    ``read_bytes`` per key.
    """

    list_objects = _counted("list_objects", "list")
    list_folders = _counted("list_folders", "list_folders")
    read_bytes = _counted("read_bytes", "read_bytes")
    stat = _counted("stat", "size")
    exists = _counted("exists", "exists")
    delete_prefix = _counted("delete_prefix", "delete_prefix")

    def __init__(self, root) -> None:
        super().__init__(root)
        self.calls: collections.Counter[str] = collections.Counter()

    def counted(self) -> dict[str, int]:
        """The counts so far (methods not called are absent), then reset them."""
        counts = dict(self.calls)
        self.calls.clear()
        return counts
