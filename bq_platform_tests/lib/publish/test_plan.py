"""``bq-platform plan``: the production adapter's own requests, recorded, never sent."""

import contextlib
import datetime as dt
import functools
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from bq_platform.cli.main import main
from bq_platform.lib.core import layout
from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.manifest import HourManifest, read_hour_manifests
from bq_platform.lib.daily_build.rollup_files import RollupFiles, rollup_inputs
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.publish.plan import rollup_plans
from bq_platform.lib.publish.rollups import rollup_load_plan
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.recording import PlanRefusedError, RecordingSession
from bq_platform_tests.lib.build_inputs import land

HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (4, 5)]


def _write_lake(home: Path) -> None:
    """Two built hours: hour manifests naming Parquet keys (plan never reads the Parquet)."""
    store = LocalObjectStore(str(home / "lake"))
    for hour in HOURS:
        label = hour.strftime("%Y-%m-%dT%H")
        manifest = HourManifest(
            hour=hour,
            attempt_id="run1-0",
            fingerprint=f"{hour.hour:02d}" * 32,
            input_fingerprint="ab" * 32,
            full_files=(f"staging/pageviews/attempt=run1-0/full/hour={label}/part-0.parquet",),
            sample_files=(f"staging/pageviews/attempt=run1-0/sample/hour={label}/part-0.parquet",),
            deadletter_files=(f"deadletter/pageviews/attempt=run1-0/hour={label}/part-0.parquet",),
            rows=10,
            sample_rows=1,
            counts=(SiteHourCounts(site="epa.gov", hour=hour, source_lines=10, pageviews=10),),
        )
        store.write_text(layout.hour_manifest_key(hour), manifest.to_json())


def _prod_env(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """The production settings ``plan --offline`` needs, with the local lake under ``home``."""
    for name, value in {
        "BQ_PLATFORM_HOME": str(home),
        "BQ_PLATFORM_ENV": "prod",
        "BQ_PLATFORM_GCP_PROJECT": "p",
        "BQ_PLATFORM_BQ_DATASET": "d",
        "BQ_PLATFORM_BUCKET": "b",
        "BQ_PLATFORM_VISITOR_KEY": "k",
    }.items():
        monkeypatch.setenv(name, value)


class NetworkUsedError(Exception):
    """A socket was opened or a host name resolved inside :func:`no_network` (not an
    ``OSError``, so no client retries it as a transient network failure)."""


#: Network events (``sys.addaudithook`` names, docs.python.org/3/library/audit_events.html)
#: that :func:`no_network` refuses.
NETWORK_EVENTS = frozenset(
    {"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"}
)
_refusing: list[list[str]] = []


def _refuse_network(event: str, args: tuple[object, ...]) -> None:
    if _refusing and event in NETWORK_EVENTS:
        _refusing[-1].append(f"{event}{args[1:2] if event == 'socket.connect' else args[:2]}")
        raise NetworkUsedError(_refusing[-1][-1])


@functools.cache
def _install_hook() -> None:
    sys.addaudithook(_refuse_network)  # for good (hooks cannot be removed): inert outside


@contextlib.contextmanager
def no_network() -> Iterator[list[str]]:
    """Refuse, in every thread of this process, each socket connection and name lookup while
    the block runs; yields the list of those refused."""
    _install_hook()
    refused: list[str] = []
    _refusing.append(refused)
    try:
        yield refused
    finally:
        _refusing.remove(refused)


def test_no_network_refuses_a_request() -> None:
    with no_network() as refused, pytest.raises(NetworkUsedError):
        requests.get("http://127.0.0.1:9/", timeout=1)
    assert refused == ["socket.getaddrinfo('127.0.0.1', 9)"]


@pytest.fixture
def planned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    _write_lake(tmp_path)
    _prod_env(monkeypatch, tmp_path)
    with no_network() as refused:
        result = CliRunner().invoke(
            main,
            ["plan", "--offline", "--json", "--start", "1995-08-01T04", "--end", "1995-08-01T05"],
        )
    assert refused == [], "plan --offline used the network"
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.output.splitlines()]


def test_offline_plan_prints_every_request_of_the_hours(planned: list[dict]) -> None:
    apis = [r["api"] for r in planned]
    assert set(apis) == {"tables.insert", "jobs.insert"}
    tables = {
        r["resource"]["tableReference"]["tableId"] for r in planned if r["api"] != "jobs.insert"
    }
    assert tables == {
        "pageviews_audit",
        "_bq_platform_published",
        "pageviews_stage_1995080104",
        "pageviews_stage_1995080105",
        "pageviews_sample_stage_1995080104",
        "pageviews_sample_stage_1995080105",
        "pageviews",
        "pageviews_sample",
        "pageview_deadletters",
        "pageviews_daily_by_site",
        "pageviews_daily_by_page",
    }
    jobs = [r["resource"] for r in planned if r["api"] == "jobs.insert"]
    assert sorted("load" if "load" in j["configuration"] else "copy" for j in jobs) == [
        "copy",
        "copy",
        *["load"] * 7,
    ]
    # the day's rollups, not built yet: one load each of the files a run builds first
    rollups = {
        load["destinationTable"]["tableId"]: load
        for j in jobs
        if "pageviews_daily_"
        in (load := j["configuration"].get("load", {}))
        .get("destinationTable", {})
        .get("tableId", "")
    }
    assert sorted(rollups) == [
        "pageviews_daily_by_page$19950801",
        "pageviews_daily_by_site$19950801",
    ]
    for table, load in rollups.items():
        (uri,) = load["sourceUris"]
        folder = f"gs://b/staging/rollups/{table.split('$')[0]}/day=1995-08-01/"
        assert uri.startswith(folder) and uri.endswith("/part-*.parquet")
        assert load["writeDisposition"] == "WRITE_TRUNCATE"
    # the day's dead letters: one load of both hours' files into the day partition
    (dead,) = [
        j["configuration"]["load"]
        for j in jobs
        if j["configuration"].get("load", {}).get("destinationTable", {}).get("tableId", "")
        == "pageview_deadletters$19950801"
    ]
    assert len(dead["sourceUris"]) == 2 and dead["writeDisposition"] == "WRITE_TRUNCATE"


def test_offline_plan_requests_follow_bigquerys_rules(planned: list[dict]) -> None:
    specs = {
        r["resource"]["tableReference"]["tableId"]: r["resource"]
        for r in planned
        if r["api"] == "tables.insert"
    }
    for resource in specs.values():
        rules.check_labels(resource.get("labels", {}), "table")
        assert len(resource.get("clustering", {}).get("fields", [])) <= 4
    for r in planned:
        if r["api"] != "jobs.insert":
            continue
        job = r["resource"]
        rules.check_job_id(job["jobReference"]["jobId"])
        rules.check_labels(job["configuration"]["labels"], "job")
        if "load" in job["configuration"]:
            load = job["configuration"]["load"]
            assert load["schema"]["fields"], "explicit schema"
            assert all(
                u.startswith(("gs://b/staging/", "gs://b/deadletter/")) for u in load["sourceUris"]
            )
            assert load["createDisposition"] == "CREATE_NEVER"
            continue
        copy = job["configuration"]["copy"]
        table, _, day = copy["destinationTable"]["tableId"].partition("$")
        assert day == "19950801" and copy["writeDisposition"] == "WRITE_TRUNCATE"
        destination = specs[table]
        for source in copy["sourceTables"]:
            stage_table, _, source_day = source["tableId"].partition("$")
            assert source_day == day  # several sources into a partition: each a partition
            stage = specs[stage_table]
            # The copy is refused unless partitioning and clustering match
            # (job_rules.check_copy_job).
            assert stage["timePartitioning"] == destination["timePartitioning"]
            assert stage["clustering"] == destination["clustering"]
            assert stage["schema"]["fields"] == destination["schema"]["fields"]


def test_the_default_hours_follow_the_lookback_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --start/--end: the landed days the automation would plan."""
    _write_lake(tmp_path)
    land(LocalObjectStore(tmp_path / "lake"), "epa.gov", HOURS[0], [b"x"])
    _prod_env(monkeypatch, tmp_path)
    every = CliRunner().invoke(main, ["plan", "--offline", "--json"])
    assert every.exit_code == 0, every.output
    assert "pageviews_stage_1995080104" in every.output
    monkeypatch.setenv("BQ_PLATFORM_LOOKBACK_DAYS", "7")  # 1995 is long before the window
    recent = CliRunner().invoke(main, ["plan", "--offline", "--json"])
    assert recent.exit_code == 0, recent.output
    assert "pageviews_stage_" not in recent.output
    monkeypatch.setenv("BQ_PLATFORM_LOOKBACK_DAYS", "seven")
    bad = CliRunner().invoke(main, ["plan", "--offline"])
    assert bad.exit_code == 2 and "BQ_PLATFORM_LOOKBACK_DAYS must be a positive whole" in bad.output


def test_plan_needs_production_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BQ_PLATFORM_ENV", "local")
    result = CliRunner().invoke(main, ["plan", "--offline"])
    assert result.exit_code != 0
    assert "BQ_PLATFORM_ENV=prod" in result.output


class _ReadOnlyBackend(requests.Session):
    """Stands in for BigQuery behind an online plan: answers GETs, fails on anything else."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str]] = []

    def request(self, method: str, url: str, *args: object, **kwargs: object) -> requests.Response:  # type: ignore[override]
        self.calls.append((method, url))
        assert method == "GET", f"a plan sent {method} {url}"
        response = requests.Response()
        response.status_code = 200
        response._content = b"{}"
        return response


def test_online_plan_reads_through_and_never_writes() -> None:
    inner = _ReadOnlyBackend()
    session = RecordingSession(inner, offline=False)
    base = "https://bigquery.googleapis.com/bigquery/v2/projects/p"
    session.request("GET", f"{base}/jobs/bqp_x")
    body = json.dumps({"jobReference": {"jobId": "x"}, "configuration": {"load": {}}})
    session.request("POST", f"{base}/jobs", data=body)
    session.request("POST", f"{base}/datasets/d/tables", data=json.dumps({"tableReference": {}}))
    assert inner.calls == [("GET", f"{base}/jobs/bqp_x")]
    assert [r.api for r in session.requests] == ["jobs.insert", "tables.insert"]
    with pytest.raises(PlanRefusedError, match="query"):
        session.request(
            "POST", f"{base}/jobs", data=json.dumps({"configuration": {"query": {"query": "x"}}})
        )


def test_a_built_rollup_is_planned_with_its_files_and_the_runs_job_id(tmp_path: Path) -> None:
    """With the rollup built, the plan loads the files its manifest names, under the job ID
    the run's publish uses (the same content fingerprint)."""
    _write_lake(tmp_path)
    store = LocalObjectStore(str(tmp_path / "lake"))
    day = HOURS[0].date()
    manifests = {h: m for h, m in read_hour_manifests(store, HOURS).items() if m}
    inputs = rollup_inputs(day, manifests, ROLLUP_VERSION)
    prefix = layout.rollup_prefix("pageviews_daily_by_site", day, inputs.fingerprint)
    built = RollupFiles(
        "pageviews_daily_by_site",
        day,
        inputs.fingerprint,
        inputs.day_fingerprint,
        (f"{prefix}/part-00000-x.snappy.parquet",),
        rows=1,
        human_pageviews=3,
        bot_pageviews=1,
    )
    store.write_text(built.key, built.to_json())
    by_site, by_page = rollup_plans(store, day, manifests, require_partition_filter=True)
    site_job, page_job = by_site.make_job(0), by_page.make_job(0)
    assert site_job.source_uris == (store.uri(built.files[0]),)
    assert page_job.source_uris[0].endswith("/part-*.parquet")
    run_job = rollup_load_plan(
        store, built, asset="pageviews_daily_by_site", run_id="r", require_partition_filter=True
    ).make_job(0)
    assert site_job.job_id == run_job.job_id and site_job.destination == run_job.destination
