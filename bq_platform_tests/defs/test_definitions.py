"""The definitions load under both environments, with the same resource keys."""

import dagster as dg
import pytest

from bq_platform.defs.resources import (
    BigQueryWarehouseResource,
    DuckDBWarehouseResource,
    GCSObjectStoreResource,
    LocalObjectStoreResource,
    build_resources,
)

EXPECTED_ASSETS = {
    "landing/pageview_logs",
    "lake/pageview_files",
    "warehouse/pageviews_stage",
    "warehouse/pageviews_sample_stage",
    "warehouse/pageviews_audit",
    "warehouse/pageviews",
    "warehouse/pageviews_sample",
    "reports/pageviews_completeness",
}


def load_defs() -> dg.Definitions:
    from bq_platform.definitions import defs

    return defs()


def test_local_definitions_load_with_every_asset_check_job_and_sensor(monkeypatch, tmp_path):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    defs = load_defs()
    repo = defs.get_repository_def()
    keys = {k.to_user_string() for k in repo.asset_graph.get_all_asset_keys()}
    assert EXPECTED_ASSETS <= keys
    checks = {(k.asset_key.to_user_string(), k.name) for k in repo.asset_graph.asset_check_keys}
    assert ("lake/pageview_files", "accounting_identity") in checks
    assert ("lake/pageview_files", "traffic_classes") in checks
    assert ("warehouse/pageviews_stage", "stage_matches_manifest") in checks
    assert ("warehouse/pageviews", "day_equals_sum_of_hours") in checks
    assert ("warehouse/pageviews_sample", "sample_ratio") in checks
    assert defs.resolve_job_def("pageviews_hourly_job") is not None
    assert defs.resolve_job_def("pageviews_daily_job") is not None
    sensor = defs.resolve_sensor_def("pageviews_automation_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.STOPPED  # the operator turns it on
    assert sensor.minimum_interval_seconds == 60
    schedule = defs.resolve_schedule_def("staging_cleanup_schedule")
    assert schedule.default_status == dg.DefaultScheduleStatus.STOPPED
    assert defs.resolve_job_def("staging_cleanup_job") is not None
    assert isinstance(defs.resources["warehouse"], DuckDBWarehouseResource)
    assert isinstance(defs.resources["object_store"], LocalObjectStoreResource)


def test_every_asset_has_owners_kinds_group_and_partitioned_checks(monkeypatch, tmp_path):
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    defs = load_defs()
    for spec in defs.resolve_all_asset_specs():
        name = spec.key.to_user_string()
        assert spec.kinds and spec.group_name, name
        if name != "landing/pageview_logs":  # observable_source_asset takes no owners
            assert spec.owners == ["team:data-platform"], name
    graph = defs.get_repository_def().asset_graph
    for key in graph.asset_check_keys:
        check_def = defs.resolve_assets_def(key.asset_key)
        spec = check_def.get_spec_for_check_key(key)
        assert spec.partitions_def == check_def.partitions_def, key


def test_hourly_partition_keys_are_hour_labels():
    from bq_platform.defs.partitions import daily_partitions, hourly_partitions

    assert hourly_partitions.get_first_partition_key() == "1995-08-01T00"
    assert daily_partitions.get_first_partition_key() == "1995-08-01"


def test_hourly_assets_run_a_day_per_run():
    from bq_platform.defs.pageviews.assets import pageview_files

    policy = pageview_files.backfill_policy
    assert policy is not None and policy.max_partitions_per_run == 24


def test_prod_resources_have_the_same_keys_and_read_env_at_run_time(monkeypatch):
    local, prod = build_resources("local"), build_resources("prod")
    assert local.keys() == prod.keys()
    assert isinstance(prod["warehouse"], BigQueryWarehouseResource)
    assert isinstance(prod["object_store"], GCSObjectStoreResource)
    monkeypatch.setenv("BQ_PLATFORM_ENV", "prod")
    defs = load_defs()  # no network call while loading
    assert isinstance(defs.resources["warehouse"], BigQueryWarehouseResource)


def test_unknown_environment_is_refused():
    with pytest.raises(ValueError, match="BQ_PLATFORM_ENV"):
        build_resources("staging")


def test_workspace_and_dg_name_the_same_code_location():
    """`dagster dev -w workspace.yaml` (make dev) and `dg` each need the code location's name;
    both load the same module under the same name, so runs and UI links agree."""
    import tomllib
    from pathlib import Path

    import yaml

    root = Path(__file__).resolve().parents[2]
    (entry,) = yaml.safe_load((root / "workspace.yaml").read_text())["load_from"]
    dg_project = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["dg"]["project"]

    assert entry["python_module"]["module_name"] == f"{dg_project['root_module']}.definitions"
    assert entry["python_module"]["location_name"] == dg_project["code_location_name"]
