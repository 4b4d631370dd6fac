"""LocalObjectStore: a folder on disk that lists like a bucket (folders exist only while they
hold objects, as on GCS)."""

from pathlib import Path

import pytest

from bq_platform.lib.storage.base import ObjectNotFoundError
from bq_platform.lib.storage.local import LocalObjectStore

ATTEMPTS = "staging/pageviews"


def test_delete_prefix_removes_the_folders_it_empties_up_to_the_root(tmp_path) -> None:
    store = LocalObjectStore(tmp_path / "lake")
    store.write_bytes(f"{ATTEMPTS}/attempt=a/full/hour=1995-08-01T04/part-0.parquet", b"p")
    store.write_bytes(f"{ATTEMPTS}/attempt=a/sample/hour=1995-08-01T04/part-0.parquet", b"p")
    store.write_bytes(f"{ATTEMPTS}/attempt=b/full/hour=1995-08-01T04/part-0.parquet", b"p")

    assert store.delete_prefix(f"{ATTEMPTS}/attempt=a/full/hour=1995-08-01T04") == 1
    assert store.list_folders(f"{ATTEMPTS}/attempt=a") == ["sample"]  # emptied: gone
    assert store.delete_prefix(f"{ATTEMPTS}/attempt=a/sample") == 1
    assert store.list_folders(ATTEMPTS) == ["attempt=b"]  # as GCS lists it
    assert store.delete_prefix(f"{ATTEMPTS}/attempt=b") == 1
    assert store.list_folders("") == []
    assert store.root.is_dir()  # the bucket itself stays
    assert store.delete_prefix(f"{ATTEMPTS}/attempt=b") == 0


def test_delete_prefix_refuses_the_whole_store(tmp_path) -> None:
    store = LocalObjectStore(tmp_path)
    store.write_bytes("a/b", b"x")
    with pytest.raises(ValueError, match="whole store"):
        store.delete_prefix("")
    assert store.read_bytes("a/b") == b"x"


class RacedStore(LocalObjectStore):
    """A store whose object folder a concurrent ``delete_prefix`` removes, still empty, just
    before each of the first ``races`` temporary files of a write is created."""

    def __init__(self, root: Path, races: int) -> None:
        super().__init__(root)
        self.races = races
        self.removed: list[Path] = []

    def _temporary_file(self, path: Path) -> tuple[int, str]:
        if len(self.removed) < self.races:
            path.parent.rmdir()
            self.removed.append(path.parent)
        return super()._temporary_file(path)


def test_a_write_survives_its_empty_folder_being_removed_in_between(tmp_path) -> None:
    store = RacedStore(tmp_path, races=2)
    store.write_bytes("staging/x/y.json", b"{}")
    assert len(store.removed) == 2
    assert store.read_bytes("staging/x/y.json") == b"{}"


def test_a_folder_that_keeps_disappearing_fails_the_write(tmp_path) -> None:
    store = RacedStore(tmp_path, races=1_000)
    with pytest.raises(FileNotFoundError):
        store.write_bytes("staging/x/y.json", b"{}")
    assert len(store.removed) == 3  # every try of the write


@pytest.mark.parametrize("key", ["a/b.json", "a//b.json", "a/./b.json", "./a/b.json", "a/b/"])
def test_names_are_what_pathlib_gives_without_pathlib(tmp_path, key) -> None:
    # The store names its files with plain strings (pathlib is slow for many keys); each
    # spelling must name the file pathlib named before.
    store = LocalObjectStore(tmp_path / "lake")
    assert store.uri(key) == str(store.root / key)
    for bad in ("/etc/passwd", "a/../../b", ".."):
        with pytest.raises(ValueError, match="relative without"):
            store.uri(bad)


def test_listing_keys_from_the_root_and_from_a_prefix(tmp_path) -> None:
    store = LocalObjectStore(tmp_path / "lake")
    for key in ("top.json", "a/b/c.gz", "a/b/c.manifest.json", "a/d.json"):
        store.write_bytes(key, key.encode())
    assert list(store.list_objects("")) == [
        "a/b/c.gz",
        "a/b/c.manifest.json",
        "a/d.json",
        "top.json",
    ]
    assert store.list_objects("a/b") == {
        "a/b/c.gz": store.stat("a/b/c.gz"),
        "a/b/c.manifest.json": store.stat("a/b/c.manifest.json"),
    }
    assert [store.read_bytes(k) for k in store.list_objects("a")] == [
        b"a/b/c.gz",
        b"a/b/c.manifest.json",
        b"a/d.json",
    ]
    with pytest.raises(ObjectNotFoundError, match=str(tmp_path / "lake" / "a" / "nothing")):
        store.read_bytes("a/nothing")
