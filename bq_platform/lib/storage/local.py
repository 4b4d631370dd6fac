"""Object store on the local file system: the embedded default (``.bq_platform/lake``)."""

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

from bq_platform.lib.storage.base import ListedObject, ObjectNotFoundError, ObjectStore

#: Times :meth:`LocalObjectStore.write_bytes` creates an object's folder: a concurrent
#: :meth:`~LocalObjectStore.delete_prefix` may remove it while it is still empty.
_FOLDER_TRIES = 3


class LocalObjectStore(ObjectStore):
    """A directory on disk (``root``, created if missing) that behaves like a bucket: writes
    go to a temporary file renamed into place (``os.replace`` is atomic on POSIX)."""

    #: A local read is fast Python work: threads only add lock hand-offs.
    read_threads = 1

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self._root = str(self.root)
        self._root_slash = os.path.join(self._root, "")  # "/srv/lake/" ("/" for the root)

    def _file(self, key: str) -> str:
        """The object's file name (plain strings: ``pathlib`` is slow for many keys)."""
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"object key must be relative without '..': {key!r}")
        return os.path.normpath(os.path.join(self._root, key))

    def _path(self, key: str) -> Path:
        return Path(self._file(key))

    def read_bytes(self, key: str) -> bytes:
        try:
            with open(self._file(key), "rb") as handle:
                return handle.read()
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"object not found: {self.uri(key)}") from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        for tries_left in reversed(range(_FOLDER_TRIES)):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd, tmp = self._temporary_file(path)
                break
            except FileNotFoundError:  # a delete_prefix removed the empty folder in between
                if not tries_left:
                    raise
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _temporary_file(self, path: Path) -> tuple[int, str]:
        """A new temporary file next to ``path``: its descriptor and name (``tempfile.mkstemp``;
        FileNotFoundError if the folder is gone)."""
        return tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def stat(self, key: str) -> ListedObject:
        try:
            return ListedObject(self._path(key).stat().st_size)
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"object not found: {self.uri(key)}") from exc

    def list_objects(
        self, prefix: str, *, start: str | None = None, end: str | None = None
    ) -> dict[str, ListedObject]:
        """See :meth:`ObjectStore.list_objects`; ``crc32c`` is None (no stored checksum)."""
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return {}
        listed: dict[str, ListedObject] = {}
        for dirpath, dirnames, filenames in os.walk(base):
            head = dirpath[len(self._root_slash) :]  # os.walk's folders are under the root
            head = f"{head}/" if head else ""
            # Walk only the folders whose keys can fall in [start, end).
            dirnames[:] = [d for d in dirnames if _may_hold(f"{head}{d}/", start, end)]
            for name in filenames:
                key = head + name
                if not name.startswith(".tmp-") and self.in_range(key, start, end):
                    with contextlib.suppress(FileNotFoundError):  # deleted since the walk
                        listed[key] = ListedObject(os.stat(os.path.join(dirpath, name)).st_size)
        return {k: listed[k] for k in sorted(listed)}

    def list_folders(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir())

    def delete_prefix(self, prefix: str) -> int:
        """See :meth:`ObjectStore.delete_prefix`; folders left empty go too, as on GCS.
        ``ValueError`` for an empty ``prefix`` (the whole store)."""
        if not prefix.strip("/"):
            raise ValueError("delete_prefix needs a folder; refusing to delete the whole store")
        base = self._path(prefix)
        if not base.exists():
            return 0
        count = sum(len(files) for _, _, files in os.walk(base))
        shutil.rmtree(base)
        for folder in base.parents:  # ``_path`` keeps ``base`` under the root
            if folder == self.root:
                break
            try:
                folder.rmdir()  # only if empty; a folder another writer just filled stays
            except OSError:
                break
        return count

    def uri(self, key: str) -> str:
        return self._file(key)

    def key_for_uri(self, uri: str) -> str:
        path = Path(uri.removeprefix("file://")).resolve()
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError as exc:
            raise ValueError(f"{uri} is not inside the local store {self.root}") from exc


def _may_hold(folder: str, start: str | None, end: str | None) -> bool:
    """Whether keys beginning with ``folder`` (ending in ``/``) can be in ``[start, end)``."""
    return (end is None or folder < end) and (start is None or start[: len(folder)] <= folder)
