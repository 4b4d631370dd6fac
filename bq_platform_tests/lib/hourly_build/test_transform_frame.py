"""The Spark transform's frame (:func:`~bq_platform.lib.hourly_build.transform.transform_lines`):
its
schema, one row per line, results independent of the session time zone, generated code HotSpot
can compile, no ICU case mapping, kept columns, stable event IDs and a refused input without a
column. Line-by-line comparisons with the Python reference: ``test_transform.py``.
"""

import contextlib
import hashlib
import io
import os
import re
from pathlib import Path

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from bq_platform.lib.hourly_build.transform import (
    OUTPUT_COLUMNS,
    PARSED_COLUMN_NAMES,
    transform_lines,
)
from bq_platform_tests.lib.hourly_build.transform_reference import (
    KEY,
    ODD_LINES,
    SHA,
    SITE,
    frame,
    run,
)


def test_result_does_not_depend_on_the_session_time_zone(spark) -> None:
    lines = [ODD_LINES[0], ODD_LINES[18], ODD_LINES[-1], ODD_LINES[-3]]
    expected = run(spark, lines)
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Pacific/Kiritimati")  # UTC+14
    try:
        out = transform_lines(frame(spark, lines), visitor_key=KEY)
        # compare instants, not their rendering in the session zone
        got = out.select(
            "line_no",
            "category",
            "reason",
            "event_date",
            F.unix_seconds("event_ts").alias("secs"),
        ).collect()
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous)
    got_rows = sorted(got, key=lambda r: r["line_no"])
    for want, row in zip(expected, got_rows, strict=True):
        assert (row["category"], row["reason"], row["event_date"]) == (
            want["category"],
            want["reason"],
            want["event_date"],
        )
        assert row["secs"] == want["event_ts"]


def test_schema_and_one_row_per_line(spark) -> None:
    inputs = frame(spark, ODD_LINES * 3)
    out = transform_lines(inputs, visitor_key=KEY)
    assert tuple(out.columns) == OUTPUT_COLUMNS
    types = {f.name: f.dataType.simpleString() for f in out.schema.fields}
    assert {c: types[c] for c in PARSED_COLUMN_NAMES} == {
        "event_id": "string",
        "event_ts": "timestamp",
        "event_date": "date",
        "site": "string",
        "visitor_id": "string",
        "page_path": "string",
        "query_string": "string",
        "http_method": "string",
        "http_protocol": "string",
        "status": "bigint",
        "response_bytes": "bigint",
        "referrer": "string",
        "user_agent": "string",
        "vhost": "string",
        "extra_fields": "string",
    }
    line_nos = [r["line_no"] for r in out.select("line_no").collect()]
    assert sorted(line_nos) == list(range(1, 3 * len(ODD_LINES) + 1))


#: HotSpot compiles no method over 8,000 bytes of bytecode by default (DontCompileHugeMethods), so
#: a fused transform above it runs interpreted. The build's transform is over it, so the JVMs run
#: with JIT_HUGE_METHODS (lib/hourly_build/spark.py); the generated code must still stay within one
#: method's bytecode (64 KiB), and not grow unnoticed.
JIT_HUGE_METHOD_LIMIT = 8000
GENERATED_METHOD_BUDGET = 12_000
SUBTREE_METHOD_SIZE = re.compile(r"^== Subtree \d+ / \d+ \(maxMethodCodeSize:(\d+);", re.M)


def explained(frame_: DataFrame, mode: str) -> str:
    """What ``frame_.explain(mode=mode)`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame_.explain(mode=mode)
    return out.getvalue()


def max_generated_method_bytes(spark, frame_: DataFrame) -> int:
    """Largest method Spark's whole-stage codegen generates for ``frame_``, from the
    ``maxMethodCodeSize`` of each subtree ``explain(mode="codegen")`` prints (AQE off: the
    adaptive plan is only final at run time)."""
    previous = spark.conf.get("spark.sql.adaptive.enabled")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    try:
        sizes = [int(size) for size in SUBTREE_METHOD_SIZE.findall(explained(frame_, "codegen"))]
    finally:
        spark.conf.set("spark.sql.adaptive.enabled", previous)
    assert sizes, "no whole-stage codegen"
    return max(sizes)


def driver_jvm_arguments() -> list[str]:
    """Command line of the local driver JVM: the ``SparkSubmit`` child of this process that
    PySpark launched (Linux ``/proc``)."""
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = stat.read_text().rsplit(")", 1)[1].split()[1]
            argv = (stat.parent / "cmdline").read_bytes().decode().split("\0")
        except (OSError, IndexError):
            continue  # gone meanwhile
        if parent == me and "org.apache.spark.deploy.SparkSubmit" in argv:
            return argv
    raise AssertionError("no driver JVM among this process's children")


def test_generated_code_is_jit_compiled(spark, tmp_path) -> None:
    """The fused parse (alone and as the build uses it) is JIT-compiled: either it stays under
    HotSpot's method size limit, or every JVM of the build runs with JIT_HUGE_METHODS.

    Read from Parquet, as the build reads files: an in-memory frame plans differently.
    """
    from bq_platform.lib.hourly_build.outputs import slim
    from bq_platform.lib.hourly_build.spark import JIT_HUGE_METHODS, spark_config

    lines = (
        frame(spark, ODD_LINES[:2])
        .drop("raw_bytes")
        .select("*", F.lit(0).alias("file_no"), F.lit(0).alias("unit_no"))
    )
    lines.write.parquet(str(tmp_path / "lines"))
    out = transform_lines(
        spark.read.parquet(str(tmp_path / "lines")),
        visitor_key=KEY,
        keep=["file_no", "unit_no"],
    )
    largest = max(
        max_generated_method_bytes(spark, out), max_generated_method_bytes(spark, slim(out))
    )
    assert largest < GENERATED_METHOD_BUDGET
    if largest >= JIT_HUGE_METHOD_LIMIT:
        for master in ("local[2]", "spark://host:7077", "yarn"):
            config = spark_config(master)
            assert JIT_HUGE_METHODS in config["spark.driver.extraJavaOptions"].split()
            assert JIT_HUGE_METHODS in config["spark.executor.extraJavaOptions"].split()
        assert JIT_HUGE_METHODS in driver_jvm_arguments()


def test_transform_maps_no_case_with_icu(spark) -> None:
    """No ``lower``/``upper``/``initcap`` in the transform's analyzed plan: Spark 4 maps their
    case with ICU, and the first call in a JVM initialises a title-case table while the other
    task threads wait (lib/core/pages.py, NOT_PAGE_PATH_PATTERN).
    """
    out = transform_lines(frame(spark, ODD_LINES[:2]), visitor_key=KEY)
    printed = explained(out, "extended")
    plan = printed.split("== Analyzed Logical Plan ==")[1].split("== Optimized Logical Plan ==")[0]
    plan = plan.lower()
    for function in ("lower(", "upper(", "initcap("):
        assert function not in plan


def test_kept_columns_pass_through_after_the_output_columns(spark) -> None:
    lines = frame(spark, ODD_LINES[:3]).withColumn("file_no", F.col("line_no").cast("int") * 10)
    out = transform_lines(lines, visitor_key=KEY, keep=["file_no"])
    assert out.columns == [*OUTPUT_COLUMNS, "file_no"]
    assert sorted((r["line_no"], r["file_no"]) for r in out.collect()) == [
        (1, 10),
        (2, 20),
        (3, 30),
    ]
    with pytest.raises(ValueError, match="file_id"):
        transform_lines(lines, visitor_key=KEY, keep=["file_id"])


def test_event_id_is_stable_and_names_site_file_and_line(spark) -> None:
    page = ODD_LINES[0]
    first = run(spark, [page, page])
    again = run(spark, [page, page])
    assert [r["event_id"] for r in first] == [r["event_id"] for r in again]
    assert first[1]["event_id"] == hashlib.sha256(f"{SITE}:{SHA}:2".encode()).hexdigest()
    assert first[0]["event_id"] != first[1]["event_id"]
    assert first[0]["visitor_id"] == first[1]["visitor_id"]


def test_missing_input_column_is_refused(spark) -> None:
    with pytest.raises(ValueError, match="file_sha256"):
        transform_lines(frame(spark, ODD_LINES[:1]).drop("file_sha256"), visitor_key=KEY)
