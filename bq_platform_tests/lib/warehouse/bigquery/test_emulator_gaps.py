"""bqemulator's gaps, each checked on the raw emulator: these tests fail the day it is fixed.

Every behaviour :class:`~bq_platform_tests.bigquery_shim.BigQueryShim` answers in front of the
emulator has a test here that runs the emulator *without* the shim and asserts the gap still
exists. When one fails, the emulator has learned BigQuery's behaviour: delete that part of the
shim and this test. Marked ``emulator_gap`` via the test names (``test_gap_*``) and the reason
in each docstring.
"""

import datetime as dt
from collections.abc import Iterator

import pytest
from google.api_core import exceptions as api_exceptions
from google.cloud import bigquery

from bq_platform.lib.warehouse.bigquery.warehouse import copied_rows, schema_fields
from bq_platform.lib.warehouse.schema import PAGEVIEW_COLUMNS
from bq_platform_tests.emulators import BigQueryEmulator, GCSEmulator, unique_name
from bq_platform_tests.lib.warehouse.contract_backends import pageview_parquet

pytestmark = pytest.mark.emulator

HOUR = dt.datetime(1995, 8, 1, 4, tzinfo=dt.UTC)


class Raw:
    """The raw emulator with one dataset, three partitioned tables and two Parquet files."""

    def __init__(self, bq: BigQueryEmulator, gcs: GCSEmulator) -> None:
        self.client = bq.client()
        self.dataset = f"{bq.project}.{unique_name('gaps')}"
        self.client.create_dataset(self.dataset)
        self.bucket = unique_name("gaps").replace("_", "-")
        bucket = gcs.client().create_bucket(self.bucket)
        bucket.blob("three.parquet").upload_from_string(pageview_parquet(HOUR, 3))
        bucket.blob("two.parquet").upload_from_string(pageview_parquet(HOUR, 2, "b"))
        bucket.blob("bad.parquet").upload_from_string(b"not parquet")
        for name in ("a", "b", "pv"):
            table = bigquery.Table(self.ref(name), schema=schema_fields(PAGEVIEW_COLUMNS))
            table.time_partitioning = bigquery.TimePartitioning(field="event_date")
            self.client.create_table(table)

    def ref(self, table: str) -> str:
        """``project.dataset.table`` of one of the dataset's tables."""
        return f"{self.dataset}.{table}"

    def load(
        self, file: str, table: str, disposition: str = "WRITE_TRUNCATE", **kw: str
    ) -> bigquery.LoadJob:
        config = bigquery.LoadJobConfig(
            schema=schema_fields(PAGEVIEW_COLUMNS),
            source_format="PARQUET",
            write_disposition=disposition,
        )
        job = self.client.load_table_from_uri(
            [f"gs://{self.bucket}/{file}"], self.ref(table), job_config=config, **kw
        )
        return job.result()

    def count(self, table: str) -> int:
        return list(self.client.query(f"SELECT COUNT(*) FROM `{self.ref(table)}`").result())[0][0]


@pytest.fixture
def raw(bq_emulator: BigQueryEmulator, gcs_emulator: GCSEmulator) -> Iterator[Raw]:
    made = Raw(bq_emulator, gcs_emulator)
    yield made
    made.client.close()


def test_gap_decorator_on_load_and_copy(raw: Raw) -> None:
    """GAP-DECORATOR: ``table$YYYYMMDD`` as a load or copy destination answers 400."""
    with pytest.raises(api_exceptions.BadRequest, match="Invalid table id"):
        raw.load("three.parquet", "pv$19950801")
    with pytest.raises(api_exceptions.BadRequest, match="Invalid table id"):
        raw.client.copy_table(raw.ref("a"), raw.ref("pv$19950801")).result()


def test_gap_decorator_on_tables_get(raw: Raw) -> None:
    """GAP-DECORATOR-GET: ``tables.get`` of ``table$YYYYMMDD`` answers 404, not the partition."""
    raw.load("three.parquet", "a")
    with pytest.raises(api_exceptions.NotFound):
        raw.client.get_table(raw.ref("a$19950801"))


def test_gap_decorator_on_tabledata_list(raw: Raw) -> None:
    """GAP-DECORATOR-LIST: ``tabledata.list`` of ``table$YYYYMMDD`` answers 404; BigQuery lists
    that day partition's rows (/bigquery/docs/reference/rest/v2/tabledata/list)."""
    raw.load("three.parquet", "a")
    fields = schema_fields(PAGEVIEW_COLUMNS)
    assert len(list(raw.client.list_rows(raw.ref("a"), selected_fields=fields))) == 3
    with pytest.raises(api_exceptions.NotFound):
        list(raw.client.list_rows(raw.ref("a$19950801"), selected_fields=fields))


def test_gap_reused_job_id_runs_again(raw: Raw) -> None:
    """GAP-409: BigQuery refuses a reused job ID with 409 ``duplicate``; the emulator runs it."""
    job_id = unique_name("reused")
    raw.load("three.parquet", "a", job_id=job_id)
    again = raw.load("two.parquet", "a", job_id=job_id)
    assert again.state == "DONE" and raw.count("a") == 2


def test_gap_failed_truncate_load_empties_the_table(raw: Raw) -> None:
    """GAP-TRUNCATE: a failed WRITE_TRUNCATE load leaves BigQuery's table intact; the emulator
    empties it."""
    raw.load("three.parquet", "a")
    with pytest.raises(api_exceptions.GoogleAPIError):
        raw.load("bad.parquet", "a")
    assert raw.count("a") == 0  # BigQuery: 3


def test_gap_load_output_rows_is_the_table_total(raw: Raw) -> None:
    """GAP-OUTPUT-ROWS: ``statistics.load.outputRows`` is the job's rows in BigQuery; the
    emulator reports the table's total."""
    raw.load("three.parquet", "a")
    appended = raw.load("two.parquet", "a", disposition="WRITE_APPEND")
    assert appended.output_rows == 5  # BigQuery: 2


def test_gap_copy_takes_the_first_source_only_without_stats(raw: Raw) -> None:
    """GAP-COPY-MULTI / GAP-COPY-STATS: a copy of two tables copies the first one and reports
    no ``statistics.copy.copiedRows``."""
    raw.load("three.parquet", "a")
    raw.load("two.parquet", "b")
    job = raw.client.copy_table(
        [raw.ref("a"), raw.ref("b")],
        raw.ref("pv"),
        job_config=bigquery.CopyJobConfig(write_disposition="WRITE_TRUNCATE"),
    )
    job.result()
    assert copied_rows(job) is None
    assert raw.count("pv") == 3  # BigQuery: 5


def test_gap_num_rows_not_updated_by_dml(raw: Raw) -> None:
    """GAP-NUMROWS: ``numRows`` stays at its old value after DML; BigQuery's metadata follows."""
    raw.load("three.parquet", "a")
    raw.client.query(f"DELETE FROM `{raw.ref('a')}` WHERE TRUE").result()
    assert raw.count("a") == 0
    assert raw.client.get_table(raw.ref("a")).num_rows == 3  # BigQuery: 0


def test_gap_gcs_listing_ignores_start_and_end_offset(gcs_emulator: GCSEmulator) -> None:
    """GAP-GCS-OFFSETS (gcp-storage-emulator): objects.list's ``startOffset``/``endOffset``
    (cloud.google.com/storage/docs/json_api/v1/objects/list) are ignored, so every object
    under the prefix comes back. ``GCSObjectStore.list_sizes`` sends them (GCS filters
    server-side) and applies the range itself as well."""
    bucket = gcs_emulator.client().create_bucket(unique_name("gaps").replace("_", "-"))
    for name in ("p/a", "p/b", "p/c"):
        bucket.blob(name).upload_from_string(b"x")
    listed = gcs_emulator.client().list_blobs(
        bucket.name, prefix="p/", start_offset="p/b", end_offset="p/c"
    )
    assert [b.name for b in listed] == ["p/a", "p/b", "p/c"]  # GCS: ["p/b"]
