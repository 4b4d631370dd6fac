"""The hourly build on a real Spark standalone cluster gives what local mode gives.

A master and two workers (1 core, 1 GiB each) are started from the pyspark distribution on
loopback (``$SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master`` / ``...Worker``:
the pip wheel has no ``sbin/start-master.sh``), and always stopped at the end. A slice of the
real logs (four hours of each site) is landed once; then the same build runs in two fresh
processes (``cluster_build.py``), one on ``local[2]``, one on ``spark://127.0.0.1:<port>``
with two executors, each under its own attempt. The manifests' counts and fingerprints and the
Parquet contents (full, sample, dead letters; rows sorted) must be identical.
"""

import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from bq_platform.lib import layout
from bq_platform.lib.landing import land_files
from bq_platform.lib.manifest import HourManifest
from bq_platform.lib.objectstore.local import LocalObjectStore

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
KEY = "cluster-test-key"
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
def standalone_master(tmp_path_factory) -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` of a running master with two registered workers."""
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
        yield url
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
    """The real logs landed; the first hours of each site, as ``YYYY-MM-DDTHH`` labels."""
    store = LocalObjectStore(tmp_path_factory.mktemp("lake"))
    hours = []
    for site_dir in sorted(p for p in access_logs.iterdir() if p.is_dir()):
        files = land_files(store, site_dir.name, sorted(site_dir.glob("*.log.gz")))
        hours += sorted({f.manifest.hour for f in files})[:HOURS_PER_SITE]
    return store, [layout.hour_label(h) for h in sorted(hours)]


def _build(master: str, store: LocalObjectStore, attempt: str, hours: list[str]) -> dict:
    cmd = [sys.executable, "-m", "bq_platform_tests.lib.cluster_build", master]
    cmd += [str(store.root), attempt, KEY, *hours]
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    done = subprocess.run(
        cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=_BUILD_TIMEOUT_S
    )
    assert done.returncode == 0, done.stderr[-5000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    out["manifests"] = [HourManifest.from_json(m) for m in out["manifests"]]
    return out


def _rows(store: LocalObjectStore, keys: tuple[str, ...]) -> list[tuple]:
    rows = []
    for key in keys:
        for row in pq.read_table(store.uri(key)).to_pylist():
            rows.append(tuple(sorted((k, str(v)) for k, v in row.items())))
    return sorted(rows)


def test_standalone_cluster_build_equals_local(standalone_master, landed) -> None:
    store, hours = landed
    local = _build("local[2]", store, "local", hours)
    cluster = _build(standalone_master, store, "cluster", hours)
    assert local["executors"] == 1  # the driver only
    assert cluster["executors"] == 3  # the driver and one executor per worker
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
            assert _rows(store, getattr(a, files)) == _rows(store, getattr(b, files)), (hour, files)
        total += a.rows
        assert all("attempt=cluster/" in k for k in b.full_files)
    assert total > 1000
