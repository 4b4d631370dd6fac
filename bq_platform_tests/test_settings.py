"""Settings read from the environment without Dagster (settings.py), and the promise
that they agree with the Dagster resources (defs/resources.py) a run binds."""

import dataclasses
import datetime as dt
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bq_platform import settings
from bq_platform.defs.resources import PipelineSettings, build_resources, resolved
from bq_platform.lib.storage.gcs import GCSObjectStore
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.traffic.thresholds import ClassificationThresholds

PROD = {
    "BQ_PLATFORM_GCP_PROJECT": "the-project",
    "BQ_PLATFORM_BUCKET": "the-bucket",
    "BQ_PLATFORM_BQ_DATASET": "the_dataset",
    "BQ_PLATFORM_VISITOR_KEY": "the-secret-key",
    # No request is sent: the client is built, never used (no credentials needed).
    "STORAGE_EMULATOR_HOST": "http://127.0.0.1:9",
}


@pytest.fixture
def prod_env(monkeypatch):
    for name, value in PROD.items():
        monkeypatch.setenv(name, value)


def test_the_local_lake_is_the_resources_lake(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path / "home"))
    store = settings.object_store("local")
    bound = build_resources("local")["object_store"].get_store()
    assert isinstance(store, LocalObjectStore) and isinstance(bound, LocalObjectStore)
    assert store.root == bound.root == (tmp_path / "home" / "lake").resolve()


def test_the_production_lake_is_the_bucket_a_run_resolves(prod_env) -> None:
    store = settings.object_store("prod")
    bound = resolved(build_resources("prod")["object_store"]).get_store()
    assert isinstance(store, GCSObjectStore) and isinstance(bound, GCSObjectStore)
    assert store.bucket_name == bound.bucket_name == "the-bucket"
    assert store.client.project == bound.client.project == "the-project"


@pytest.mark.parametrize("unset", ["BQ_PLATFORM_GCP_PROJECT", "BQ_PLATFORM_BUCKET"])
def test_a_missing_production_variable_is_named(prod_env, monkeypatch, unset: str) -> None:
    monkeypatch.setenv(unset, "")
    with pytest.raises(ValueError, match=f"set {unset} "):
        settings.object_store("prod")
    with pytest.raises(ValueError, match=f"set {unset} "):
        resolved(build_resources("prod")["object_store"])


def test_an_unknown_environment_is_refused(monkeypatch) -> None:
    with pytest.raises(ValueError, match="'staging'"):
        settings.object_store("staging")
    monkeypatch.setenv("BQ_PLATFORM_ENV", "staging")
    with pytest.raises(ValueError, match="BQ_PLATFORM_ENV must be 'local' or 'prod'"):
        settings.env_name()
    monkeypatch.setenv("BQ_PLATFORM_ENV", "")
    assert settings.env_name() == "local"


def test_the_first_hour_from_the_environment(monkeypatch) -> None:
    monkeypatch.delenv("BQ_PLATFORM_FIRST_HOUR", raising=False)
    assert settings.first_hour() == dt.datetime(1995, 8, 1, tzinfo=dt.UTC)
    monkeypatch.setenv("BQ_PLATFORM_FIRST_HOUR", "2024-02-29T05")
    assert settings.first_hour() == dt.datetime(2024, 2, 29, 5, tzinfo=dt.UTC)
    monkeypatch.setenv("BQ_PLATFORM_FIRST_HOUR", "2024-02-29-05:00")  # the older spelling
    assert settings.first_hour() == dt.datetime(2024, 2, 29, 5, tzinfo=dt.UTC)
    monkeypatch.setenv("BQ_PLATFORM_FIRST_HOUR", "yesterday")
    with pytest.raises(ValueError, match="not a UTC hour: 'yesterday'"):
        settings.first_hour()


def test_resolved_production_resources_hold_the_values_not_the_names(prod_env) -> None:
    raw = build_resources("prod")
    assert raw["settings"].visitor_key == "BQ_PLATFORM_VISITOR_KEY"  # what Dagster defers
    bound = {key: resolved(resource) for key, resource in raw.items()}
    assert bound["settings"].visitor_key == "the-secret-key"
    assert bound["settings"].job_budget_per_table_per_day == 1350  # plain fields kept
    assert (bound["warehouse"].project, bound["warehouse"].dataset) == (
        "the-project",
        "the_dataset",
    )
    assert bound["warehouse"].location == raw["warehouse"].location
    assert bound["object_store"].bucket == "the-bucket"
    assert bound["spark"] is raw["spark"]  # nothing to resolve: the same object


def test_local_resources_are_left_as_they_are(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    raw = build_resources("local")
    assert all(resolved(resource) is resource for resource in raw.values())


def test_landing_a_tree_imports_no_dagster(tmp_path) -> None:
    """``land-tree`` reads its settings and builds its store through settings.py, so it
    imports no Dagster. One worker: the sites land in this process, which then has done all a
    forked worker does."""
    for name in ("epa.gov", "nasa.gov"):
        site = tmp_path / "tree" / name
        site.mkdir(parents=True)
        (site / "access.log").write_text(
            'h1 - - [30/Aug/1995:23:53:25 -0400] "GET /index.html HTTP/1.0" 200 1\n'
        )
    script = textwrap.dedent(
        f"""
        import sys
        from bq_platform.cli.main import main
        main(["land-tree", "--workers", "1", {str(tmp_path / "tree")!r}], standalone_mode=False)
        print("dagster imported:", any(m.split(".")[0] == "dagster" for m in sys.modules))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env={"BQ_PLATFORM_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "epa.gov: 1 files, 1 new lines in 1 hours" in done.stdout
    assert "nasa.gov: 1 files, 1 new lines in 1 hours" in done.stdout
    assert "dagster imported: False" in done.stdout
    assert len(list((tmp_path / "home" / "lake" / "landing").rglob("*.log.gz"))) == 2


def test_the_visitor_key_is_the_resources_key(monkeypatch, prod_env) -> None:
    assert settings.visitor_key("prod") == "the-secret-key"
    assert resolved(build_resources("prod")["settings"]).visitor_key == "the-secret-key"
    assert settings.visitor_key("local") == "the-secret-key"
    monkeypatch.setenv("BQ_PLATFORM_VISITOR_KEY", "")
    assert settings.visitor_key("local") == settings.LOCAL_VISITOR_KEY
    assert build_resources("local")["settings"].visitor_key == settings.LOCAL_VISITOR_KEY
    with pytest.raises(ValueError, match="set BQ_PLATFORM_VISITOR_KEY"):
        settings.visitor_key("prod")


def test_the_production_warehouse_is_the_resources_warehouse(prod_env, monkeypatch) -> None:
    target = settings.bigquery_target()
    bound = resolved(build_resources("prod")["warehouse"])
    assert (target.project, target.dataset, target.bucket) == (
        "the-project",
        "the_dataset",
        "the-bucket",
    )
    assert (target.location, target.job_id_prefix) == ("US", "")
    assert (bound.project, bound.dataset, bound.location, bound.job_id_prefix) == (
        target.project,
        target.dataset,
        target.location,
        target.job_id_prefix,
    )
    monkeypatch.setenv("BQ_PLATFORM_BQ_LOCATION", "EU")
    monkeypatch.setenv("BQ_PLATFORM_BQ_JOB_PREFIX", "staging_")
    assert settings.bigquery_target().location == "EU"
    assert resolved(build_resources("prod")["warehouse"]).job_id_prefix == "staging_"
    monkeypatch.delenv("BQ_PLATFORM_BQ_DATASET")
    with pytest.raises(ValueError, match="set BQ_PLATFORM_BQ_DATASET "):
        settings.bigquery_target()


def test_the_spark_settings_and_their_defaults(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    for name in (
        "BQ_PLATFORM_SPARK_MASTER",
        "BQ_PLATFORM_SHUFFLE_PARTITIONS",
        "BQ_PLATFORM_SPARK_DRIVER_MEMORY",
        "BQ_PLATFORM_SPARK_VERBOSE",
        "BQ_PLATFORM_BUILD",
        "BQ_PLATFORM_SPARK_SUBMIT",
    ):
        monkeypatch.delenv(name, raising=False)
    assert settings.spark_master() == "local[*]" and settings.spark_master("yarn") == "yarn"
    assert settings.shuffle_partitions(64) == 64
    assert settings.spark_driver_memory() == "2g" and not settings.spark_verbose()
    assert (settings.hourly_build(), settings.spark_submit()) == ("in-process", "")
    local = build_resources("local")["spark"].spark_config
    assert (local["spark.master"], local["spark.driver.memory"]) == ("local[*]", "2g")

    monkeypatch.setenv("BQ_PLATFORM_SPARK_MASTER", "local[1]")
    monkeypatch.setenv("BQ_PLATFORM_SPARK_DRIVER_MEMORY", "4g")
    monkeypatch.setenv(settings.SPARK_VERBOSE, "1")
    local = build_resources("local")["spark"].spark_config
    assert (local["spark.master"], local["spark.driver.memory"]) == ("local[1]", "4g")
    assert "log4j2" not in local["spark.driver.extraJavaOptions"]
    monkeypatch.setenv("BQ_PLATFORM_BUILD", "elsewhere")
    with pytest.raises(ValueError, match="BQ_PLATFORM_BUILD must be one of in-process, spark-"):
        settings.hourly_build()


#: The traffic classification's variables and their PipelineSettings fields.
TRAFFIC_VARIABLES = {
    "BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR": "max_pages_per_visitor_hour",
    "BQ_PLATFORM_BOT_ROBOTS_TXT": "bot_robots_txt",
    "BQ_PLATFORM_BOT_EMPTY_USER_AGENT": "bot_empty_user_agent",
}


def traffic_pipeline() -> PipelineSettings:
    """The PipelineSettings that :func:`settings.pipeline_settings` configures (traffic
    fields only, besides a key)."""
    fields = settings.pipeline_settings("prod")
    traffic = {k: fields[k] for k in TRAFFIC_VARIABLES.values() if k in fields}
    return PipelineSettings(visitor_key="k", **traffic)


@pytest.mark.parametrize(
    "thresholds",
    [
        ClassificationThresholds(max_pages_per_visitor_hour=40),
        ClassificationThresholds(
            max_pages_per_visitor_hour=None,
            robots_txt_marks_visitor=False,
            empty_user_agent_marks_line=False,
        ),
        ClassificationThresholds(empty_user_agent_marks_line=False),
    ],
)
def test_the_application_gets_the_runs_settings_back(monkeypatch, thresholds) -> None:
    """What a launcher hands a build application is what the application reads here."""
    for name, value in settings.application_environment(
        visitor_key="the-runs-key", lines_per_pass=7, thresholds=thresholds
    ).items():
        monkeypatch.setenv(name, value)
    assert settings.visitor_key("prod") == "the-runs-key"
    assert settings.pipeline_settings("prod")["lines_per_pass"] == 7
    assert settings.classification_thresholds() == thresholds
    assert traffic_pipeline().traffic_thresholds() == thresholds


def test_the_heuristics_default_to_on_with_the_default_page_rate(monkeypatch) -> None:
    for name in TRAFFIC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert settings.classification_thresholds() == ClassificationThresholds()
    assert traffic_pipeline().traffic_thresholds() == ClassificationThresholds()
    for name in TRAFFIC_VARIABLES:
        monkeypatch.setenv(name, "")  # empty: unset
    assert settings.classification_thresholds() == ClassificationThresholds()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", "off", {"max_pages_per_visitor_hour": None}),
        ("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", " OFF ", {"max_pages_per_visitor_hour": None}),
        ("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", "90", {"max_pages_per_visitor_hour": 90}),
        ("BQ_PLATFORM_BOT_ROBOTS_TXT", "off", {"robots_txt_marks_visitor": False}),
        ("BQ_PLATFORM_BOT_ROBOTS_TXT", "On", {"robots_txt_marks_visitor": True}),
        ("BQ_PLATFORM_BOT_EMPTY_USER_AGENT", "off", {"empty_user_agent_marks_line": False}),
        ("BQ_PLATFORM_BOT_EMPTY_USER_AGENT", "on", {"empty_user_agent_marks_line": True}),
    ],
)
def test_each_heuristic_setting_reaches_the_classification(
    monkeypatch, variable, value, expected
) -> None:
    for name in TRAFFIC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, value)
    thresholds = settings.classification_thresholds()
    assert thresholds == dataclasses.replace(ClassificationThresholds(), **expected)
    assert traffic_pipeline().traffic_thresholds() == thresholds


@pytest.mark.parametrize(
    ("variable", "value", "allowed"),
    [
        ("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", "0", "a positive whole number"),
        ("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", "2.5", "a positive whole number"),
        ("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", "none", "or 'off'"),
        ("BQ_PLATFORM_BOT_ROBOTS_TXT", "yes", "'on' or 'off', got 'yes'"),
        ("BQ_PLATFORM_BOT_EMPTY_USER_AGENT", "0", "'on' or 'off', got '0'"),
    ],
)
def test_a_bad_heuristic_setting_names_its_variable_and_the_values_allowed(
    monkeypatch, variable, value, allowed
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValueError, match=f"^{variable} must be .*{re.escape(allowed)}"):
        settings.pipeline_settings("prod")
    with pytest.raises(ValueError, match=f"^{variable} must be"):
        settings.classification_thresholds()
