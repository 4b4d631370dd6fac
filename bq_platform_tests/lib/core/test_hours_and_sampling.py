"""UTC hour arithmetic and the binomial sample-ratio bound."""

import datetime as dt

import pytest

from bq_platform.lib.core.hours import (
    day_hours,
    days_between,
    hour_id,
    hour_label,
    hours_between,
    parse_hour,
    parse_hour_label,
    partition_day,
)
from bq_platform.lib.quality.sampling import sample_ratio

UTC = dt.UTC


def test_days_between_is_half_open():
    first = dt.date(1995, 8, 30)
    assert days_between(first, dt.date(1995, 9, 2)) == [
        first,
        dt.date(1995, 8, 31),
        dt.date(1995, 9, 1),
    ]
    assert days_between(first, first) == []
    assert days_between(first, dt.date(1995, 8, 1)) == []


def test_hours_between_is_half_open_and_utc():
    start = dt.datetime(1995, 8, 1, 22, tzinfo=UTC)
    hours = hours_between(start, start + dt.timedelta(hours=3))
    assert [h.hour for h in hours] == [22, 23, 0]
    edt = dt.timezone(-dt.timedelta(hours=4))
    assert hours_between(
        dt.datetime(1995, 8, 1, 0, tzinfo=edt), dt.datetime(1995, 8, 1, 1, tzinfo=edt)
    ) == [dt.datetime(1995, 8, 1, 4, tzinfo=UTC)]
    with pytest.raises(ValueError):
        hours_between(dt.datetime(1995, 8, 1), dt.datetime(1995, 8, 2))
    with pytest.raises(ValueError):
        hours_between(start.replace(minute=5), start + dt.timedelta(hours=1))


def test_day_hours_and_partition_keys_round_trip():
    hours = day_hours(dt.date(1995, 8, 1))
    assert len(hours) == 24 and hours[0].hour == 0 and hours[-1].hour == 23
    assert hour_label(hours[4]) == "1995-08-01T04"
    assert parse_hour_label("1995-08-01T04") == hours[4]
    assert hour_id(hours[4]) == "1995080104"


def test_parse_hour_label_round_trips_every_hour_and_refuses_near_misses():
    # Parsed by slices, not strptime (issue 9): it must agree with strptime on every hour of a
    # leap year and refuse what strptime refused, with the one message.
    start = dt.datetime(1996, 1, 1, tzinfo=UTC)
    for hour in hours_between(start, start + dt.timedelta(days=366)):
        label = hour_label(hour)
        assert parse_hour_label(label) == hour
        assert parse_hour_label(label) == dt.datetime.strptime(label, "%Y-%m-%dT%H").replace(
            tzinfo=UTC
        )
    near_misses = (
        "1995-13-01T04",  # month 13
        "1995-02-30T04",  # no such day
        "1995-08-01T24",  # hour 24
        "1995-08-01T04\n",  # what "$" would let through
        "\u0661\u0669\u0669\u0665-08-01T04",  # Unicode digits: \d without re.ASCII
        "1995-08-01T4",
        " 1995-08-01T04",
    )
    for bad in near_misses:
        with pytest.raises(ValueError, match=r"not an hour label \(YYYY-MM-DDTHH\)"):
            parse_hour_label(bad)


def test_parse_hour_accepts_the_label_and_the_old_partition_spelling():
    want = dt.datetime(1995, 8, 1, 4, tzinfo=UTC)
    assert parse_hour("1995-08-01T04") == want
    assert parse_hour("1995-08-01-04:00") == want  # BQ_PLATFORM_FIRST_HOUR before issue 8
    for bad in ("1995-08-01-04:30", "1995-08-01 04", "19950801"):
        with pytest.raises(ValueError, match="YYYY-MM-DDTHH"):
            parse_hour(bad)


def test_hour_label_refuses_naive_or_partial_hours():
    with pytest.raises(ValueError):
        hour_label(dt.datetime(1995, 8, 1, 4))
    with pytest.raises(ValueError):
        hour_id(dt.datetime(1995, 8, 1, 4, 30, tzinfo=UTC))


def test_sample_ratio_passes_near_expected_and_fails_far_away():
    ok = sample_ratio(20_000, 100)
    assert ok.passed and not ok.skipped and ok.expected == pytest.approx(100)
    assert not sample_ratio(20_000, 200).passed
    assert not sample_ratio(20_000, 20).passed


def test_sample_ratio_skips_small_inputs_with_a_note():
    small = sample_ratio(500, 0)
    assert small.skipped and small.passed and "too few" in small.describe()


def test_sample_ratio_rejects_impossible_counts():
    with pytest.raises(ValueError):
        sample_ratio(10, 11)


@pytest.mark.parametrize(
    ("key", "day"),
    [
        ("1995-08-01T23", dt.date(1995, 8, 1)),
        ("1995-08-02", dt.date(1995, 8, 2)),
        (None, None),
        ("", None),
    ],
)
def test_partition_day_of_hourly_and_daily_keys(key, day):
    assert partition_day(key) == day


def test_partition_day_refuses_other_keys():
    with pytest.raises(ValueError):
        partition_day("1995-08-01-04:00")
