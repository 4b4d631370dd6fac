"""Settings read from the environment (defs/resources.py)."""

import pytest

from bq_platform.defs.resources import build_resources
from bq_platform.lib.hourly_build.read import DEFAULT_LINES_PER_PASS
from bq_platform.lib.traffic.thresholds import ClassificationThresholds


def test_lines_per_pass_from_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.delenv("BQ_PLATFORM_LINES_PER_PASS", raising=False)
    assert build_resources("local")["settings"].lines_per_pass == DEFAULT_LINES_PER_PASS
    monkeypatch.setenv("BQ_PLATFORM_LINES_PER_PASS", "1500000")
    assert build_resources("local")["settings"].lines_per_pass == 1_500_000


@pytest.mark.parametrize("value", ["0", "-5", "4M", "1.5"])
def test_a_bad_whole_number_names_its_variable(monkeypatch, tmp_path, value: str) -> None:
    monkeypatch.setenv("BQ_PLATFORM_HOME", str(tmp_path))
    monkeypatch.setenv("BQ_PLATFORM_LINES_PER_PASS", value)
    with pytest.raises(ValueError, match="BQ_PLATFORM_LINES_PER_PASS must be a positive whole"):
        build_resources("local")


def test_the_page_rate_threshold_is_a_setting_of_the_pipeline(monkeypatch) -> None:
    monkeypatch.setenv("BQ_PLATFORM_MAX_PAGES_PER_VISITOR_HOUR", "40")
    pipeline = build_resources("local")["settings"]
    assert pipeline.traffic_thresholds() == ClassificationThresholds(max_pages_per_visitor_hour=40)
