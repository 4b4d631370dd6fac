"""Traffic classes, heuristic reasons, thresholds and the classifier version."""

import importlib.metadata

import pytest

from bq_platform.lib.traffic import version
from bq_platform.lib.traffic.classes import BOT, BOT_CLASSES, HUMAN, SUSPECTED_BOT, TRAFFIC_CLASSES
from bq_platform.lib.traffic.heuristics import (
    HEURISTICS,
    REASON_PREFIX,
    empty_user_agent_reason,
    page_rate_reason,
    robots_txt_reason,
)
from bq_platform.lib.traffic.thresholds import ClassificationThresholds
from bq_platform.lib.traffic.version import DISTRIBUTIONS, classifier_version


def test_traffic_classes_are_spelled_once():
    assert TRAFFIC_CLASSES == (HUMAN, BOT, SUSPECTED_BOT) == ("human", "bot", "suspected_bot")
    assert BOT_CLASSES == set(TRAFFIC_CLASSES) - {HUMAN}


def test_heuristic_reasons():
    assert robots_txt_reason() == "heuristic:robots_txt"
    assert page_rate_reason(720) == "heuristic:page_rate>720/h"
    assert empty_user_agent_reason() == "heuristic:empty_user_agent"
    reasons = (robots_txt_reason(), page_rate_reason(1), empty_user_agent_reason())
    assert tuple(r.removeprefix(REASON_PREFIX).split(">")[0] for r in reasons) == HEURISTICS


@pytest.mark.parametrize("threshold", [0, -5, True, 1.5, "120", None])
def test_page_rate_reason_needs_a_positive_integer(threshold):
    with pytest.raises(ValueError, match="positive integer"):
        page_rate_reason(threshold)


def test_thresholds_name_the_heuristics_that_run_in_order():
    assert ClassificationThresholds().heuristic_reasons() == (
        "heuristic:robots_txt",
        "heuristic:page_rate>720/h",
        "heuristic:empty_user_agent",
    )
    assert ClassificationThresholds(max_pages_per_visitor_hour=30).heuristic_reasons()[1] == (
        "heuristic:page_rate>30/h"
    )
    off = ClassificationThresholds(None, robots_txt_marks_visitor=False)
    assert off.heuristic_reasons() == ("heuristic:empty_user_agent",)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_pages_per_visitor_hour": 0},
        {"max_pages_per_visitor_hour": 2.5},
        {"robots_txt_marks_visitor": "yes"},
        {"empty_user_agent_marks_line": 1},
    ],
)
def test_invalid_thresholds_are_refused(kwargs):
    with pytest.raises(ValueError, match="traffic classification: .* fix the configuration"):
        ClassificationThresholds(**kwargs)


def test_classifier_version_names_the_installed_rules_and_the_thresholds():
    installed = ";".join(f"{d}=={importlib.metadata.version(d)}" for d in DISTRIBUTIONS)
    engine = f"ua-parser-rs=={importlib.metadata.version('ua-parser-rs')}"
    assert classifier_version(ClassificationThresholds()) == (
        f"{installed};resolver=regex;{engine};heuristics=heuristic:robots_txt,"
        "heuristic:page_rate>720/h,heuristic:empty_user_agent"
    )
    assert classifier_version(ClassificationThresholds(None, False, False)) == (
        f"{installed};resolver=regex;{engine};heuristics=none"
    )


def test_classifier_version_changes_with_any_threshold():
    variants = [
        ClassificationThresholds(),
        ClassificationThresholds(max_pages_per_visitor_hour=721),
        ClassificationThresholds(max_pages_per_visitor_hour=None),
        ClassificationThresholds(robots_txt_marks_visitor=False),
        ClassificationThresholds(empty_user_agent_marks_line=False),
    ]
    assert len({classifier_version(v) for v in variants}) == len(variants)


@pytest.mark.parametrize("distribution", [*DISTRIBUTIONS, "ua-parser-rs"])
def test_classifier_version_changes_with_an_upgrade(monkeypatch, distribution):
    before = classifier_version(ClassificationThresholds())
    installed = version.installed_version
    monkeypatch.setattr(
        version,
        "installed_version",
        lambda name: "9999.1" if name == distribution else installed(name),
    )
    after = classifier_version(ClassificationThresholds())
    assert after != before
    assert f"{distribution}==9999.1;" in after


def test_classifier_version_names_the_resolver(monkeypatch):
    monkeypatch.setattr(version, "resolver_name", lambda: "basic")
    assert ";resolver=basic;heuristics=" in classifier_version(ClassificationThresholds())
