"""Landing a folder of sites (``<root>/<site>/<files>``), several sites at a time.

Sites share nothing in the landing zone, so ``bq-platform land-tree`` lands them in parallel
worker processes (landing is CPU-bound Python), one site per task, each site's files in name
order. Each task builds its own store (a GCS client must not cross a fork). Landing is
idempotent, so after a killed worker, landing the tree again completes it.
"""

import concurrent.futures
import dataclasses
import datetime as dt
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bq_platform.lib.core.manifest import LandingError
from bq_platform.lib.landing.producer.land import LandedFile, land_files
from bq_platform.lib.storage.base import ObjectStore


@dataclasses.dataclass(frozen=True)
class SiteLanding:
    """What landing one site folder did.

    Attributes:
        files: input files found in the folder (hidden files are skipped).
        landed: :func:`~bq_platform.lib.landing.producer.land.land_file`'s results, in order.
    """

    site: str
    files: int
    landed: list[LandedFile]


def site_folders(root: str | os.PathLike[str]) -> list[Path]:
    """The site folders under ``root``, by name.

    Raises:
        LandingError: if ``root`` has no sub-folder (the tree must be ``root/<site>/<files>``).
    """
    sites = sorted(p for p in Path(root).iterdir() if p.is_dir())
    if not sites:
        raise LandingError(f"{root} has no site folders (expected {root}/<site>/<files>)")
    return sites


def default_workers() -> int:
    """The CPUs this process may use (its affinity mask, so a container's limit counts)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def land_site(
    make_store: Callable[[], ObjectStore],
    folder: Path,
    first_hour: dt.datetime | None,
    log: logging.Logger | None = None,
) -> SiteLanding:
    """Land every file of one site folder, in name order, into ``make_store()``; raises as
    :func:`~bq_platform.lib.landing.producer.land.land_file`."""
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    landed = land_files(make_store(), folder.name, files, first_hour=first_hour, log=log)
    return SiteLanding(folder.name, len(files), landed)


def land_sites(
    make_store: Callable[[], ObjectStore],
    folders: Sequence[Path],
    *,
    first_hour: dt.datetime | None,
    workers: int,
    log: logging.Logger | None = None,
) -> Iterator[SiteLanding]:
    """Land ``folders`` (one site each), ``workers`` at a time; yield each in folder order.

    Args:
        make_store: builds the store, once per site, in the process that lands it; must be
            picklable (a module-level function) when ``workers`` > 1.
        first_hour: the first hourly partition.
        workers: sites landed at once; 1 lands them in this process.

    Raises:
        LandingError / ValueError: the first failing site's error, in folder order (running
            sites finish), or ``workers`` below 1.
        RuntimeError: if a worker process died; what it landed stays.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    workers = min(workers, len(folders))
    if workers <= 1:
        for folder in folders:
            yield land_site(make_store, folder, first_hour, log)
        return
    # fork: workers inherit the imported modules and logging set-up; spawn where there is none.
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=context) as pool:
        futures = [pool.submit(land_site, make_store, f, first_hour, log) for f in folders]
        try:
            for future in futures:
                yield future.result()
        except concurrent.futures.process.BrokenProcessPool as exc:
            raise RuntimeError(
                f"a landing worker process died ({exc}); what it landed is kept: land the tree "
                "again to complete it"
            ) from exc
        finally:
            for future in futures:
                future.cancel()  # sites not started yet; running ones finish
