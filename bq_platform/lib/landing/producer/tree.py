"""Landing a folder of sites (``<root>/<site>/<files>``), several sites at a time.

Sites share nothing in the landing zone, so ``bq-platform land-tree`` lands them in parallel
worker processes (landing is CPU-bound Python), one site per task, each site's files in name
order. Each task builds its own store (a GCS client must not cross a fork). Landing is
idempotent, so after a killed worker, landing the tree again completes it.

A file that fails to land (unreadable, no timestamp, a write the store refused) does not stop
its site or the tree: every other file and site lands, and the site's :class:`SiteLanding`
names the file and why.
"""

import concurrent.futures
import dataclasses
import datetime as dt
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bq_platform.lib.core.layout import validate_site
from bq_platform.lib.core.manifest import LandingError
from bq_platform.lib.landing.producer.land import FailedFile, LandedFile, land_all
from bq_platform.lib.storage.base import ObjectStore


@dataclasses.dataclass(frozen=True)
class SiteLanding:
    """What landing one site folder did.

    Attributes:
        files: input files found in the folder (hidden files are skipped).
        landed: :func:`~bq_platform.lib.landing.producer.land.land_file`'s results, in order.
        failed: the files that did not land, each with why (the folder itself when it cannot
            be listed or is no valid site name).
    """

    site: str
    files: int
    landed: list[LandedFile]
    failed: list[FailedFile] = dataclasses.field(default_factory=list)


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
    """Land every file of one site folder, in name order, into ``make_store()``; a file that
    fails is in ``failed`` and the others land. Errors of ``make_store`` propagate."""
    try:
        validate_site(folder.name)
        files = sorted(p for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))
    except (OSError, ValueError) as exc:
        reason = f"{folder}: {exc}; fix the folder and land the tree again"
        return SiteLanding(folder.name, 0, [], [FailedFile(str(folder), reason)])
    landed, failed = land_all(make_store(), folder.name, files, first_hour=first_hour, log=log)
    return SiteLanding(folder.name, len(files), landed, failed)


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

    Yields:
        One :class:`SiteLanding` per folder, files that failed included.

    Raises:
        ValueError: ``workers`` below 1.
        RuntimeError: if a worker process died; what it landed stays.
        Errors of ``make_store`` (a wrong setting), from the first site that builds it.
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
