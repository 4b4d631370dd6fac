"""The pace of table metadata updates (:mod:`bq_platform.lib.publish.table_update_rate`): a
sliding window per table, on a fake clock."""

import pytest

from bq_platform.lib.publish.table_update_rate import TableUpdatePacer


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_sixth_update_within_ten_seconds_waits_for_the_first_to_leave_the_window() -> None:
    t = FakeTime()
    pacer = TableUpdatePacer(clock=lambda: t.now, sleep=t.sleep)
    for _ in range(5):
        assert pacer.wait("pageviews") == 0.0
        t.now += 1.0  # updates at 100, 101, 102, 103, 104
    assert pacer.wait("other_table") == 0.0  # each table has its own window
    assert pacer.wait("pageviews") == pytest.approx(5.0)  # at 105: waits until 110
    assert t.now == pytest.approx(110.0)
    t.now += 20.0  # the window is empty again
    assert pacer.wait("pageviews") == 0.0
    assert t.slept == [pytest.approx(5.0)]


def test_a_pace_needs_a_positive_window() -> None:
    with pytest.raises(ValueError, match="per_window >= 1"):
        TableUpdatePacer(0, 10.0)
