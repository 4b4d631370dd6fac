"""``side_by_side``: the one way the object store's callers send many requests at once."""

import threading
import time

import pytest

from bq_platform.lib.storage.base import side_by_side


def test_results_keep_the_items_order_and_run_on_several_threads() -> None:
    seen: set[int] = set()

    def slow_square(n: int) -> int:
        seen.add(threading.get_ident())
        time.sleep(0.01 * (10 - n))  # later items finish first
        return n * n

    assert side_by_side(slow_square, list(range(10)), threads=4) == [n * n for n in range(10)]
    assert len(seen) > 1


def test_one_thread_or_one_item_runs_inline_and_errors_propagate() -> None:
    caller = threading.get_ident()
    assert side_by_side(lambda n: threading.get_ident(), [1, 2], threads=1) == [caller, caller]
    assert side_by_side(lambda n: threading.get_ident(), [1], threads=8) == [caller]

    def fail(n: int) -> int:
        raise ValueError(f"item {n}")

    with pytest.raises(ValueError, match="item"):
        side_by_side(fail, [1, 2, 3], threads=3)
