"""Landing a folder of sites (``<root>/<site>/<files>``), several sites at a time.

``bq-platform land-tree`` lands each site's files with :func:`bq_platform.lib.landing.producer.land.land_files`
(the site is the folder's name, each file a source). Sites share nothing in the landing zone
(``landing/pageviews/site=<site>/...`` and the registry under the site), so they land in
parallel worker processes, one site per task; a site's files still land one after the other,
in name order, exactly as ``bq-platform land`` would land them.

Why processes: landing is Python work (splitting by hour, gzip, SHA-256, small-file writes),
and threads share one interpreter lock. On the 2-core machine, the bench's 1x tree (50 sites,
150 files, 2,043,576 lines) landed in 2.5 s in one process, 1.85 s with two threads and 1.3 s
with two processes (docs/PERFORMANCE.md, issue 9).

Workers are forked from the CLI process before it creates any object-store client, and each
task builds its own store with ``make_store`` (a GCS client must not cross a fork). Landing is
idempotent and every object is written before its manifest, so a worker that is killed, or
that finishes its site after the parent was killed, leaves nothing a build would read wrongly:
landing the tree again completes it.
"""

import concurrent.futures
import dataclasses
import datetime as dt
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bq_platform.lib.landing.producer.land import LandedFile, LandingError, land_files
from bq_platform.lib.storage.base import ObjectStore


@dataclasses.dataclass(frozen=True)
class SiteLanding:
    """What landing one site folder did.

    Attributes:
        site: the folder's name (the site).
        files: input files found in the folder (hidden files are skipped).
        landed: the objects of their new lines, then any repaired object
            (:func:`~bq_platform.lib.landing.producer.land.land_file`'s result, file after file).
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
    """Land every file of one site folder, in name order, into ``make_store()``.

    Raises:
        LandingError / ValueError: as :func:`~bq_platform.lib.landing.producer.land.land_file`.
    """
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
        make_store: builds the landing zone's store, once per site, in the process that lands
            it; must be picklable (a module-level function) when ``workers`` > 1.
        folders: the site folders (:func:`site_folders`).
        first_hour: the first hourly partition (see :func:`~bq_platform.lib.landing.producer.land.land_file`).
        workers: sites landed at once; 1 lands them in this process, one after the other.
        log: progress logger (workers log through the logging set-up they were forked with).

    Raises:
        LandingError / ValueError: the first failing site's error, in folder order: sites after
            it that had not started are not landed; those already running finish (landing is
            idempotent, so landing the tree again after a fix completes it).
        ValueError: if ``workers`` is below 1.
        RuntimeError: if a worker process died (killed, out of memory); what it landed stays.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    workers = min(workers, len(folders))
    if workers <= 1:
        for folder in folders:
            yield land_site(make_store, folder, first_hour, log)
        return
    # fork: the workers inherit the imported modules and logging set-up (spawn would import
    # everything again, ~1 s per worker); see the module docstring about clients. Where there
    # is no fork (Windows), spawn: everything a task needs is importable.
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
