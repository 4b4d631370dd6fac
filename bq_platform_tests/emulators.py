"""Pytest fixtures and helpers for testing the Google Cloud adapters offline.

Two emulators run as subprocesses on loopback (127.0.0.1, free ports picked at start-up), one of
each per test module (their memory grows with every write, so no module inherits another's):

- ``gcp-storage-emulator`` (GCS JSON API)::

      python -m gcp_storage_emulator -d <data-dir> start --host 127.0.0.1 --port <port> -q

  Objects live on disk under ``<data-dir>/.cloudstorage/<bucket>/<name>``. Clients reach it with
  ``client_options={"api_endpoint": "http://127.0.0.1:<port>"}`` (or ``STORAGE_EMULATOR_HOST``).
- ``bqemulator`` (BigQuery REST, DuckDB inside)::

      HOME=<home> BQEMU_GCS_LOCAL_ROOT=<data-dir>/.cloudstorage BQEMU_LOG_LEVEL=warning \\
      python -m bqemulator start --rest-host 127.0.0.1 --rest-port <port> \\
          --grpc-host 127.0.0.1 --grpc-port 0 --project bqp-emulator --ephemeral

  At start-up it runs DuckDB's ``INSTALL spatial`` (and, best effort, ``INSTALL avro``), which
  downloads unless the extension is already installed. Offline, :func:`prepare_duckdb_home`
  links the files shipped in the PyPI wheels ``duckdb-extension-spatial`` and
  ``duckdb-extension-avro`` into ``<home>/.duckdb/extensions/<duckdb version>/<platform>/``,
  where DuckDB looks by default, and the emulator starts with ``HOME=<home>``. It resolves
  ``gs://bucket/path`` as the local file ``$BQEMU_GCS_LOCAL_ROOT/bucket/path``; pointing that
  at the GCS emulator's ``.cloudstorage`` folder makes Parquet written through the GCS emulator
  loadable by BigQuery load jobs.

Readiness is polled (``GET /storage/v1/b`` and ``GET /readyz``) for at most
:data:`STARTUP_TIMEOUT_S`; the processes are terminated at the end of the module. Logs go to
files next to the data (named in start-up errors).

HTTP recording and simulated BigQuery answers for the clients that talk to them:
:mod:`bq_platform_tests.http_recording`.
"""

import contextlib
import dataclasses
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
BQ_PROJECT = "bqp-emulator"
LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port that is free on loopback right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def _require(module: str, package: str) -> None:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{package} is not installed (pip install -e '.[test]')")


def prepare_duckdb_home(home: Path) -> Path:
    """Install DuckDB's spatial and avro extensions from their PyPI wheels under ``home``.

    Returns:
        The extension directory ``<home>/.duckdb/extensions/v<version>/<platform>``.

    Raises:
        RuntimeError: if a wheel lacks the file for this DuckDB version.
    """
    import duckdb

    version = duckdb.__version__
    version_dir = f"v{version}" if not version.startswith("v") else version
    with duckdb.connect() as con:
        platform = con.execute("PRAGMA platform").fetchone()[0]
    target = home / ".duckdb" / "extensions" / version_dir / platform
    target.mkdir(parents=True, exist_ok=True)
    for name in ("spatial", "avro"):
        spec = importlib.util.find_spec(f"duckdb_extension_{name}")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(f"install duckdb-extension-{name}=={version} (PyPI)")
        source = (
            Path(next(iter(spec.submodule_search_locations)))
            / "extensions"
            / version_dir
            / f"{name}.duckdb_extension"
        )
        if not source.is_file():
            raise RuntimeError(
                f"{source} missing: duckdb-extension-{name} must match duckdb {version}"
            )
        link = target / source.name
        if not link.exists():
            try:
                link.symlink_to(source)
            except OSError:
                shutil.copyfile(source, link)
    return target


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"{proc.args!r} exited with {proc.returncode}; log: {log_path}\n"
                + log_path.read_text(errors="replace")[-4000:]
            )
        try:
            with _DIRECT.open(url, timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.1)
    _stop(proc)
    raise RuntimeError(
        f"{url} not ready after {timeout_s:.0f} s; log: {log_path}\n"
        + log_path.read_text(errors="replace")[-4000:]
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def _process(
    cmd: list[str], env: dict[str, str], log_path: Path, ready_url: str
) -> Iterator[subprocess.Popen[bytes]]:
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(  # noqa: S603 - fixed argv, loopback only
            cmd, env=env, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            _wait_ready(ready_url, proc, log_path, STARTUP_TIMEOUT_S)
            yield proc
        finally:
            _stop(proc)


def _base_env() -> dict[str, str]:
    env = dict(os.environ)
    for var in (
        "STORAGE_EMULATOR_HOST",
        "BIGQUERY_EMULATOR_HOST",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        env.pop(var, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


@dataclasses.dataclass(frozen=True)
class GCSEmulator:
    """A running gcp-storage-emulator.

    Attributes:
        endpoint: base URL, e.g. ``http://127.0.0.1:40123``.
        data_dir: its ``--data-dir``; objects are files under ``data_dir/.cloudstorage``.
    """

    endpoint: str
    data_dir: Path

    @property
    def storage_root(self) -> Path:
        """``<data-dir>/.cloudstorage``, holding ``<bucket>/<object name>`` (the gs:// root)."""
        return self.data_dir / ".cloudstorage"

    def client(self, session: requests.Session | None = None) -> Any:
        """A ``google.cloud.storage.Client`` for this emulator, optionally over ``session``."""
        from bq_platform.lib.storage.gcs import gcs_client

        return gcs_client("bqp-emulator", emulator_host=self.endpoint, http=session)


@dataclasses.dataclass(frozen=True)
class BigQueryEmulator:
    """A running bqemulator.

    Attributes:
        endpoint: REST base URL, e.g. ``http://127.0.0.1:40124``.
        project: the emulator's default project.
    """

    endpoint: str
    project: str

    def client(self, session: requests.Session | None = None) -> Any:
        """A ``google.cloud.bigquery.Client`` for this emulator, optionally over ``session``."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import bigquery

        return bigquery.Client(
            project=self.project,
            location="US",
            credentials=AnonymousCredentials(),
            client_options={"api_endpoint": self.endpoint},
            _http=session,
        )

    def warehouse(
        self, dataset: str, session: requests.Session | None = None, job_id_prefix: str = ""
    ) -> Any:
        """The production ``BigQueryWarehouse`` on this emulator, as every emulator test
        configures it: API and job retries capped at 5 s (an emulator gap must fail fast, never
        wait BigQuery's 10 minutes) and 10-50 ms job polling.

        Args:
            dataset: the dataset of the warehouse object.
            session: HTTP session of the client (a recording session or the shim's).
            job_id_prefix: prefix of every job ID (job IDs are project-wide; tests that share
                the emulator's project give each dataset its own).
        """
        from bq_platform.lib.warehouse.bigquery.retries import api_retry, query_job_retry
        from bq_platform.lib.warehouse.bigquery.warehouse import BigQueryWarehouse

        return BigQueryWarehouse(
            self.client(session),
            self.project,
            dataset,
            "US",
            retry=api_retry(timeout_s=5.0),
            job_retry=query_job_retry(timeout_s=5.0),
            poll_initial_s=0.01,
            poll_max_s=0.05,
            job_id_prefix=job_id_prefix,
        )


@contextlib.contextmanager
def running_gcs_emulator(root: Path) -> Iterator[GCSEmulator]:
    """Start gcp-storage-emulator on a free loopback port; stop it on exit.

    A plain context manager (the :func:`gcs_emulator` fixture uses it). While it runs,
    ``NO_PROXY``/``no_proxy`` in ``os.environ`` include loopback (the official clients honour
    ``HTTP(S)_PROXY``); they are restored on exit.

    Args:
        root: an empty folder for the data (``root/data``) and the log
            (``root/gcs-emulator.log``).

    Raises:
        RuntimeError: if it exits or is not ready within :data:`STARTUP_TIMEOUT_S` (the log's
            tail is in the message).
    """
    data_dir = root / "data"
    data_dir.mkdir()
    port = free_port()
    endpoint = f"http://{LOOPBACK}:{port}"
    # The official clients honour HTTP(S)_PROXY; loopback must never go through a proxy.
    no_proxy = ",".join(p for p in (os.environ.get("NO_PROXY"), LOOPBACK, "localhost") if p)
    cmd = [
        sys.executable,
        "-m",
        "gcp_storage_emulator",
        "-d",
        str(data_dir),
        "start",
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "-q",
    ]
    with (
        pytest.MonkeyPatch.context() as patch,
        _process(cmd, _base_env(), root / "gcs-emulator.log", f"{endpoint}/storage/v1/b"),
    ):
        patch.setenv("NO_PROXY", no_proxy)
        patch.setenv("no_proxy", no_proxy)
        yield GCSEmulator(endpoint=endpoint, data_dir=data_dir)


@contextlib.contextmanager
def running_bq_emulator(root: Path, storage_root: Path) -> Iterator[BigQueryEmulator]:
    """Start bqemulator on a free loopback port, reading gs:// from ``storage_root``.

    A plain context manager (the :func:`bq_emulator` fixture uses it).

    Args:
        root: an empty folder for its ``HOME`` (DuckDB extensions) and its log
            (``root/bqemulator.log``).
        storage_root: the GCS emulator's :attr:`GCSEmulator.storage_root`.

    Raises:
        RuntimeError: if an extension wheel is missing, or the emulator exits or is not ready
            within :data:`STARTUP_TIMEOUT_S`.
    """
    home = root / "home"
    prepare_duckdb_home(home)
    port = free_port()
    endpoint = f"http://{LOOPBACK}:{port}"
    env = _base_env()
    env.update(
        {
            "HOME": str(home),
            "BQEMU_GCS_LOCAL_ROOT": str(storage_root),
            "BQEMU_LOG_LEVEL": "warning",
            "BQEMU_METRICS_ENABLED": "false",
        }
    )
    cmd = [
        sys.executable,
        "-m",
        "bqemulator",
        "start",
        "--rest-host",
        LOOPBACK,
        "--rest-port",
        str(port),
        "--grpc-host",
        LOOPBACK,
        "--grpc-port",
        "0",
        "--project",
        BQ_PROJECT,
        "--ephemeral",
    ]
    with _process(cmd, env, root / "bqemulator.log", f"{endpoint}/readyz"):
        yield BigQueryEmulator(endpoint=endpoint, project=BQ_PROJECT)


@pytest.fixture(scope="module")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GCSEmulator]:
    """gcp-storage-emulator on a free loopback port, for one test module."""
    _require("gcp_storage_emulator", "gcp-storage-emulator")
    with running_gcs_emulator(tmp_path_factory.mktemp("gcs-emulator")) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def bq_emulator(
    tmp_path_factory: pytest.TempPathFactory, gcs_emulator: GCSEmulator
) -> Iterator[BigQueryEmulator]:
    """bqemulator on a free loopback port, reading gs:// from the GCS emulator's files."""
    _require("bqemulator", "bqemulator")
    root = tmp_path_factory.mktemp("bq-emulator")
    with running_bq_emulator(root, gcs_emulator.storage_root) as emulator:
        yield emulator


def unique_name(prefix: str) -> str:
    """``<prefix>_<12 hex>``: a dataset or bucket name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def gcs_bucket(gcs_emulator: GCSEmulator) -> str:
    """A new, empty bucket in the GCS emulator."""
    name = unique_name("bqp").replace("_", "-")
    gcs_emulator.client().create_bucket(name)
    return name


@pytest.fixture
def bq_dataset() -> str:
    """A dataset name no other test uses (the warehouse creates it)."""
    return unique_name("bqp")
