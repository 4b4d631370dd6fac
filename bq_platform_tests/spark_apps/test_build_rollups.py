"""The daily rollups' main file (``spark_apps/build_rollups.py``): its arguments, and the
content it refuses before Spark starts (the build under ``spark-submit`` through Pipes is
``defs/warehouse/test_rollups.py``'s)."""

import datetime as dt
import json
from pathlib import Path

import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.daily_build.rollup_files import rollup_inputs
from bq_platform.lib.daily_build.rollups import ROLLUP_VERSION
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.spark_apps import build_rollups as app

DAY = dt.date(1995, 8, 1)
HOURS = [dt.datetime(1995, 8, 1, h, tzinfo=dt.UTC) for h in (4, 5)]


@pytest.fixture
def lake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[dt.datetime, HourManifest]:
    """Two built hours in the local lake of ``BQ_PLATFORM_HOME=<tmp>``."""
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.delenv("BQ_PLATFORM_ENV", raising=False)
    store = LocalObjectStore(str(tmp_path / "lake"))
    manifests = {}
    for hour in HOURS:
        label = layout.hour_label(hour)
        manifest = HourManifest(
            hour=hour,
            attempt_id="run1-0",
            fingerprint=f"{hour.hour:02d}" * 32,
            input_fingerprint="ab" * 32,
            full_files=(f"staging/pageviews/attempt=run1-0/full/hour={label}/part-0.parquet",),
            sample_files=(),
            deadletter_files=(),
            rows=1,
            sample_rows=0,
            counts=(SiteHourCounts(site="epa.gov", hour=hour, source_lines=1, pageviews=1),),
        )
        store.write_text(layout.hour_manifest_key(hour), manifest.to_json())
        manifests[hour] = manifest
    return manifests


def test_arguments_accept_pipes_parameters_and_need_hours_and_fingerprint(capsys) -> None:
    args = app.parse_args(
        ["1995-08-01", "--hours", "1995-08-01T04", "--fingerprint", "f", "--dagster-pipes-context"]
        + ["x"]
    )
    assert (args.day, args.hours, args.fingerprint, args.error_file) == (
        "1995-08-01",
        "1995-08-01T04",
        "f",
        None,
    )
    with pytest.raises(SystemExit) as exited:
        app.parse_args(["1995-08-01", "--hours", "1995-08-01T04"])
    assert exited.value.code == 2
    assert "--fingerprint" in capsys.readouterr().err


def test_the_named_hours_resolve_to_the_launchers_content(lake, tmp_path: Path) -> None:
    want = rollup_inputs(DAY, lake, ROLLUP_VERSION)
    store = LocalObjectStore(str(tmp_path / "lake"))
    found = app.resolve_inputs(store, "1995-08-01", ",".join(want.hours), want.fingerprint)
    assert found == want


def test_other_content_exits_2_before_spark_naming_both_and_the_fix(
    lake, tmp_path: Path, caplog
) -> None:
    error_file = tmp_path / "error.json"
    want = rollup_inputs(DAY, lake, ROLLUP_VERSION)
    hours = "1995-08-01T04,1995-08-01T05"
    status = app.main(["1995-08-01", "--hours", hours, "--fingerprint", "0" * 64])
    assert status == 2
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    message = record.getMessage()
    assert want.fingerprint[:12] in message and "0" * 12 in message
    assert "publish the day again" in message
    app.main(
        ["1995-08-01", "--hours", hours, "--fingerprint", "0" * 64, "--error-file"]
        + [str(error_file)]
    )
    assert json.loads(error_file.read_text())["error"] == "ValueError"


def test_an_hour_never_built_exits_2_naming_it(lake, caplog) -> None:
    status = app.main(
        ["1995-08-01", "--hours", "1995-08-01T04,1995-08-01T06", "--fingerprint", "0" * 64]
    )
    assert status == 2
    (record,) = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "hours without a manifest: 1995-08-01 06:00:00+00:00" in record.getMessage()
