"""BigQuery's documented rules (:mod:`bq_platform.lib.warehouse.rules`): what they refuse, with
a message naming the rule and its source, and what they let through (our own specs and jobs,
and every limit itself). The refused cases are :data:`rule_cases.CASES`.
"""

import datetime as dt

import pytest

from bq_platform.lib.warehouse import job_rules, rules
from bq_platform.lib.warehouse.ledger import publish_ledger_spec
from bq_platform.lib.warehouse.rules import RuleViolation
from bq_platform.lib.warehouse.schema import (
    PAGEVIEW_COLUMNS,
    Column,
    TableSpec,
    audit_spec,
    pageviews_sample_spec,
    pageviews_spec,
    stage_spec,
)
from bq_platform_tests.lib.warehouse.rule_cases import (
    CASES,
    DAY,
    FLAT,
    HOUR,
    LABELS,
    PAGEVIEWS,
    STAGE,
    Case,
    check,
    copy_job,
    load_job,
    spec,
)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rule_refuses_what_bigquery_refuses(case: Case) -> None:
    with pytest.raises(RuleViolation) as err:
        check(case)
    message = str(err.value)
    assert message.startswith("BigQuery would refuse ")
    assert case.words in message
    assert "(source: " in message  # every rule names where it comes from


def test_case_ids_are_unique() -> None:
    assert len({c.id for c in CASES}) == len(CASES)


# ----------------------------------------------------------------------- what passes


@pytest.mark.parametrize(
    "table",
    [
        pageviews_spec(),
        pageviews_spec(require_partition_filter=False),
        pageviews_sample_spec(),
        stage_spec("full", HOUR),
        stage_spec("sample", HOUR),
        audit_spec(),
        publish_ledger_spec(),
        FLAT,
    ],
    ids=lambda t: t.name,
)
def test_our_table_specs_pass(table: TableSpec) -> None:
    assert rules.check_table_spec(table) is table


def test_limits_themselves_pass() -> None:
    edge = spec(
        name="t" * 1024,
        columns=PAGEVIEW_COLUMNS + (Column("c" * 300, "STRING"),),
        clustering=("site", "page_path", "status", "visitor_id"),
        labels={f"k{i}": "v" for i in range(62)} | {"k" * 63: "v" * 63, "empty": ""},
    )
    assert len(edge.labels) == 64
    assert rules.check_table_spec(edge) is edge
    many = spec(FLAT, columns=tuple(Column(f"c{i}", "STRING") for i in range(10_000)))
    assert rules.check_table_spec(many) is many

    job_id = ("Az09_-" * 171)[:1024]
    assert rules.check_job_id(job_id) == job_id
    uris = tuple(f"gs://b/p/part-{i}.parquet" for i in range(10_000))
    check(
        Case("load-10000-uris", "", job=load_job(job_id=job_id, source_uris=uris), tables=(STAGE,))
    )
    sources = tuple(f"pageviews_stage_{i}$19950801" for i in range(1200))
    job_rules.check_copy_job(
        "copy_g0",
        "pageviews$19950801",
        sources,
        {name.split("$")[0]: spec(STAGE, name=name.split("$")[0]) for name in sources},
        PAGEVIEWS,
        "WRITE_TRUNCATE",
        LABELS,
    )


def test_the_daily_publish_passes() -> None:
    check(Case("load", "", job=load_job(), tables=(STAGE,)))
    check(
        Case(
            "load-day",
            "",
            job=load_job(destination="pageviews$19950801", spec=PAGEVIEWS),
            tables=(PAGEVIEWS,),
        )
    )
    hours = [stage_spec("full", HOUR.replace(hour=h)) for h in range(24)]
    copy = copy_job(sources=tuple(f"{h.name}$19950801" for h in hours))
    check(Case("copy-day", "", job=copy, tables=(*hours, PAGEVIEWS)))
    sample_hours = [stage_spec("sample", HOUR.replace(hour=h)) for h in range(24)]
    sample_copy = copy_job(
        sources=tuple(f"{h.name}$19950801" for h in sample_hours),
        destination="pageviews_sample$19950801",
    )
    check(Case("copy-sample", "", job=sample_copy, tables=(*sample_hours, pageviews_sample_spec())))


def test_split_destination() -> None:
    assert rules.split_destination("pageviews$19950801") == ("pageviews", DAY)
    assert rules.split_destination("pageviews") == ("pageviews", None)
    with pytest.raises(RuleViolation, match="table names"):
        rules.split_destination("pageviews$")


def test_partition_rows_of_one_day_only() -> None:
    job_rules.check_partition_rows("pageviews$19950801", DAY, [DAY, DAY])
    with pytest.raises(RuleViolation) as err:
        job_rules.check_partition_rows(
            "pageviews$19950801", DAY, [DAY, DAY + dt.timedelta(1), None]
        )
    message = str(err.value)
    assert (
        "Some rows belong to different partitions rather than destination partition 19950801"
        in message
    )
    assert "1995-08-02" in message and "None" in message
