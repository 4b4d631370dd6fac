"""Specs and jobs that break BigQuery's rules, one per rule, for the tests of every warehouse.

:data:`CASES` feeds each rule of :mod:`bq_platform.lib.warehouse.rules` a table spec or a job
that BigQuery refuses; :func:`check` runs the rule functions alone on a case. The tests check
the message (``test_rules.py``) and that each warehouse refuses the case with the same message
before anything runs (``test_duckdb_rules.py``; the contract suite can reuse the table for the
BigQuery adapter).
"""

import dataclasses
import datetime as dt

from bq_platform.lib.warehouse import rules
from bq_platform.lib.warehouse.job_model import CopyJob, Job, LoadJob, validate_job
from bq_platform.lib.warehouse.schema import (
    PAGEVIEW_COLUMNS,
    Column,
    TableSpec,
    pageviews_spec,
    stage_spec,
)

HOUR = dt.datetime(1995, 8, 1, 4, tzinfo=dt.UTC)
DAY = HOUR.date()
STAGE = stage_spec("full", HOUR)
PAGEVIEWS = pageviews_spec()
#: Same columns as the stage table, but unpartitioned and unclustered (the old stage tables).
FLAT = TableSpec(name="flat_pageviews", columns=PAGEVIEW_COLUMNS)
URI = "gs://bucket/pageviews/hour=1995-08-01T04/attempt=1/part-*.parquet"
LABELS = {"app": "bq_platform", "partition": "1995080104"}


def load_job(**changes: object) -> LoadJob:
    """A valid load of one hour into its stage table, with ``changes`` applied."""
    job = LoadJob(
        job_id="load_pageviews_stage_1995080104_0123abcd_g0",
        destination=STAGE.name,
        source_uris=(URI,),
        spec=STAGE,
        labels=LABELS,
    )
    return dataclasses.replace(job, **changes)  # type: ignore[arg-type]


def copy_job(**changes: object) -> CopyJob:
    """A valid copy of the stage table into ``pageviews$19950801``, with ``changes`` applied."""
    job = CopyJob(
        job_id="copy_pageviews_19950801_0123abcd_g0",
        sources=(STAGE.name,),
        destination="pageviews$19950801",
        labels=LABELS,
    )
    return dataclasses.replace(job, **changes)  # type: ignore[arg-type]


def spec(base: TableSpec = PAGEVIEWS, **changes: object) -> TableSpec:
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def with_column(base: TableSpec, column: Column, **changes: object) -> TableSpec:
    return spec(base, columns=base.columns + (column,), **changes)


@dataclasses.dataclass(frozen=True)
class Case:
    """A spec or a job that breaks one rule.

    Attributes:
        id: pytest ID.
        words: what the message must say (the rule).
        spec: the table spec to ensure, or None.
        job: the job to submit, or None.
        tables: the tables that exist (valid specs) when the job is submitted.
    """

    id: str
    words: str
    spec: TableSpec | None = None
    job: Job | None = None
    tables: tuple[TableSpec, ...] = ()


def _labels(n: int) -> dict[str, str]:
    return {f"k{i}": "v" for i in range(n)}


_JOB_ID_WORDS = "job IDs are 1-1,024 letters, digits, '_' or '-'"
_LABEL_KEY_WORDS = "keys are 1-63 lowercase letters, digits, '_' or '-', starting with a letter"
_LABEL_VALUE_WORDS = "values are 0-63 lowercase letters, digits, '_' or '-'"
_NOT_PARTITIONED = "Failed to copy Non partitioned table to Column partitioned table: not supported"
_SOURCES = (STAGE, PAGEVIEWS)
_BY_TS = spec(STAGE, name="stage_by_ts", partition_field="event_ts")
_BY_SITE = spec(STAGE, name="stage_by_site", clustering=("site",))
_WIDE = with_column(STAGE, Column("country", "STRING"), name="stage_wide")
_RETYPED = spec(
    STAGE,
    name="stage_retyped",
    columns=tuple(
        Column(c.name, "STRING", c.mode) if c.name == "status" else c for c in STAGE.columns
    ),
)

CASES: list[Case] = [
    # -- table names and columns (tables#table_naming, schemas#column_names)
    Case("table-name-chars", "table names are letters, digits and '_'", spec(name="page-views")),
    Case("table-name-length", "<= 1,024", spec(name="t" * 1025)),
    Case("no-columns", "a table needs at least one column", spec(FLAT, columns=())),
    Case(
        "columns-10001",
        "10001 columns; at most 10,000",
        spec(FLAT, columns=tuple(Column(f"c{i}", "STRING") for i in range(10_001))),
    ),
    Case(
        "column-name-chars",
        "column name 'page-path'",
        with_column(FLAT, Column("page-path", "STRING")),
    ),
    Case("column-name-length", "<= 300 characters", with_column(FLAT, Column("c" * 301, "STRING"))),
    Case("column-twice", "unique ignoring case", with_column(FLAT, Column("SITE", "STRING"))),
    Case("column-type", "use a standard SQL type", with_column(FLAT, Column("doc", "JSON"))),
    Case(
        "column-mode",
        "NULLABLE or REQUIRED",
        with_column(FLAT, Column("tags", "STRING", "REPEATED")),
    ),
    # -- partitioning and clustering (partitioned-tables, clustered-tables#limitations)
    Case(
        "partition-missing",
        "partition column 'day' must be a top-level DATE",
        spec(partition_field="day"),
    ),
    Case(
        "partition-type",
        "partition column 'site' must be a top-level DATE",
        spec(partition_field="site"),
    ),
    Case(
        "partition-filter-unpartitioned",
        "require_partition_filter needs a partitioned table",
        spec(FLAT, require_partition_filter=True),
    ),
    Case(
        "clustering-5-columns",
        "5 clustering columns; at most 4",
        spec(clustering=("site", "page_path", "status", "visitor_id", "http_method")),
    ),
    Case(
        "clustering-twice", "a clustering column is named twice", spec(clustering=("site", "site"))
    ),
    Case(
        "clustering-missing",
        "clustering column 'country' must be an existing",
        spec(clustering=("country",)),
    ),
    Case(
        "clustering-float",
        "clustering column 'load_s' must be an existing top-level column of type",
        with_column(PAGEVIEWS, Column("load_s", "FLOAT64"), clustering=("load_s",)),
    ),
    Case("expiration", "the expiration must be in the future", spec(STAGE, expiration_days=0)),
    # -- table labels (labels-intro#requirements)
    Case("table-labels-65", "65 labels; at most 64 per resource", spec(labels=_labels(65))),
    Case("label-key-uppercase", "label key 'App'", spec(labels={"App": "x"})),
    Case("label-key-digit-first", _LABEL_KEY_WORDS, spec(labels={"1app": "x"})),
    Case("label-key-64", _LABEL_KEY_WORDS, spec(labels={"k" * 64: "x"})),
    Case("label-key-empty", _LABEL_KEY_WORDS, spec(labels={"": "x"})),
    Case("label-value-uppercase", "value 'BQ' of label 'app'", spec(labels={"app": "BQ"})),
    Case("label-value-64", _LABEL_VALUE_WORDS, spec(labels={"app": "v" * 64})),
    Case("label-value-dot", _LABEL_VALUE_WORDS, spec(labels={"app": "bq.platform"})),
    Case("label-value-none", _LABEL_VALUE_WORDS, spec(labels={"app": None})),
    # -- job IDs (running-jobs#generate-jobid)
    Case("job-id-dot", _JOB_ID_WORDS, job=load_job(job_id="load.pageviews_g0"), tables=(STAGE,)),
    Case("job-id-space", _JOB_ID_WORDS, job=load_job(job_id="load pageviews"), tables=(STAGE,)),
    Case(
        "job-id-decorator",
        _JOB_ID_WORDS,
        job=copy_job(job_id="copy_pageviews$19950801"),
        tables=_SOURCES,
    ),
    Case("job-id-1025", _JOB_ID_WORDS, job=load_job(job_id="j" * 1025), tables=(STAGE,)),
    Case("job-id-empty", _JOB_ID_WORDS, job=load_job(job_id=""), tables=(STAGE,)),
    # -- job labels and disposition
    Case(
        "job-labels-65", "65 labels; at most 64", job=load_job(labels=_labels(65)), tables=(STAGE,)
    ),
    Case(
        "job-label-key",
        "label key 'Partition'",
        job=copy_job(labels={"Partition": "x"}),
        tables=_SOURCES,
    ),
    Case(
        "job-label-value",
        "value 'RUN-1' of label 'run_id'",
        job=load_job(labels={"run_id": "RUN-1"}),
        tables=(STAGE,),
    ),
    Case(
        "disposition",
        "write disposition 'WRITE_OVER'",
        job=load_job(write_disposition="WRITE_OVER"),
        tables=(STAGE,),
    ),
    # -- destinations and partition decorators (managing-partitioned-table-data)
    Case(
        "decorator-not-a-date",
        "a partition decorator is a real date, $YYYYMMDD",
        job=load_job(destination=f"{STAGE.name}$19950231"),
        tables=(STAGE,),
    ),
    Case(
        "load-decorator-unpartitioned",
        "the partition decorator $YYYYMMDD needs a DAY-partitioned table",
        job=load_job(destination="flat_pageviews$19950801", spec=FLAT),
        tables=(FLAT,),
    ),
    Case(
        "copy-decorator-unpartitioned",
        "the partition decorator $YYYYMMDD needs a DAY-partitioned table",
        job=copy_job(sources=("flat_pageviews",), destination="flat_pageviews$19950801"),
        tables=(FLAT,),
    ),
    Case("load-other-table", "is not table", job=load_job(destination="pageviews_stage_other")),
    # -- load jobs (quotas#load_jobs, batch-loading-data#load-wildcards, explicit schema)
    Case(
        "load-no-uri",
        "a load job needs at least one source URI",
        job=load_job(source_uris=()),
        tables=(STAGE,),
    ),
    Case(
        "load-10001-uris",
        "10,001 source URIs; at most 10,000 per load job",
        job=load_job(source_uris=tuple(f"gs://b/p/part-{i}.parquet" for i in range(10_001))),
        tables=(STAGE,),
    ),
    Case(
        "load-two-wildcards",
        "at most one '*' wildcard per URI",
        job=load_job(source_uris=("gs://b/*/part-*.parquet",)),
        tables=(STAGE,),
    ),
    Case(
        "load-no-schema",
        "its explicit schema differs from table pageviews_stage_1995080104's columns",
        job=load_job(spec=spec(STAGE, columns=())),
        tables=(STAGE,),
    ),
    Case(
        "load-other-schema",
        "its explicit schema differs from table pageviews_stage_1995080104's columns",
        job=load_job(spec=with_column(STAGE, Column("country", "STRING"))),
        tables=(STAGE,),
    ),
    # -- copy jobs (managing-partitioned-tables#copy_partitions, airflow PR 42130, beam 34571)
    Case(
        "copy-no-source",
        "a copy job needs at least one source table",
        job=copy_job(sources=()),
        tables=_SOURCES,
    ),
    Case(
        "copy-1201-sources",
        "1,201 source tables; at most 1,200 per copy job",
        job=copy_job(sources=tuple(f"pageviews_stage_{i}" for i in range(1201))),
        tables=_SOURCES,
    ),
    Case(
        "copy-missing-source",
        "source table pageviews_stage_1995080105 does not exist (404 Not found)",
        job=copy_job(sources=(f"{STAGE.name}$19950801", "pageviews_stage_1995080105$19950801")),
        tables=_SOURCES,
    ),
    Case(
        "copy-whole-tables-into-partition",
        "a copy of several sources into the partition pageviews$19950801 takes each source's "
        "partition of that day",
        job=copy_job(sources=(STAGE.name, "pageviews_stage_1995080105")),
        tables=_SOURCES,
    ),
    Case(
        "copy-unpartitioned-source",
        _NOT_PARTITIONED,
        job=copy_job(sources=("flat_pageviews",)),
        tables=(FLAT, PAGEVIEWS),
    ),
    Case(
        "copy-mixed-sources",
        _NOT_PARTITIONED,
        job=copy_job(sources=(f"{STAGE.name}$19950801", "flat_pageviews$19950801")),
        tables=(STAGE, FLAT, PAGEVIEWS),
    ),
    Case(
        "copy-other-partitioning",
        "source stage_by_ts is partitioned on event_ts, pageviews on event_date",
        job=copy_job(sources=("stage_by_ts",)),
        tables=(_BY_TS, PAGEVIEWS),
    ),
    Case(
        "copy-partitioned-into-unpartitioned",
        "every source's partitioning must match the destination's",
        job=copy_job(destination="flat_pageviews"),
        tables=(STAGE, FLAT),
    ),
    Case(
        "copy-other-clustering",
        "source stage_by_site is clustered by ['site'], pageviews by ['site', 'page_path']",
        job=copy_job(sources=("stage_by_site",)),
        tables=(_BY_SITE, PAGEVIEWS),
    ),
    Case(
        "copy-extra-column",
        "source stage_wide's schema differs",
        job=copy_job(sources=("stage_wide",)),
        tables=(_WIDE, PAGEVIEWS),
    ),
    Case(
        "copy-other-type",
        "source stage_retyped's schema differs",
        job=copy_job(sources=("stage_retyped",)),
        tables=(_RETYPED, PAGEVIEWS),
    ),
]


def check(case: Case) -> None:
    """Check ``case`` with the rule functions alone, given the specs of ``case.tables``."""
    if case.spec is not None:
        rules.check_table_spec(case.spec)
        return
    job = case.job
    assert job is not None
    specs = {t.name: t for t in case.tables}
    validate_job(job, specs.get)
