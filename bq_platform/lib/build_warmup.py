"""Warm a fresh driver JVM for the build: plan a build pass on a tiny input, run nothing.

A local ``bq-platform run`` starts a new driver JVM, and the first time that JVM plans the
build's pass it runs Spark's analyzer, optimizer and planner interpreted, loading their classes
as it goes: on the bench's 1x input (3,600 landed files, issue 9) ``read_lines`` and
``transform_lines`` alone took 2.4-3.0 s on one core on the machine of the earlier benches, and
5.5-7.4 s on the slower machine of 2026-11-25 (docs/PERFORMANCE.md, "A planning warm-up while
the run starts"). The same planning of a one-file pass, done once the JVM is up and while the
run's Python work (the end of Dagster's run creation, the build's landed-manifest reads) holds
the other core, leaves those paths loaded and profiled: on that slower machine the build's own
planning then took 4.2-5.2 s, the builds 36.4 s on average against 40.4 s (five each), and
whole 1x runs 52.3 s against 55.5 s (three pairs, alternating).

:func:`plan_build_pass` plans, on a session of its own (``SparkSession.newSession``: its own
SQL settings, so the build's :func:`~bq_platform.lib.build_read.sql_conf` and this one never
see each other's), the frames of :func:`bq_platform.lib.build.build_hours`' first action
(:func:`~bq_platform.lib.build_read.read_lines`, :func:`~bq_platform.lib.transform.transform_lines`,
:func:`~bq_platform.lib.build_frames.slim`, :func:`~bq_platform.lib.build_frames.file_counts`)
over one gzip file of two made-up lines in a temporary folder, with a throw-away key, up to
the physical plan. It runs no Spark job and writes nothing outside that folder. Running the
plan as well (a job on the tiny input, to compile its generated code) measured worse: it held
both cores for longer than the build waits (docs/PERFORMANCE.md).
"""

import datetime as dt
import gzip
import hashlib
import logging
import tempfile
import threading
import time
import weakref
from typing import Any

from pyspark.sql import SparkSession

from bq_platform.lib import layout
from bq_platform.lib.build_frames import file_counts, slim
from bq_platform.lib.build_read import BUILD_SQL_CONF, read_lines, sql_conf
from bq_platform.lib.manifest import LandedManifest
from bq_platform.lib.objectstore.local import LocalObjectStore
from bq_platform.lib.partition_window import HourWindow
from bq_platform.lib.transform import transform_lines

#: The tiny pass's hour and site (made up; nothing outside the temporary folder names them).
WARMUP_HOUR = dt.datetime(1995, 8, 1, 0, tzinfo=dt.UTC)
WARMUP_SITE = "warmup.invalid"
#: Two Common Log Format lines of :data:`WARMUP_HOUR`: a page and an asset.
WARMUP_LINES = (
    b'192.0.2.1 - - [01/Aug/1995:00:00:01 +0000] "GET /index.html HTTP/1.0" 200 1839\n'
    b'192.0.2.1 - - [01/Aug/1995:00:00:02 +0000] "GET /logo.gif HTTP/1.0" 200 786\n'
)
#: The pseudonymization key of the tiny pass: never the real one (the plan holds its blocks).
WARMUP_KEY = "bq-platform-warmup"


def plan_build_pass(spark: SparkSession) -> float:
    """Plan (not run) a build pass over a one-file landing zone; returns its wall seconds.

    See the module docstring. Safe to call on a thread while another thread builds: it uses a
    session of its own and a temporary folder, which it removes.

    Raises:
        Exception: whatever Spark or the file system raise; the caller decides whether a failed
            warm-up matters (``SparkResource.start_in_background`` logs it at DEBUG only).
    """
    started = time.monotonic()
    session = spark.newSession()
    with tempfile.TemporaryDirectory(prefix="bq-platform-warmup-") as folder:
        store = LocalObjectStore(folder)
        data = gzip.compress(WARMUP_LINES)
        sha256 = hashlib.sha256(data).hexdigest()
        key = layout.landed_data_key(WARMUP_SITE, WARMUP_HOUR, sha256)
        store.write_bytes(key, data)
        manifest = LandedManifest(
            site=WARMUP_SITE,
            hour=WARMUP_HOUR,
            data_key=key,
            lines=WARMUP_LINES.count(b"\n"),
            bytes=len(data),
            sha256=sha256,
        )
        with sql_conf(session, BUILD_SQL_CONF):
            lines = read_lines(session, store, [manifest])
            classified = transform_lines(
                lines,
                visitor_key=WARMUP_KEY,
                window=HourWindow(WARMUP_HOUR, WARMUP_HOUR),
                keep=("file_no", "unit_no"),
            )
            file_counts(slim(classified))._jdf.queryExecution().executedPlan()
    return time.monotonic() - started


_warmed_sessions: "weakref.WeakSet[Any]" = weakref.WeakSet()
_warmed_lock = threading.Lock()


def warm_up_once(session: Any) -> None:
    """:func:`plan_build_pass` on ``session``'s JVM, once per session.

    ``bq-platform run`` calls it on its pre-start thread
    (``SparkResource.start_in_background``), and a run's ``SparkResource.setup_for_execution``
    on a thread of its own, which then does nothing for a session already warmed; local
    masters only. A failure is logged at DEBUG only: it loses a head start, nothing else.
    """
    log = logging.getLogger(__name__)
    try:
        with _warmed_lock:
            if session in _warmed_sessions:
                return
            _warmed_sessions.add(session)
        log.debug("build planning warm-up: %.2f s", plan_build_pass(session))
    except Exception:
        log.debug("build planning warm-up failed", exc_info=True)
