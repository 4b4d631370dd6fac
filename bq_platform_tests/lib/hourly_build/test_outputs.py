"""The build's per-line rows (:func:`bq_platform.lib.hourly_build.outputs.slim`): what each
category of
line keeps for the outputs and the per-file counts."""

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import functions as F

from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.column_modes import with_table_modes
from bq_platform.lib.hourly_build.outputs import (
    HOUR_FOLDER_COLUMN,
    PLAIN_ENCODED_COLUMNS,
    clear_hour_folders,
    deadletter_arrow_schema,
    hour_folder,
    pageview_arrow_schema,
    slim,
    write_hour_files,
    write_hour_folders,
)
from bq_platform.lib.hourly_build.transform import (
    CATEGORY_NON_PAGE,
    CATEGORY_OUT_OF_WINDOW,
    CATEGORY_PAGE,
    CATEGORY_REJECTED,
    transform_lines,
)
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.warehouse.schema import DEADLETTER_COLUMNS_SPEC, PAGEVIEW_COLUMNS
from bq_platform_tests.lib.hourly_build.transform_reference import HOUR, KEY, SITE, frame
from bq_platform_tests.lib.storage.counting_store import CountingStore

LINES = {
    CATEGORY_PAGE: '141.243.1.172 - - [30/Aug/1995:10:53:25 -0400] "GET /Software.html HTTP/1.0" '
    "200 1497",
    CATEGORY_NON_PAGE: 'h - - [30/Aug/1995:10:00:08 -0400] "GET /images/logo.gif HTTP/1.0" 200 9',
    CATEGORY_REJECTED: "not a log line",
    CATEGORY_OUT_OF_WINDOW: 'h - - [30/Aug/1995:12:00:00 -0400] "GET /a.html HTTP/1.0" 200 5',
}


def slim_rows(spark) -> dict[str, dict]:
    """``slim`` of one line per category, by category, as the build calls it."""
    lines = frame(spark, list(LINES.values())).select(
        "*", F.lit(7).alias("file_no"), F.lit(3).alias("unit_no")
    )
    rows = slim(transform_lines(lines, visitor_key=KEY, keep=["file_no", "unit_no"])).collect()
    return {r["category"]: r.asDict() for r in rows}


def test_every_line_keeps_its_file_number_line_and_category(spark) -> None:
    rows = slim_rows(spark)
    assert sorted(rows) == sorted(LINES)
    for line_no, category in enumerate(LINES, 1):
        assert (rows[category]["file_no"], rows[category]["line_no"]) == (7, line_no)


def test_a_non_page_line_keeps_no_text(spark) -> None:
    """Non-page lines are most lines; in the uncompressed cache every text costs its bytes."""
    row = slim_rows(spark)[CATEGORY_NON_PAGE]
    texts = {k: v for k, v in row.items() if isinstance(v, str) and k != "category"}
    assert texts == {}
    assert row["in_sample"] is False
    assert row["unit_no"] is None  # the distinct visitors count pages only


def test_a_page_keeps_its_site_hour_number(spark) -> None:
    rows = slim_rows(spark)
    assert {c: r["unit_no"] for c, r in rows.items()} == {
        CATEGORY_PAGE: 3,
        CATEGORY_NON_PAGE: None,
        CATEGORY_REJECTED: None,
        CATEGORY_OUT_OF_WINDOW: None,
    }


def test_a_page_keeps_its_columns_but_not_the_file_or_raw_text(spark) -> None:
    row = slim_rows(spark)[CATEGORY_PAGE]
    assert (row["site"], row["hour_label"], row["page_path"]) == (SITE, HOUR, "/Software.html")
    assert row["event_id"] and row["visitor_id"]
    assert (row["data_key"], row["raw"], row["reason"]) == (None, None, None)


def test_a_dead_letter_keeps_what_its_row_needs(spark) -> None:
    rows = slim_rows(spark)
    for category, reason in (
        (CATEGORY_REJECTED, lf.REASON_MALFORMED),
        (CATEGORY_OUT_OF_WINDOW, lf.REASON_OUT_OF_WINDOW),
    ):
        row = rows[category]
        assert (row["site"], row["hour_label"], row["data_key"]) == (
            SITE,
            HOUR,
            "landing/x.log.gz",
        )
        assert (row["raw"], row["reason"]) == (LINES[category], reason)
        assert row["page_path"] is None


def test_the_id_columns_are_written_without_a_dictionary(spark, tmp_path: Path) -> None:
    """The IDs are written plain, other columns keep Parquet's dictionary. (Two values each, so
    a dictionary pays and the writer would keep one: with unique IDs it builds one, then falls
    back to plain, and the file does not show the difference.)"""
    two = F.when(F.col("id") % 2 == 0, "a").otherwise("b")
    rows = spark.range(500).select(
        *[two.alias(column) for column in PLAIN_ENCODED_COLUMNS],
        two.alias("page_path"),
        F.lit(HOUR).alias(HOUR_FOLDER_COLUMN),
    )
    write_hour_folders(rows.coalesce(1), tmp_path.as_uri())
    (path,) = (tmp_path / f"{HOUR_FOLDER_COLUMN}={HOUR}").glob("*.parquet")
    group = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {
        group.column(i).path_in_schema: group.column(i).encodings for i in range(group.num_columns)
    }
    assert set(encodings) == {*PLAIN_ENCODED_COLUMNS, "page_path"}
    for column in PLAIN_ENCODED_COLUMNS:
        assert not any("DICTIONARY" in e for e in encodings[column]), encodings
    assert any("DICTIONARY" in e for e in encodings["page_path"]), encodings


def test_driver_written_hour_files_take_the_spark_schema(tmp_path) -> None:
    """Arrow from Spark may carry large strings (``useLargeVarTypes``) or another zone name;
    the files are cast to the schema Spark writes, one per hour, and no rows write nothing."""
    schema = pageview_arrow_schema()
    ts = dt.datetime(1995, 8, 1, 4, 5, tzinfo=dt.UTC)
    row = {f.name: None for f in schema}
    row.update(
        event_id="e",
        event_ts=ts,
        event_date=ts.date(),
        site="s",
        visitor_id="v",
        page_path="/",
        http_method="GET",
        status=200,
        traffic_class="human",
    )
    types = {f.name: pa.large_string() if f.type == pa.string() else f.type for f in schema} | {
        "event_ts": pa.timestamp("us", tz="Etc/UTC"),
        "hour": pa.large_string(),
    }
    labels = ["1995-08-01T04", "1995-08-01T05", "1995-08-01T04"]
    rows = pa.Table.from_pylist(
        [{**row, "event_id": f"e{i}", "hour": label} for i, label in enumerate(labels)],
        schema=pa.schema(list(types.items())[::-1]),  # another column order too
    )
    store = LocalObjectStore(tmp_path)

    assert write_hour_files(rows, store, "p", schema) == 2
    written = sorted(store.list_keys("p"))
    assert written == [
        "p/hour=1995-08-01T04/part-00000.parquet",
        "p/hour=1995-08-01T05/part-00000.parquet",
    ]
    first = pq.read_table(store.uri(written[0]))
    assert first.schema.equals(schema)
    assert first.column("event_id").to_pylist() == ["e0", "e2"]
    assert first.column("event_ts").to_pylist() == [ts, ts]
    assert write_hour_files(rows.slice(0, 0), store, "q", schema) == 0
    assert list(store.list_keys("q")) == []
    # the table's modes: a REQUIRED column is a required field, and a null in it is refused
    assert [f.name for f in schema if not f.nullable] == [
        c.name for c in PAGEVIEW_COLUMNS if c.mode == "REQUIRED"
    ]
    nulls = rows.set_column(
        rows.schema.get_field_index("page_path"), "page_path", pa.nulls(3, pa.large_string())
    )
    with pytest.raises(ValueError, match="page_path"):
        write_hour_files(nulls, store, "r", schema)
    assert list(store.list_keys("r")) == []


def test_spark_writes_required_columns_as_required_fields_and_refuses_a_null(
    spark, tmp_path: Path
) -> None:
    """Spark marks a column not nullable only where it can prove it; the rows written carry
    the table's modes, and a null in a REQUIRED column fails the write, naming it."""
    ts = dt.datetime(1995, 8, 1, 4, 5, tzinfo=dt.UTC)
    values = {
        "site": "epa.gov",
        "delivery_hour": ts.replace(minute=0),
        "delivery_date": ts.date(),
        "data_key": "k",
        "line_no": 1,
        "reason": "unparseable",
        "raw": None,
        HOUR_FOLDER_COLUMN: "1995-08-01T04",
    }
    frame = spark.createDataFrame([values], schema=_spark_schema(values))
    rows = with_table_modes(frame, DEADLETTER_COLUMNS_SPEC, "a dead-letter row")
    write_hour_folders(rows, str(tmp_path / "ok"))
    (written,) = (tmp_path / "ok").rglob("*.parquet")
    schema = pq.read_schema(written)
    assert schema.equals(deadletter_arrow_schema())
    assert {f.name for f in schema if not f.nullable} == {
        c.name for c in DEADLETTER_COLUMNS_SPEC if c.mode == "REQUIRED"
    }
    bad = spark.createDataFrame([{**values, "data_key": None}], schema=_spark_schema(values))
    with pytest.raises(Exception, match="a dead-letter row has a null data_key"):
        write_hour_folders(
            with_table_modes(bad, DEADLETTER_COLUMNS_SPEC, "a dead-letter row"),
            str(tmp_path / "bad"),
        )


def _spark_schema(values: dict) -> str:
    """A DDL schema for ``values``, every column nullable (as Spark reads or computes it)."""
    types = {str: "string", int: "bigint", dt.datetime: "timestamp", dt.date: "date"}
    return ", ".join(f"{k} {types.get(type(v), 'string')}" for k, v in values.items())


def test_clearing_deletes_only_hour_folders_that_hold_something(tmp_path) -> None:
    store = CountingStore(tmp_path)
    prefixes = ("attempt=a/full", "attempt=a/sample", "dead/attempt=a")
    labels = [f"1995-08-01T{h:02d}" for h in range(24)]
    left = [
        f"{hour_folder(prefixes[0], labels[3])}/part-0.parquet",
        f"{hour_folder(prefixes[0], labels[3])}/.part-0.parquet.crc",
        f"{hour_folder(prefixes[2], labels[5])}/nested/part-1.parquet",
    ]
    kept = [
        f"{hour_folder(prefixes[0], '1995-08-02T00')}/part-0.parquet",  # an hour not rebuilt
        f"{prefixes[1]}/_SUCCESS",
    ]
    for key in left + kept:
        store.write_bytes(key, b"x")
    store.calls.clear()

    assert clear_hour_folders(store, prefixes, labels) == len(left)

    assert store.calls == {"list": 3, "delete_prefix": 2}  # not 3 x 24 folder deletions
    assert store.list_keys("") == sorted(kept)
    store.calls.clear()
    assert clear_hour_folders(store, prefixes, labels) == 0
    assert store.calls == {"list": 3}
