"""The warehouse contract for reading the published sample back
(:meth:`~bq_platform.lib.warehouse.base.Warehouse.published_sample_rows`), on DuckDB and on
BigQuery (a query job on the emulator)."""

import datetime as dt

from bq_platform.lib.core.job_ids import job_id, sha256_json
from bq_platform.lib.warehouse.base import SAMPLE_PREVIEW_COLUMNS, LoadJob
from bq_platform.lib.warehouse.schema import pageviews_sample_spec
from bq_platform_tests.lib.warehouse.contract_backends import Backend, pageview_parquet

DAY = dt.date(1995, 8, 1)
NEXT_DAY = DAY + dt.timedelta(days=1)


def test_published_sample_rows_are_the_days_rows_with_the_preview_columns(
    backend: Backend,
) -> None:
    warehouse = backend.warehouse()
    assert warehouse.published_sample_rows(DAY, NEXT_DAY) == []  # no table yet
    spec = pageviews_sample_spec(require_partition_filter=False)
    warehouse.ensure_table(spec)
    for day, rows in ((DAY, 3), (NEXT_DAY, 2)):
        hour = dt.datetime.combine(day, dt.time(4), dt.UTC)
        uri = backend.put_file(f"sample/{day}.parquet", pageview_parquet(hour, rows, site="s"))
        fingerprint = sha256_json(["sample", str(day)])
        partition = f"{day:%Y%m%d}"
        job = LoadJob(
            job_id("load", spec.name, partition, fingerprint),
            f"{spec.name}${partition}",
            (uri,),
            spec,
        )
        status = warehouse.submit_job(job)
        assert warehouse.wait_job(status.job_id).succeeded

    reader = backend.warehouse()
    rows = reader.published_sample_rows(DAY, DAY)
    assert [sorted(r) for r in rows] == [sorted(SAMPLE_PREVIEW_COLUMNS)] * 3
    start = dt.datetime.combine(DAY, dt.time(4), dt.UTC)
    assert [(r["site"], r["event_date"], r["event_ts"], r["traffic_class"]) for r in rows] == [
        ("s", DAY, start + dt.timedelta(seconds=i), "human") for i in range(3)
    ]
    assert len(reader.published_sample_rows(DAY, NEXT_DAY)) == 5
