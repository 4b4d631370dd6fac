"""The warehouse contract, part two: BigQuery's rules refused before anything is sent.

The same ``backend`` fixture as ``test_contract.py`` (DuckDB, and BigQuery on the emulators):
for each rule, a job or table spec BigQuery would refuse raises :class:`RuleViolation` and
sends nothing (the backend's activity is unchanged).
"""

import dataclasses
import datetime as dt
from collections.abc import Callable

import pytest

from bq_platform.lib.warehouse.base import CopyJob, LoadJob, Warehouse
from bq_platform.lib.warehouse.rules import MAX_LOAD_URIS, RuleViolation
from bq_platform.lib.warehouse.schema import TableSpec, pageviews_spec, stage_spec
from bq_platform_tests.lib.warehouse.contract_backends import Backend

HOUR = dt.datetime(1995, 8, 1, 0, tzinfo=dt.UTC)

PLAIN = TableSpec("plain", stage_spec("full", HOUR).columns)  # unpartitioned
STAGE = stage_spec("full", HOUR)
LOAD = LoadJob("bqp_load_ok_g0", STAGE.name, ("gs://b/x.parquet",), STAGE)
COPY = CopyJob("bqp_copy_ok_g0", (STAGE.name,), "pageviews$19950801")
VIOLATIONS: dict[str, Callable[[Warehouse], object]] = {
    "job-id-characters": lambda w: w.submit_job(dataclasses.replace(LOAD, job_id="a.b")),
    "job-id-length": lambda w: w.submit_job(dataclasses.replace(LOAD, job_id="j" * 1025)),
    "label-key": lambda w: w.submit_job(dataclasses.replace(LOAD, labels={"Run": "x"})),
    "label-value": lambda w: w.submit_job(dataclasses.replace(LOAD, labels={"k": "v" * 64})),
    "65-labels": lambda w: w.submit_job(
        dataclasses.replace(LOAD, labels={f"k{i}": "v" for i in range(65)})
    ),
    "decorator-on-unpartitioned": lambda w: w.submit_job(
        dataclasses.replace(LOAD, destination="plain$19950801", spec=PLAIN)
    ),
    "too-many-uris": lambda w: w.submit_job(
        dataclasses.replace(LOAD, source_uris=tuple(f"u{i}" for i in range(MAX_LOAD_URIS + 1)))
    ),
    "load-schema": lambda w: w.submit_job(
        dataclasses.replace(LOAD, spec=dataclasses.replace(STAGE, columns=STAGE.columns[:-1]))
    ),
    "copy-unpartitioned-source": lambda w: w.submit_job(
        dataclasses.replace(COPY, sources=("plain",))
    ),
    "copy-clustering": lambda w: w.submit_job(dataclasses.replace(COPY, sources=("clustered",))),
    "copy-missing-source": lambda w: w.submit_job(dataclasses.replace(COPY, sources=("nope",))),
    "clustering-5-columns": lambda w: w.ensure_table(
        dataclasses.replace(
            PLAIN, name="five", clustering=("site", "page_path", "status", "event_id", "vhost")
        )
    ),
}


@pytest.mark.parametrize("violation", sorted(VIOLATIONS))
def test_rule_violations_are_refused_before_anything_is_sent(
    backend: Backend, violation: str
) -> None:
    warehouse = backend.warehouse()
    for spec in (STAGE, PLAIN, pageviews_spec(False)):
        warehouse.ensure_table(spec)
    warehouse.ensure_table(dataclasses.replace(STAGE, name="clustered", clustering=("site",)))
    warehouse.table_spec("nope")  # looked up once; the refusal itself sends nothing
    before = backend.activity(warehouse)
    with pytest.raises(RuleViolation, match="^BigQuery would refuse"):
        VIOLATIONS[violation](warehouse)
    assert backend.activity(warehouse) == before
