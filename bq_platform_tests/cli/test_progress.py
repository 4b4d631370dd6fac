"""The quiet output's progress lines (``cli/progress.py``) when the event log cannot be read:
each asset's line still comes once, from the run's own events."""

import types

import dagster as dg

from bq_platform.cli.progress import RunProgress, step_line
from bq_platform.lib.core.reporting import STEP_TOTALS


class UnreadableInstance:
    """An instance whose event log fails every read (a locked or missing store)."""

    def __init__(self) -> None:
        self.reads = 0

    def get_records_for_run(self, run_id, cursor=None):
        self.reads += 1
        raise OSError("database is locked")


def materialized(asset: str, metadata: dict) -> types.SimpleNamespace:
    """A run event as ``ExecuteInProcessResult.all_events`` holds it."""
    materialization = dg.AssetMaterialization(asset_key=asset, metadata=metadata)
    return types.SimpleNamespace(
        is_step_materialization=True,
        step_materialization_data=types.SimpleNamespace(materialization=materialization),
    )


def test_the_steps_come_once_from_the_result_when_no_poll_could_read():
    instance = UnreadableInstance()
    lines: list[str] = []
    progress = RunProgress(instance, "run-1", "1995-08-01", lines.append, poll_seconds=0.01)
    progress.start()
    totals = {STEP_TOTALS: dg.MetadataValue.json({"hours": 24, "rows": 11685, "seconds": 1.5})}
    result = types.SimpleNamespace(
        all_events=[
            materialized("lake/pageview_files", totals),
            materialized("lake/pageview_files", totals),  # the next hour of the same step
            types.SimpleNamespace(is_step_materialization=False),
            materialized("warehouse/pageviews", {"rows": 11685, "job_action": "submitted"}),
        ]
    )

    progress.done(result)

    assert instance.reads >= 1  # it tried, and the failures cost nothing
    assert lines == [
        "1995-08-01:   lake/pageview_files: 24 hours, 11,685 rows, 1.5 s",
        "1995-08-01:   warehouse/pageviews: 11,685 rows, job submitted",
    ]


def test_a_step_line_shows_human_and_bot_pages_apart():
    metadata = {"pageviews": 8100, "human_pageviews": 4727, "bot_pageviews": 3373}
    assert step_line({STEP_TOTALS: {"hours": 2, **metadata}}) == (
        "2 hours, 8,100 pageviews (human 4,727, bot 3,373)"
    )
    assert step_line({"pageviews": 8100}) == "8,100 pageviews"


def test_a_step_line_shows_the_counts_it_has_in_a_fixed_order():
    assert step_line({"rejected": 2, "source_lines": 33996, "hours": 24, "other": 5}) == (
        "24 hours, 33,996 source lines, 2 rejected"
    )
    assert step_line({"job_action": "skipped", "seconds": 0.3}) == "job skipped, 0.3 s"
