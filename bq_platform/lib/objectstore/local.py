"""Object store on the local file system: the embedded default (``.bq_platform/lake``)."""

import os
import shutil
import tempfile
from pathlib import Path

from bq_platform.lib.objectstore.base import ObjectNotFoundError, ObjectStore


class LocalObjectStore(ObjectStore):
    """A directory on disk that behaves like a bucket.

    Writes go to a temporary file in the same folder and are renamed into place, so a reader
    never sees half an object (``os.replace`` is atomic on POSIX).

    Args:
        root: the bucket's directory; created if missing.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"object key must be relative without '..': {key!r}")
        return self.root / key

    def read_bytes(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"object not found: {self.uri(key)}") from exc

    def write_bytes(self, key: str, data: bytes) -> None:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError as exc:
            raise ObjectNotFoundError(f"object not found: {self.uri(key)}") from exc

    def list_keys(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        keys = []
        for dirpath, _dirnames, filenames in os.walk(base):
            for name in filenames:
                if name.startswith(".tmp-"):
                    continue
                keys.append((Path(dirpath) / name).relative_to(self.root).as_posix())
        return sorted(keys)

    def list_folders(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir())

    def delete_prefix(self, prefix: str) -> int:
        base = self._path(prefix)
        if not base.exists():
            return 0
        count = sum(len(files) for _, _, files in os.walk(base))
        shutil.rmtree(base)
        return count

    def uri(self, key: str) -> str:
        return str(self._path(key))

    def key_for_uri(self, uri: str) -> str:
        path = Path(uri.removeprefix("file://")).resolve()
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError as exc:
            raise ValueError(f"{uri} is not inside the local store {self.root}") from exc
