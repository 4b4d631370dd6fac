"""How ``bq-platform run`` groups due days into hourly runs (batches of consecutive days)."""

import datetime as dt

from bq_platform.lib.hours import day_hours
from bq_platform.runner import batches

D1, D2, D3, D5 = (dt.date(1995, 8, d) for d in (1, 2, 3, 5))


def test_consecutive_days_share_a_batch_up_to_the_limit():
    todo = {d: day_hours(d) for d in (D3, D1, D2, D5)}
    assert [sorted(b) for b in batches(todo)] == [[D1, D2, D3], [D5]]  # D4 is not due: a gap
    assert [sorted(b) for b in batches(todo, max_days=2)] == [[D1, D2], [D3], [D5]]
    (first, *_) = batches(todo)
    assert first[D2] == day_hours(D2)


def test_partial_days_join_only_when_their_hours_touch():
    evening = day_hours(D1)[20:]
    morning = day_hours(D2)[:4]
    assert [sorted(b) for b in batches({D1: evening, D2: morning})] == [[D1, D2]]
    late_morning = day_hours(D2)[2:6]
    assert [sorted(b) for b in batches({D1: evening, D2: late_morning})] == [[D1], [D2]]
    assert batches({}) == []
