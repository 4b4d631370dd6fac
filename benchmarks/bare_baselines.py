"""The bare baselines of the benchmark: one regex into typed columns, then Parquet.

Written on purpose without any pipeline code (no ``bq_platform`` import), so the benchmark
compares the pipeline with what the engine alone costs for the simplest version of the job:
read gzip access logs, match each line once against one Common/Combined Log Format regex, cast
the fields into typed columns (host, ts TIMESTAMP UTC, request, status INT, bytes BIGINT,
referrer, user_agent; a line that does not match gives nulls, a Common line null referrer and
user agent) and write Parquet.

- ``spark``: PySpark, the given master (``local[2]`` by default, as the pipeline's bench run).
  The regex runs once per line: ``regexp_replace`` rewrites the line into its groups joined by
  a tab (a character no field contains here) and ``split`` cuts it; nine ``regexp_extract``
  calls would run the match nine times.
- ``duckdb``: DuckDB with 2 threads: ``regexp_extract(line, pattern, [names])`` returns all
  groups of one match as a struct.

Prints one JSON object: ``{"engine", "startup_s", "job_s", "rows", "peak_rss_mib"}`` (start-up =
creating the session/connection; ``peak_rss_mib`` of this Python process, from getrusage).

Usage: ``python benchmarks/bare_baselines.py spark|duckdb INPUT_GLOB OUTPUT_DIR [--master M]``.
"""

import argparse
import json
import os
import resource
import sys
import time

#: Common Log Format: host ident authuser [timestamp] "request" status bytes, then for
#: Combined Log Format "referrer" "user agent".
CLF = r'^(\S+) (\S+) (\S+) \[([^\]]+)\] "(.*)" (\d{3}) (\d+|-)(?: "(.*)" "(.*)")?$'


def bare_spark(input_glob: str, output: str, master: str) -> dict:
    """The bare PySpark job; returns timings in seconds and the row count."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    started = time.monotonic()
    spark = (
        SparkSession.builder.master(master)
        .appName("bare-baseline")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    startup = time.monotonic() - started
    started = time.monotonic()
    # an optional group that did not match is replaced by nothing (Java's Matcher)
    groups = F.split(F.regexp_replace("value", CLF, "$1\t$4\t$5\t$6\t$7\t$8\t$9"), "\t")
    parsed = spark.read.text(input_glob).select(groups.alias("g"))
    ok = F.size("g") == 7
    typed = parsed.select(
        F.when(ok, F.get("g", 0)).alias("host"),
        F.try_to_timestamp(F.when(ok, F.get("g", 1)), F.lit("dd/MMM/yyyy:HH:mm:ss Z")).alias("ts"),
        F.when(ok, F.get("g", 2)).alias("request"),
        F.when(ok, F.get("g", 3)).try_cast("int").alias("status"),
        F.when(ok, F.get("g", 4)).try_cast("bigint").alias("bytes"),
        F.when(ok, F.nullif(F.get("g", 5), F.lit(""))).alias("referrer"),
        F.when(ok, F.nullif(F.get("g", 6), F.lit(""))).alias("user_agent"),
    )
    typed.write.mode("overwrite").parquet(output)
    job = time.monotonic() - started
    rows = spark.read.parquet(output).count()  # not timed
    spark.stop()
    return {"engine": "spark", "master": master, "startup_s": startup, "job_s": job, "rows": rows}


def bare_duckdb(input_glob: str, output: str) -> dict:
    """The bare DuckDB job; returns timings in seconds and the row count."""
    import duckdb

    started = time.monotonic()
    con = duckdb.connect()
    con.execute("SET threads = 2")
    startup = time.monotonic() - started
    started = time.monotonic()
    os.makedirs(output, exist_ok=True)
    target = os.path.join(output, "part-0.parquet")
    con.execute(
        f"""
        COPY (
            SELECT m.host,
                   try_strptime(m.ts, '%d/%b/%Y:%H:%M:%S %z') AS ts,
                   m.request,
                   TRY_CAST(m.status AS INTEGER) AS status,
                   TRY_CAST(m.bytes AS BIGINT) AS bytes,
                   nullif(m.referrer, '') AS referrer,
                   nullif(m.user_agent, '') AS user_agent
            FROM (
                SELECT regexp_extract(
                    line, $pattern,
                    ['host', 'ident', 'user', 'ts', 'request', 'status', 'bytes', 'referrer',
                     'user_agent']
                ) AS m
                FROM read_csv($glob, columns = {{'line': 'VARCHAR'}}, header = false,
                              delim = chr(1), quote = '', escape = '', auto_detect = false)
            )
        ) TO '{target}' (FORMAT parquet)
        """,
        {"pattern": CLF, "glob": input_glob},
    )
    job = time.monotonic() - started
    rows = con.execute("SELECT count(*) FROM read_parquet($p)", {"p": target}).fetchone()[0]
    con.close()
    return {"engine": "duckdb", "startup_s": startup, "job_s": job, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=("spark", "duckdb"))
    parser.add_argument("input_glob")
    parser.add_argument("output")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    if args.engine == "spark":
        result = bare_spark(args.input_glob, args.output, args.master)
    else:
        result = bare_duckdb(args.input_glob, args.output)
    result["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    json.dump(result, sys.stdout)
    print()


if __name__ == "__main__":
    main()
