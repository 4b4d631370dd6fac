"""What ``bq-platform run`` prints for each blocking failure: one line saying where (site, hour
or day, file or table) and what to run, taken from the check's description or the step's
error, printed once."""

import datetime as dt

import dagster as dg
import pytest

from bq_platform.cli.runner import PipelineRunner
from bq_platform.defs.check_events import PartitionCheck, report
from bq_platform.defs.errors import fail_fast
from bq_platform.defs.pageviews.assets import (
    accounting_check,
    rejected_share_check,
    traffic_check,
)
from bq_platform.defs.warehouse.assets import gate_fix
from bq_platform.lib.core import layout
from bq_platform.lib.core.accounting import SiteHourCounts
from bq_platform.lib.core.hours import HOURLY_PARTITION_FMT
from bq_platform.lib.core.manifest import HourManifest, LandingError
from bq_platform.lib.core.reporting import CheckFailure, capped, summary_table
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.landing.provenance import landed_sources
from bq_platform.lib.publish.protocol import REJECTED_SHARE_PROBLEM, DayCompleteness
from bq_platform.lib.publish.quota import JobBudget, QuotaBudgetExceededError
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.base import SchemaMismatchError

SITE = "ksc.nasa.gov"
H4 = dt.datetime(1995, 8, 1, 4, tzinfo=dt.UTC)
DAY = H4.date()
HOURS = dg.HourlyPartitionsDefinition(
    start_date="1995-08-01T00", timezone="UTC", fmt=HOURLY_PARTITION_FMT
)
LINE = b'a - - [01/Aug/1995:04:00:01 +0000] "GET / HTTP/1.0" 200 1\n'


def _manifest(**fields) -> HourManifest:
    counts = fields.pop("counts", (SiteHourCounts(SITE, H4, source_lines=3, pageviews=3),))
    return HourManifest(
        hour=H4,
        attempt_id="a",
        fingerprint="f" * 64,
        input_fingerprint="i" * 64,
        full_files=(),
        sample_files=(),
        deadletter_files=(),
        rows=0,
        sample_rows=0,
        counts=counts,
        **fields,
    )


def _landed(tmp_path, name: str = "access.log") -> tuple[LocalObjectStore, str]:
    """A store where ``name`` of SITE landed one file in H4; its data key."""
    store = LocalObjectStore(tmp_path / "lake")
    path = tmp_path / name
    path.write_bytes(LINE * 3)
    (landed,) = land_file(store, SITE, path)
    return store, landed.manifest.data_key


def test_the_source_of_a_landed_file_is_found_with_or_without_its_manifest(tmp_path):
    store, key = _landed(tmp_path, "nasa-slice.log")
    stray = f"{layout.landing_hour_prefix(SITE, H4)}/from-another-producer.log.gz"
    store.write_bytes(stray, b"")
    assert landed_sources(store, [key, stray]) == {key: "nasa-slice.log"}  # its manifest
    (tmp_path / "lake" / layout.landed_manifest_key(key)).unlink()
    assert landed_sources(store, [key, stray]) == {key: "nasa-slice.log"}  # the registry


def test_an_orphan_file_is_named_with_its_site_hour_and_the_land_command(tmp_path):
    store, key = _landed(tmp_path, "nasa-slice.log")
    (tmp_path / "lake" / layout.landed_manifest_key(key)).unlink()
    stray = f"{layout.landing_hour_prefix(SITE, H4)}/from-another-producer.log.gz"

    check = accounting_check(_manifest(orphan_files=(key, stray)), store)

    assert not check.passed and check.partition == "1995-08-01T04"
    assert check.description.count(" Fix: ") == 2  # one per file
    assert f"{SITE} 1995-08-01T04: landed file {store.uri(key)} has no manifest" in (
        check.description
    )
    assert f"bq-platform land --site {SITE} <folder>/nasa-slice.log" in check.description
    assert f"{store.uri(stray)} has no manifest" in check.description
    assert f"bq-platform land --site {SITE} <its log file>" in check.description  # unknown


def test_a_file_that_disagrees_and_an_unbalanced_site_say_what_to_run(tmp_path):
    store, key = _landed(tmp_path)
    mismatch = {"data_key": key, "manifest_lines": 3, "lines_read": 2}
    unbalanced = SiteHourCounts("epa.gov", H4, source_lines=5, pageviews=3)

    check = accounting_check(_manifest(file_mismatches=(mismatch,), counts=(unbalanced,)), store)

    assert not check.passed
    assert (
        "epa.gov 1995-08-01T04: 5 source lines but 3 accounted for" in check.description
        and "bq-platform run --start 1995-08-01T04 --end 1995-08-01T04" in check.description
    )
    assert f"{SITE} 1995-08-01T04: landed file {store.uri(key)} has 2 lines" in check.description
    assert f"bq-platform land --site {SITE} <folder>/access.log" in check.description


def test_a_rejected_share_above_the_limit_says_where_the_dead_letters_are():
    counts = SiteHourCounts(SITE, H4, source_lines=10, pageviews=2, rejected=8)
    check = rejected_share_check(_manifest(counts=(counts,)), 0.05)
    assert check.severity == dg.AssetCheckSeverity.ERROR
    assert check.description.startswith(f"{SITE} 1995-08-01T04: 80.0% rejected")
    assert "bq-platform deadletters --start 1995-08-01T04 --end 1995-08-01T04" in (
        check.description
    )
    assert "bq-platform run --start 1995-08-01T04 --end 1995-08-01T04 --allow-rejected" in (
        check.description
    )


def test_the_completeness_gate_names_its_fixes_and_the_flags_that_publish_anyway():
    reason = f"{REJECTED_SHARE_PROBLEM} 5.0%: {SITE} 1995-08-01T04: 80.0% rejected"
    gate = DayCompleteness(DAY, {}, {H4: [reason]})
    fix = gate_fix(gate)
    assert "bq-platform run --start 1995-08-01T00 --end 1995-08-01T23 --allow-incomplete" in fix
    assert "bq-platform run --start 1995-08-01T00 --end 1995-08-01T23 --allow-rejected" in fix
    assert "bq-platform deadletters --start 1995-08-01T04 --end 1995-08-01T04" in fix
    assert "--allow-rejected" not in gate_fix(DayCompleteness(DAY, {}, {H4: ["not built"]}))


def _job(failure: Exception | None, bad_hours: int = 1) -> dg.JobDefinition:
    """One hourly asset with a blocking check that fails on ``bad_hours`` hours (description:
    the hour and a fix), or that raises ``failure`` through ``fail_fast``."""

    @dg.asset(
        partitions_def=HOURS,
        backfill_policy=dg.BackfillPolicy.single_run(),
        check_specs=[
            dg.AssetCheckSpec("complete", asset="checked", partitions_def=HOURS, blocking=True)
        ],
    )
    @fail_fast
    def checked(context: dg.AssetExecutionContext):
        if failure is not None:
            raise failure
        checks = [
            PartitionCheck("complete", key, passed=i >= bad_hours, description=f"{key}: fix it")
            for i, key in enumerate(context.partition_keys)
        ]
        return report(context, dg.MaterializeResult(), checks)

    return dg.Definitions(assets=[checked]).resolve_implicit_global_asset_job_def()


def _run(job: dg.JobDefinition, instance: dg.DagsterInstance, hours: int = 8):
    keys = HOURS.get_partition_keys()[:hours]
    return job.execute_in_process(
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
        raise_on_error=False,
    )


def _runner(tmp_path, lines: list[str]) -> PipelineRunner:
    from bq_platform_tests.cli.test_runner import _AuditRows

    return PipelineRunner(
        load_definitions=dg.Definitions,
        store=LocalObjectStore(tmp_path / "lake"),
        warehouse=_AuditRows([SITE]),  # type: ignore[arg-type]
        visitor_key="k",
        echo=lines.append,
    )


def test_a_failed_blocking_check_prints_its_description_once(tmp_path):
    lines: list[str] = []
    runner = _runner(tmp_path, lines)
    with dg.instance_for_test() as instance:
        result = _run(_job(None), instance)
        again = _run(_job(None), instance)

    message = runner._failure(result)
    assert message == "checked: checked:complete: 1995-08-01T00: fix it"
    assert "DagsterAssetCheckFailedError" not in message
    assert runner._failure(again) == "checked: the same failure as above"
    runner._record_checks(result, DAY)
    runner.print_summary([DAY])
    assert "FAILED (1 of 8)" in "\n".join(lines)
    assert not any("fix it" in line for line in lines)  # printed with the failure already


def test_many_failed_checks_print_five_then_how_many_more(tmp_path):
    runner = _runner(tmp_path, [])
    with dg.instance_for_test() as instance:
        result = _run(_job(None, bad_hours=8), instance)

    head, *shown = runner._failure(result).split("\n  ")
    assert head == "checked:"
    assert shown[:5] == [f"checked:complete: 1995-08-01T0{h}: fix it" for h in range(5)]
    assert shown[5].startswith("and 3 more") and len(shown) == 6


def test_a_failed_check_not_printed_with_a_failure_is_detailed_in_the_summary():
    failure = CheckFailure("lake/x", "complete", "1995-08-01T04", "ksc 04: land it", False)
    lines = summary_table({DAY: []}, {DAY: [("lake/x", "complete", False)]}, {DAY: [failure]})
    assert lines[-2].endswith("check lake/x:complete: FAILED (1 of 1)")
    assert lines[-1].strip() == "lake/x:complete: ksc 04: land it"
    assert capped(["a", "a", "b"], limit=1) == [
        "a",
        "and 1 more (bq-platform -v run, or the Dagster UI)",
    ]


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (
            LandingError("landed file /lake/x.log.gz: the file is missing; land it again: cmd"),
            "checked: LandingError: landed file /lake/x.log.gz: the file is missing; land it",
        ),
        (
            SchemaMismatchError("table pageviews does not match its spec: x; migrate it"),
            "checked: SchemaMismatchError: table pageviews does not match its spec",
        ),
        (None, "checked: QuotaBudgetExceededError: job budget for table 'pageviews' is spent"),
        (
            dg.Failure("1995-08-01: 3 of 24 hours are not complete. Fix: run"),
            "checked: 1995-08-01: 3 of 24 hours are not complete. Fix: run",
        ),
    ],
)
def test_an_error_of_a_step_is_its_message_once(tmp_path, error, says):
    if error is None:
        with pytest.raises(QuotaBudgetExceededError) as raised:
            JobBudget(per_table_per_day=1).check_used("pageviews", DAY, 1)
        error = raised.value
        assert "BQ_PLATFORM_JOB_BUDGET" in str(error)  # what to do
    runner = _runner(tmp_path, [])
    with dg.instance_for_test() as instance:
        result = _run(_job(error), instance)
    message = runner._failure(result)
    assert message.startswith(says), message
    assert "Traceback" not in message and message.count(says) == 1


def test_pages_without_a_traffic_class_fail_their_check_naming_the_site_and_fix():
    split = SiteHourCounts(
        SITE, H4, source_lines=3, pageviews=3, human_pageviews=1, bot_pageviews=2
    )
    lost = SiteHourCounts("epa.gov", H4, source_lines=3, pageviews=3, human_pageviews=2)

    assert traffic_check(_manifest(counts=(split,))).passed
    check = traffic_check(_manifest(counts=(split, lost)))

    assert not check.passed and check.partition == "1995-08-01T04"
    assert "epa.gov 1995-08-01T04: 3 pageviews but 2 human + 0 bot" in check.description
    assert "Fix: build the hour again" in check.description
    assert (check.metadata["expected"], check.metadata["actual"]) == (6, 5)
