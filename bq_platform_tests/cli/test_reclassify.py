"""``bq-platform run`` after the traffic classifier changed (here its page-rate threshold):
the hours whose input is unchanged are held and named until ``run --reclassify``; and
``bq-platform reclassify-preview`` on a small published sample."""

import dataclasses
import datetime as dt
import types

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from bq_platform.cli.main import main
from bq_platform.cli.runner import PipelineRunner
from bq_platform.lib import planning
from bq_platform.lib.core import layout
from bq_platform.lib.core.hours import day_hours
from bq_platform.lib.core.job_ids import job_id, job_labels, sha256_json
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.landing.index import scan_landing
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.traffic.crawlers import crawler_pattern
from bq_platform.lib.warehouse.base import LoadJob
from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS, pageviews_sample_spec
from bq_platform_tests.cli.cli_home import CliHome
from bq_platform_tests.cli.test_main import one_landed_day

STRICT = {"BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR": "1"}


@dataclasses.dataclass
class ConfiguredHome(CliHome):
    """A :class:`CliHome` whose commands get ``extra`` variables too."""

    extra: dict[str, str] = dataclasses.field(default_factory=dict)

    def env(self) -> dict[str, str]:
        return {**super().env(), **self.extra}


@pytest.mark.spark
def test_run_holds_hours_to_reclassify_until_asked(tmp_path, access_logs):
    home = ConfiguredHome(tmp_path)
    home.land_slice(access_logs, tmp_path)
    first = home.cli("run")
    assert first.returncode == 0, first.stdout
    runs = len(home.runs())

    home.extra = STRICT
    held = home.cli("run")
    assert held.returncode == 1, held.stdout
    assert "1995-08-01: held (24 hours to reclassify)" in held.stdout
    assert "Days held: not reclassified without a request: 24 hours" in held.stdout
    assert "heuristics heuristic:page_rate>720/h -> heuristic:page_rate>1/h" in held.stdout
    assert "bq-platform run --reclassify" in held.stdout
    assert len(home.runs()) == runs  # nothing built
    assert home.query("SELECT count(*) FROM pageviews WHERE traffic_class <> 'human'") == [(0,)]

    redone = home.cli("run", "--reclassify")
    assert redone.returncode == 0, redone.stdout
    assert "reclassifying 24 hours" in redone.stdout
    ((moved,),) = home.query(
        "SELECT count(*) FROM pageviews WHERE bot_reason = 'heuristic:page_rate>1/h'"
    )
    assert moved > 0
    again = home.cli("run")
    assert again.returncode == 0 and "1995-08-01: skip (up to date)" in again.stdout, again.stdout


def _published_sample(folder, rows: list[dict]) -> None:
    """Publish ``rows`` (partial pageview rows) as the ``pageviews_sample`` of the local
    warehouse in ``folder``, by a load job as the pipeline does."""
    arrow = {"STRING": pa.string(), "INT64": pa.int64(), "DATE": pa.date32()}
    arrow["TIMESTAMP"] = pa.timestamp("us", tz="UTC")
    schema = pa.schema([pa.field(c.name, arrow[c.type]) for c in PAGEVIEW_COLUMNS])
    full = [{c.name: row.get(c.name) for c in PAGEVIEW_COLUMNS} for row in rows]
    path = folder / "sample.parquet"
    pq.write_table(pa.Table.from_pylist(full, schema=schema), path)
    warehouse = DuckDBWarehouse(str(folder / "warehouse.duckdb"))
    try:
        spec = pageviews_sample_spec()
        warehouse.ensure_table(spec)
        fingerprint = sha256_json(rows)
        day = rows[0]["event_date"]
        warehouse.submit_job(
            LoadJob(
                job_id=job_id("load", spec.name, f"{day:%Y%m%d}", fingerprint),
                destination=f"{spec.name}${day:%Y%m%d}",
                source_uris=(str(path),),
                spec=spec,
                write_disposition="WRITE_TRUNCATE",
                labels=job_labels(spec.name, f"{day:%Y%m%d}", "test", fingerprint),
            )
        )
    finally:
        warehouse.close()


def test_the_preview_shows_the_rows_that_move_per_day_and_site(tmp_path, monkeypatch):
    one_landed_day(tmp_path, monkeypatch)  # 1995-08-01 landed: the default days
    googlebot = "Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)"
    browser = "Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
    assert crawler_pattern(googlebot) and not crawler_pattern(browser)
    start = dt.datetime(1995, 8, 1, 4, tzinfo=dt.UTC)

    def row(i: int, visitor: str, agent: str, cls: str, reason: str | None = None) -> dict:
        ts = start + dt.timedelta(minutes=i)
        return {
            "event_id": f"e{i}",
            "event_ts": ts,
            "event_date": ts.date(),
            "site": "shop.example",
            "visitor_id": visitor,
            "page_path": f"/p{i}",
            "http_method": "GET",
            "status": 200,
            "user_agent": agent,
            "traffic_class": cls,
            "bot_reason": reason,
        }

    _published_sample(
        tmp_path,
        [
            row(0, "a", googlebot, "human"),  # the installed list knows it: moves to bot
            row(1, "a", googlebot, "human"),
            row(2, "b", browser, "human"),  # stays human
            row(3, "c", browser, "bot", "crawler-user-agents:Firefox"),  # no longer listed
        ],
    )

    result = CliRunner().invoke(main, ["reclassify-preview", "--from", "1995-08-01"])

    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    (table,) = [i for i, line in enumerate(lines) if line.startswith("day ")]
    assert lines[table + 1].split() == ["1995-08-01", "shop.example", "4", "3", "2", "2", "1"]
    assert lines[table + 2].split()[:2] == ["2", "human->bot"]
    assert lines[table + 2].endswith(googlebot)
    assert lines[table + 3].split()[:2] == ["1", "bot->human"]
    assert lines[table + 3].endswith(browser)


def _built_with_another_classifier(tmp_path, monkeypatch) -> list[dt.datetime]:
    """:func:`one_landed_day`, its 24 hours built (manifests only) with another classifier
    than the installed one; the hours."""
    one_landed_day(tmp_path, monkeypatch)
    store = LocalObjectStore(tmp_path / "lake")
    index = scan_landing(store)
    hours = day_hours(dt.date(1995, 8, 1))
    for hour in hours:
        fp = planning.landed_input_fingerprint(index, hour)
        files = [(f"staging/{kind}/hour={hour:%Y-%m-%dT%H}/part-0.parquet",) for kind in "fsd"]
        manifest = HourManifest(hour, "old", "f" * 64, fp, *files, 0, 0, (), classifier=OLD)
        store.write_text(layout.hour_manifest_key(hour), manifest.to_json())
    return hours


OLD = "crawler-user-agents==0.1.0;heuristics=none"


def test_run_names_the_held_hours_and_exits_1_and_reclassify_builds_them(tmp_path, monkeypatch):
    hours = _built_with_another_classifier(tmp_path, monkeypatch)
    batches: list[tuple[bool, list[dt.datetime]]] = []

    def run_batch(self, batch, *_):
        batches.append((self.reclassify, [h for day in sorted(batch) for h in batch[day]]))
        return True

    monkeypatch.setattr(PipelineRunner, "_run_batch", run_batch)
    monkeypatch.setattr(PipelineRunner, "print_summary", lambda self, days: None)

    held = CliRunner().invoke(main, ["run"])
    assert held.exit_code == 1, held.output
    assert batches == []
    assert "1995-08-01: held (24 hours to reclassify)" in held.output
    assert held.output.count("24 hours (1995-08-01T00, 1995-08-01T01") == 1  # named once
    assert "crawler-user-agents 0.1.0 -> " in held.output
    assert held.output.rstrip().endswith(
        "then run bq-platform run --reclassify (Dagster: run config ops: lake__pageview_files: "
        "config: reclassify: true)"
    )

    explicit = CliRunner().invoke(
        main, ["run", "--start", "1995-08-01T04", "--end", "1995-08-01T05"]
    )
    assert explicit.exit_code == 1 and batches == [], explicit.output
    assert "2 hours (1995-08-01T04, 1995-08-01T05) from crawler-user-agents" in explicit.output

    done = CliRunner().invoke(main, ["run", "--reclassify"])
    assert done.exit_code == 0, done.output
    assert "1995-08-01: due (24 hours to build" in done.output and "reclassifying" in done.output
    assert batches == [(True, hours)]


def test_the_hourly_runs_of_a_reclassifying_runner_pass_the_build_config(tmp_path):
    seen: list[dict] = []

    class Job:
        def execute_in_process(self, **kwargs):
            seen.append(kwargs["run_config"])
            raise RuntimeError("stop here")

    runner = PipelineRunner(
        load_definitions=lambda: types.SimpleNamespace(resolve_job_def=lambda name: Job()),
        store=LocalObjectStore(tmp_path / "lake"),
        warehouse=DuckDBWarehouse(str(tmp_path / "warehouse.duckdb")),
        visitor_key="k",
        echo=lambda _: None,
        instance=dg.DagsterInstance.ephemeral(),
        verbose=True,
    )
    for reclassify in (False, True):
        runner.reclassify = reclassify
        with pytest.raises(RuntimeError, match="stop here"):
            runner._build("1995-08-01", day_hours(dt.date(1995, 8, 1)))
    assert [c["ops"]["lake__pageview_files"] for c in seen] == [
        {"config": {"reclassify": False}},
        {"config": {"reclassify": True}},
    ]


def test_plan_names_the_hours_run_would_hold(tmp_path, monkeypatch):
    _built_with_another_classifier(tmp_path, monkeypatch)
    for name, value in {
        "BQ_PLATFORM_ENV": "prod",
        "BQ_PLATFORM_GCP_PROJECT": "p",
        "BQ_PLATFORM_BQ_DATASET": "d",
        "BQ_PLATFORM_BUCKET": "b",
        "BQ_PLATFORM_VISITOR_KEY": "k",
    }.items():
        monkeypatch.setenv(name, value)

    result = CliRunner().invoke(
        main, ["plan", "--offline", "--start", "1995-08-01T04", "--end", "1995-08-01T04"]
    )

    assert result.exit_code == 0, result.output
    assert result.output.startswith(
        "held hours: not reclassified without a request: 1 hours (1995-08-01T04) from "
        "crawler-user-agents 0.1.0 -> "
    )
