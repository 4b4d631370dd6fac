"""Landing a tree of site folders in worker processes: the same landing zone as one site after
the other, results in folder order, and a file that fails is reported by its site while every
other file lands."""

import functools
import gzip
import os
from pathlib import Path

import pytest

from bq_platform.lib.core.manifest import LandingError
from bq_platform.lib.landing.producer.tree import land_sites, site_folders
from bq_platform.lib.storage.local import LocalObjectStore


def _tree(root: Path, access_logs: Path, lines: int = 3_000) -> Path:
    """``root/<site>/<file>``: the first ``lines`` of each real log, plus a third site whose
    two files are the NASA slice cut in two (two sources of one site)."""
    heads = {}
    for site in ("epa.gov", "ksc.nasa.gov"):
        (source,) = (access_logs / site).glob("*.gz")
        with gzip.open(source, "rb") as handle:
            heads[site] = [next(handle) for _ in range(lines)]
        (root / site).mkdir(parents=True)
        (root / site / source.name.removesuffix(".gz")).write_bytes(b"".join(heads[site]))
    third = root / "mirror.ksc.nasa.gov"
    third.mkdir()
    half = lines // 2
    (third / "a.log").write_bytes(b"".join(heads["ksc.nasa.gov"][:half]))
    (third / "b.log").write_bytes(b"".join(heads["ksc.nasa.gov"][half:]))
    (third / ".hidden").write_bytes(b"not a log\n")  # skipped, like any hidden file
    return root


def _store_noting_pid(lake: str) -> LocalObjectStore:
    """A store of ``lake`` that notes which process built it (module level: picklable)."""
    pids = Path(lake) / "_pids"
    pids.mkdir(parents=True, exist_ok=True)
    (pids / str(os.getpid())).touch()
    return LocalObjectStore(lake)


def _land(tree: Path, lake: Path, workers: int, store=LocalObjectStore) -> list:
    """Every site of ``tree`` landed into ``lake`` (``store(lake)`` per site), as a list."""
    make_store = functools.partial(store, str(lake))
    return list(land_sites(make_store, site_folders(tree), first_hour=None, workers=workers))


def _objects(lake: Path) -> dict[str, bytes]:
    """Every landed object and manifest (and registry entry) by key, without the pid notes."""
    return {
        str(p.relative_to(lake)): p.read_bytes()
        for p in sorted(lake.rglob("*"))
        if p.is_file() and "_pids" not in p.parts
    }


def test_sites_land_in_worker_processes_exactly_as_one_after_the_other(tmp_path, access_logs):
    tree = _tree(tmp_path / "tree", access_logs)
    one, two = tmp_path / "one", tmp_path / "two"

    serial = _land(tree, one, workers=1, store=_store_noting_pid)
    parallel = _land(tree, two, workers=2, store=_store_noting_pid)

    assert [s.site for s in parallel] == ["epa.gov", "ksc.nasa.gov", "mirror.ksc.nasa.gov"]
    assert [s.files for s in parallel] == [1, 1, 2]
    assert parallel == serial  # the same objects, manifests and flags, in folder order
    assert _objects(one) == _objects(two)
    assert sum(f.manifest.lines for s in parallel for f in s.landed) == 3 * 3_000
    assert {p.name for p in (one / "_pids").iterdir()} == {str(os.getpid())}
    workers = {p.name for p in (two / "_pids").iterdir()}
    assert str(os.getpid()) not in workers and 1 <= len(workers) <= 2

    again = _land(tree, two, workers=2)
    assert [s.landed for s in again] == [[], [], []]  # nothing new: idempotent


def test_a_failing_file_is_reported_by_its_site_and_everything_else_lands(tmp_path, access_logs):
    tree = _tree(tmp_path / "tree", access_logs, lines=500)
    bad = tree / "f.bad.site" / "garbage.log"
    bad.parent.mkdir()
    bad.write_bytes(b"no timestamp on this line\n")
    good = bad.parent / "good.log"
    good.write_bytes((tree / "mirror.ksc.nasa.gov" / "a.log").read_bytes())
    lake = tmp_path / "lake"

    first = _land(tree, lake, workers=2)

    assert [s.site for s in first] == [
        "epa.gov",
        "f.bad.site",
        "ksc.nasa.gov",
        "mirror.ksc.nasa.gov",
    ]
    assert [s.files for s in first] == [1, 2, 1, 2]
    assert [[f.path for f in s.failed] for s in first] == [[], [str(bad)], [], []]
    (failure,) = first[1].failed
    assert failure.reason.startswith(f"{bad}: none of its 1 lines has a readable timestamp")
    assert "--default-hour" in failure.reason
    assert sum(f.manifest.lines for f in first[1].landed) == 250  # good.log landed
    assert sum(f.manifest.lines for s in first for f in s.landed) == 500 + 250 + 500 + 500

    bad.unlink()
    rerun = _land(tree, lake, workers=2)
    reference = tmp_path / "reference"
    _land(tree, reference, workers=1)
    assert [s.landed for s in rerun] == [[], [], [], []]  # all landed before: nothing new
    assert not any(s.failed for s in rerun)
    assert _objects(lake) == _objects(reference)


def test_a_folder_that_is_no_site_name_is_reported_and_the_others_land(tmp_path, access_logs):
    tree = _tree(tmp_path / "tree", access_logs, lines=100)
    (tree / "Not A Site").mkdir()
    (tree / "Not A Site" / "x.log").write_bytes(
        (tree / "mirror.ksc.nasa.gov" / "a.log").read_bytes()
    )

    sites = _land(tree, tmp_path / "lake", workers=1)

    assert [(s.site, bool(s.failed)) for s in sites] == [
        ("Not A Site", True),
        ("epa.gov", False),
        ("ksc.nasa.gov", False),
        ("mirror.ksc.nasa.gov", False),
    ]
    assert "invalid site name 'Not A Site'" in sites[0].failed[0].reason
    assert sum(f.manifest.lines for s in sites for f in s.landed) == 300


def test_a_tree_without_site_folders_is_refused(tmp_path):
    (tmp_path / "loose.log").write_bytes(b"x\n")
    with pytest.raises(LandingError, match="no site folders"):
        site_folders(tmp_path)
    with pytest.raises(ValueError, match="at least 1"):
        list(land_sites(LocalObjectStore, [tmp_path], first_hour=None, workers=0))
