"""The hourly build on a real Spark standalone cluster gives what local mode gives.

A master and two workers (1 core, 1 GiB each) are started from the pyspark distribution on
loopback (``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` / ``...Worker``:
the pip wheel has no ``sbin/start-master.sh``), and always stopped at the end. A slice of the
real logs (four hours of each site) is landed once; then the production entry point,
``spark-submit bq_platform/spark_apps/build_hours.py``
(:mod:`bq_platform.lib.hourly_build.application`), builds
them twice, once with ``--master local[2]``, once with ``--master spark://127.0.0.1:<port>``
and two executors, each under its own attempt. The manifests' counts and fingerprints and the
Parquet contents (full, sample, dead letters; rows sorted) must be identical, and each worker
must have run an executor of the cluster build.
"""

import collections
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bq_platform.defs.pageviews.spark_build import installed_spark_submit
from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import parse_hour_label
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.hourly_build import application as build_job
from bq_platform.lib.landing.producer.land import land_files
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.lib.build_inputs import parquet_rows

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

APP = Path(build_job.__file__).parents[2] / "spark_apps" / "build_hours.py"
KEY = "cluster-test-key"
#: Executor settings that fit two small workers (1 core, 1 GiB each) on a shared machine.
CLUSTER_CONF = {
    "spark.executor.memory": "512m",
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
}
HOURS_PER_SITE = 4
_START_TIMEOUT_S = 180
_BUILD_TIMEOUT_S = 900


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spark_class() -> Path:
    import pyspark

    path = Path(pyspark.__file__).parent / "bin" / "spark-class"
    if not path.exists():
        pytest.skip(f"{path} not in this pyspark distribution")
    return path


def _wait_for(log: Path, text: str, count: int, procs: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        content = log.read_text(errors="replace") if log.exists() else ""
        if content.count(text) >= count:
            return
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"a cluster process exited early; see {log}:\n{content[-3000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"{text!r} x{count} not seen in {log} after {_START_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """``spark://127.0.0.1:<port>`` of a running master with two registered workers, and the
    folder of their logs and work directories (``work-1``, ``work-2``)."""
    spark_class = _spark_class()
    tmp = tmp_path_factory.mktemp("cluster")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp)}
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    procs: list[subprocess.Popen] = []
    logs: list = []

    def start(name: str, args: list[str]) -> Path:
        log = tmp / f"{name}.log"
        handle = open(log, "w")  # noqa: SIM115 - closed in the finally below
        logs.append(handle)
        procs.append(
            subprocess.Popen(
                [str(spark_class), *args],
                env=env,
                stdout=handle,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        return log

    try:
        master_args = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
        master_args += ["--port", str(port), "--webui-port", str(_free_port())]
        master_log = start("master", master_args)
        _wait_for(master_log, "I have been elected leader", 1, procs)
        for i in (1, 2):
            start(
                f"worker-{i}",
                [
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(_free_port()),
                    "--work-dir",
                    str(tmp / f"work-{i}"),
                ],
            )
        _wait_for(master_log, "Registering worker", 2, procs)
        yield url, tmp
    finally:
        for proc in procs:  # always: the whole process group of each daemon
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for handle in logs:
            handle.close()


@pytest.fixture(scope="module")
def landed(access_logs, tmp_path_factory) -> tuple[LocalObjectStore, list[str]]:
    """The real logs landed in a local home's lake; the first hours of each site, as
    ``YYYY-MM-DDTHH`` labels."""
    home = tmp_path_factory.mktemp("home")
    store = LocalObjectStore(home / "lake")
    hours = []
    for site_dir in sorted(p for p in access_logs.iterdir() if p.is_dir()):
        files = land_files(store, site_dir.name, sorted(site_dir.glob("*.log.gz")))
        hours += sorted({f.manifest.hour for f in files})[:HOURS_PER_SITE]
    return store, [layout.hour_label(h) for h in sorted(hours)]


def _build(master: str, store: LocalObjectStore, attempt: str, hours: list[str]) -> dict:
    """``spark-submit`` the build of ``hours`` (each a separate run of ``first`` .. ``first``:
    the slice's hours are not contiguous) and return its summary and the hour manifests."""
    spark_submit = installed_spark_submit()
    conf = {"spark.ui.enabled": "false"}
    if master.startswith("spark://"):
        conf |= CLUSTER_CONF | {"spark.executor.extraJavaOptions": "-XX:-DontCompileHugeMethods"}
    env = {
        **os.environ,
        "BQ_PLATFORM_ENV": "local",
        "BQ_PLATFORM_HOME": str(Path(store.root).parent),
        "BQ_PLATFORM_VISITOR_KEY": KEY,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    summaries = []
    for first, last in _runs(hours):
        cmd = [str(spark_submit), "--master", master]
        cmd += [arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")]
        cmd += [str(APP), first, last, "--attempt-id", attempt]
        done = subprocess.run(
            cmd, env=env, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
        summaries.append(json.loads(done.stdout.strip().splitlines()[-1]))  # the last line
    manifests = [
        HourManifest.from_json(store.read_text(layout.hour_manifest_key(parse_hour_label(h))))
        for h in hours
    ]
    return {"summaries": summaries, "manifests": manifests}


def _runs(hours: list[str]) -> list[tuple[str, str]]:
    """``hours`` (sorted labels) as runs of consecutive hours, ``(first, last)`` each."""
    runs: list[list[str]] = []
    for label in hours:
        hour = parse_hour_label(label)
        if runs and parse_hour_label(runs[-1][-1]) + dt.timedelta(hours=1) == hour:
            runs[-1].append(label)
        else:
            runs.append([label])
    return [(run[0], run[-1]) for run in runs]


def test_standalone_cluster_build_equals_local(standalone_master, landed) -> None:
    url, cluster_dir = standalone_master
    store, hours = landed
    local = _build("local[2]", store, "local", hours)
    cluster = _build(url, store, "cluster", hours)
    for worker in ("work-1", "work-2"):  # each worker ran an executor of the cluster build
        assert list((cluster_dir / worker).glob("app-*/*/stderr")), worker
    assert sum(s["rows"] for s in cluster["summaries"]) == sum(m.rows for m in cluster["manifests"])
    by_hour = collections.defaultdict(dict)
    for name, result in (("local", local), ("cluster", cluster)):
        for manifest in result["manifests"]:
            by_hour[manifest.hour][name] = manifest
    assert len(by_hour) == len(hours) == 2 * HOURS_PER_SITE
    total = 0
    for hour, pair in sorted(by_hour.items()):
        a, b = pair["local"], pair["cluster"]
        assert a.counts == b.counts, hour
        assert (a.fingerprint, a.rows, a.sample_rows) == (b.fingerprint, b.rows, b.sample_rows)
        assert a.file_mismatches == b.file_mismatches == ()
        assert all(c.balanced for c in a.counts)
        for files in ("full_files", "sample_files", "deadletter_files"):
            assert parquet_rows(store, getattr(a, files)) == parquet_rows(
                store, getattr(b, files)
            ), (hour, files)
        total += a.rows
        assert all("attempt=cluster/" in k for k in b.full_files)
    assert total > 1000
