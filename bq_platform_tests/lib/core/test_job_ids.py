"""Job-ID rules: deterministic, content-addressed, valid for BigQuery."""

import re

import pytest

from bq_platform.lib.core.job_ids import (
    day_fingerprint,
    hour_fingerprint,
    input_fingerprint,
    job_id,
    job_labels,
    label_value,
)

FP = "ab" * 32


def test_job_id_is_deterministic_and_names_everything():
    a = job_id("copy", "pageviews", "19950801", FP, 0)
    assert a == job_id("copy", "pageviews", "19950801", FP, 0)
    assert a == f"bqp_copy_pageviews_19950801_{FP[:20]}_g0"
    assert re.fullmatch(r"[A-Za-z0-9_\-]{1,1024}", a)


@pytest.mark.parametrize(
    "change",
    [
        {"kind": "load"},
        {"destination": "pageviews_sample"},
        {"partition": "19950802"},
        {"fingerprint": "cd" * 32},
        {"generation": 1},
    ],
)
def test_every_part_changes_the_id(change):
    base = {
        "kind": "copy",
        "destination": "pageviews",
        "partition": "19950801",
        "fingerprint": FP,
        "generation": 0,
    }
    assert job_id(**base) != job_id(**{**base, **change})


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "query"},
        {"destination": "pageviews$19950801"},
        {"partition": "1995-08-01"},
        {"fingerprint": "xyz"},
        {"generation": -1},
    ],
)
def test_malformed_parts_are_refused(bad):
    base = {
        "kind": "copy",
        "destination": "pageviews",
        "partition": "19950801",
        "fingerprint": FP,
        "generation": 0,
    }
    with pytest.raises(ValueError):
        job_id(**{**base, **bad})


def test_input_fingerprint_ignores_order_and_repeated_deliveries():
    a = input_fingerprint([("s", "1"), ("s", "2")])
    assert a == input_fingerprint([("s", "2"), ("s", "1"), ("s", "2")])
    assert a != input_fingerprint([("s", "1")])
    assert a != input_fingerprint([("t", "1"), ("s", "2")])


def test_hour_fingerprint_depends_on_content_code_key_rate_and_classifier():
    base = hour_fingerprint("in", "1", "key", 200, "c")
    assert base == hour_fingerprint("in", "1", "key", 200, "c")
    assert (
        len(
            {
                base,
                hour_fingerprint("in2", "1", "key", 200, "c"),
                hour_fingerprint("in", "2", "key", 200, "c"),
                hour_fingerprint("in", "1", "key2", 200, "c"),
                hour_fingerprint("in", "1", "key", 100, "c"),
                hour_fingerprint("in", "1", "key", 200, "c2"),
            }
        )
        == 6
    )


def test_day_fingerprint_changes_when_one_hour_changes():
    hours = {f"1995-08-01T{h:02d}": f"{h:064x}" for h in range(24)}
    changed = {**hours, "1995-08-01T05": "f" * 64}
    assert day_fingerprint(hours) == day_fingerprint(dict(reversed(list(hours.items()))))
    assert day_fingerprint(hours) != day_fingerprint(changed)


def test_labels_follow_bigquery_rules():
    labels = job_labels("warehouse/Pageviews", "1995-08-01", "RUN-" + "x" * 80, FP)
    for key, value in labels.items():
        assert re.fullmatch(r"[a-z0-9_\-]{1,63}", key)
        assert re.fullmatch(r"[a-z0-9_\-]{0,63}", value)
    assert label_value("A$b") == "a_b"
