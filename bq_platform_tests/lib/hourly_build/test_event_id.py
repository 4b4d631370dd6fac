"""The pageview ``event_id`` (:func:`~bq_platform.lib.hourly_build.transform.event_id`): its
documented formula, one ID per (site, landed file, line), and the Spark column that computes
it in the build."""

import hashlib
import itertools

import pyarrow as pa
from pyspark.sql import functions as F

from bq_platform.lib.core.layout import validate_site
from bq_platform.lib.hourly_build.transform import event_id, event_id_column

SHA_A, SHA_B = "ab" * 32, "0f" * 32
#: Site names that differ only where a separator or a suffix could hide the difference.
SITES = ("epa.gov", "epa.gov1", "epa.go", "a.b", "a", "mirror.example")


def test_event_id_is_the_sha256_of_site_checksum_and_line() -> None:
    assert (
        event_id("epa.gov", SHA_A, 2) == hashlib.sha256(f"epa.gov:{SHA_A}:2".encode()).hexdigest()
    )
    assert event_id("epa.gov", SHA_A, 2) == event_id("epa.gov", SHA_A, 2)  # stable


def test_event_id_differs_for_every_site_file_and_line() -> None:
    triples = list(itertools.product(map(validate_site, SITES), (SHA_A, SHA_B), (1, 2, 11, 12)))
    ids = {event_id(*t) for t in triples}
    assert len(ids) == len(triples)
    # one object's line under two site keys: two IDs
    assert event_id("ksc.nasa.gov", SHA_A, 7) != event_id("mirror.example", SHA_A, 7)


def test_event_id_column_computes_event_id(spark) -> None:
    triples = list(itertools.product(SITES, (SHA_A, SHA_B), (1, 12, 2**40)))
    table = pa.table(
        {
            "site": [t[0] for t in triples],
            "sha": [t[1] for t in triples],
            "line_no": pa.array([t[2] for t in triples], pa.int64()),
        }
    )
    frame = spark.createDataFrame(table)
    column = event_id_column(F.col("site"), F.col("sha"), F.col("line_no"))
    rows = frame.select("site", "sha", "line_no", column.alias("id")).collect()
    assert sorted((r["site"], r["sha"], r["line_no"], r["id"]) for r in rows) == sorted(
        (*t, event_id(*t)) for t in triples
    )
