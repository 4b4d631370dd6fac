"""How the build reads the landed files (``lib/hourly_build/read.py``): passes of whole hours, read
tasks of whole hours, and exact line numbers without a shuffle."""

import datetime as dt
import gzip

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core.manifest import LandedManifest
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.hourly_build.read import (
    listing_conf,
    passes,
    read_groups,
    read_lines,
    site_hour_units,
)
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.lib.build_inputs import (
    H_EPA_1,
    H_NASA_1,
    H_NASA_2,
    KEY,
    NASA,
    land,
)


def test_line_numbers_exact_with_many_small_files(spark, tmp_path) -> None:
    """Issue 9: lines are numbered at the scan, without a shuffle, so each landed file must be
    its own split: 30 tiny files (Spark would pack them all into one split) in 2 local cores'
    worth of coalesced tasks still give every line its own file's 1-based number."""
    store = LocalObjectStore(tmp_path / "lake")
    sites = [f"s{i:02d}.example" for i in range(15)]
    expected, by_site_hour = {}, {}
    for i, site in enumerate(sites):
        for hour in (H_NASA_1, H_NASA_2):
            lines = [f"garbage {site} {hour:%H} {n}".encode() for n in range(1, 3 + i)]
            expected[land(store, site, hour, lines).data_key] = lines
            by_site_hour[(site, hour)] = [line.decode() for line in lines]
    manifests = build_hours(spark, store, [H_NASA_1, H_NASA_2], attempt_id="n", visitor_key=KEY)
    dead = pa.concat_tables(
        pq.read_table(store.uri(k)) for m in manifests for k in m.deadletter_files
    ).to_pylist()
    assert len(dead) == sum(len(v) for v in expected.values())
    for row in dead:
        assert row["raw"] == expected[row["data_key"]][row["line_no"] - 1].decode()
    assert all(c.balanced and c.rejected == c.source_lines for m in manifests for c in m.counts)
    # One reason only: its first line, then the file's last rejected line (rejected_samples).
    for m in manifests:
        for c in m.counts:
            lines = by_site_hour[(c.site, m.hour)]
            assert c.rejected_samples == (lines[0], lines[-1]), (c.site, m.hour)


def test_site_hour_units_number_each_site_and_hour_once_in_file_order() -> None:
    def landed(site: str, hour: dt.datetime, name: str) -> LandedManifest:
        return LandedManifest(site, hour, f"k/{name}", 1, 1, name * 64)

    files = [
        landed("b.example", H_NASA_2, "a"),
        landed("a.example", H_NASA_2, "b"),
        landed("b.example", H_NASA_2, "c"),  # a second delivery of the first site-hour
        landed("b.example", H_NASA_1, "d"),
    ]
    label_1, label_2 = layout.hour_label(H_NASA_1), layout.hour_label(H_NASA_2)
    assert site_hour_units(files) == [
        ("b.example", label_2),
        ("a.example", label_2),
        ("b.example", label_1),
    ]


def test_every_line_carries_its_files_site_hour_number(spark, tmp_path) -> None:
    """The build counts distinct visitors per ``unit_no`` and maps it back through
    :func:`site_hour_units`: each line's number must name its own file's site and hour, also
    with several files per site-hour and files of several read tasks."""
    store = LocalObjectStore(tmp_path / "lake")
    files = [
        land(store, site, hour, [f"{site} {hour:%H} {n} {i}".encode() for n in range(3)], name=n)
        for i, (site, hour, n) in enumerate(
            [
                ("b.example", H_NASA_2, "x.log.gz"),
                ("a.example", H_NASA_1, "x.log.gz"),
                ("b.example", H_NASA_2, "y.log.gz"),
                ("a.example", H_NASA_2, "x.log.gz"),
                ("b.example", H_NASA_1, "x.log.gz"),
            ]
        )
    ]
    units = site_hour_units(files)
    rows = read_lines(spark, store, files).collect()
    assert len(rows) == 15
    for row in rows:
        assert units[row["unit_no"]] == (row["site"], row["hour_label"]), row
        assert row["raw"].startswith(f"{row['site']} {row['hour_label'][-2:]} ")
    assert {r["unit_no"] for r in rows} == set(range(len(units))) and len(units) == 4


def test_passes_cut_whole_hours_in_hour_order() -> None:
    def landed(hour: dt.datetime, lines: int, name: str) -> LandedManifest:
        return LandedManifest(NASA, hour, f"k/{name}", lines, 1, name * 64)

    a1, a2 = landed(H_NASA_2, 3, "a"), landed(H_NASA_2, 4, "b")
    b1, c1 = landed(H_NASA_1, 2, "c"), landed(H_EPA_1, 20, "d")
    files = [a1, c1, b1, a2]
    assert passes(files, 100) == [[b1, a1, a2, c1]]
    # the next hour joins while the pass stays within the limit; an hour is never split
    assert passes(files, 9) == [[b1, a1, a2], [c1]]
    assert passes(files, 8) == [[b1], [a1, a2], [c1]]
    assert passes(files, 1) == [[b1], [a1, a2], [c1]]  # an hour above the limit: its own pass
    assert passes([], 5) == []
    with pytest.raises(ValueError, match="positive"):
        passes(files, 0)


def test_read_groups_keep_file_order_and_balance_lines() -> None:
    """A pass's files (in hour order) are cut into at most one run per read task, in order,
    none empty, each holding about an equal share of the lines."""

    def landed(n: int, lines: int) -> LandedManifest:
        return LandedManifest(NASA, H_NASA_1, f"k/{n}", lines, 1, f"{n:064d}")

    files = [landed(i, lines) for i, lines in enumerate([5, 1, 9, 3, 3, 7, 2, 8, 4, 6, 1, 1])]
    for tasks in (1, 2, 3, 4, 5, 12, 40):
        groups = read_groups(files, tasks)
        assert [f for g in groups for f in g] == files
        assert len(groups) == min(tasks, len(files))
        assert all(groups)
        share = sum(f.lines for f in files) / len(groups)
        assert max(sum(f.lines for f in g) for g in groups) <= share + max(f.lines for f in files)
    assert read_groups([], 4) == []
    with pytest.raises(ValueError, match="positive"):
        read_groups(files, 0)


def test_each_hour_is_written_by_one_read_task(spark, access_logs, tmp_path) -> None:
    """Issue 9: a Spark writer opens one Parquet file per hour folder a task holds (~12 ms
    each, docs/PERFORMANCE.md), so read tasks take runs of whole hours: a pass of 8 hours of
    3 sites each, read by local[2]'s 4 tasks, writes one ``full`` file per hour except where
    a task boundary falls inside an hour (at most 3 such hours)."""
    store = LocalObjectStore(tmp_path / "lake")
    with gzip.open(access_logs / NASA / "nasa-http-19950801.log.gz") as logs:
        pages = [line.rstrip(b"\n") for line in logs if b"01/Aug/1995:00:" in line][:240]
    hours = [H_NASA_1 + dt.timedelta(hours=h) for h in range(8)]
    for h, hour in enumerate(hours):
        for i, site in enumerate(("a.example", "b.example", "c.example")):
            text = [
                line.replace(b"01/Aug/1995:00:", f"01/Aug/1995:{hour:%H}:".encode()).replace(
                    b"-0400]", b"+0000]"
                )
                for line in pages[i * 10 + h : 120 + h : 3]
            ]
            land(store, site, hour, text)
    manifests = build_hours(spark, store, hours, attempt_id="grouped", visitor_key=KEY)
    assert all(m.rows > 0 for m in manifests)
    files = [len(m.full_files) for m in manifests]
    assert max(files) <= 2 and sum(files) <= len(hours) + 3, files
    written = sum(pq.read_metadata(store.uri(k)).num_rows for m in manifests for k in m.full_files)
    assert written == sum(m.rows for m in manifests)


def test_local_files_are_listed_on_the_driver_and_remote_ones_by_a_capped_job(
    spark, tmp_path
) -> None:
    """Over 32 paths Spark lists them in a Spark job; for local files that job only costs
    time (issue 9), so reading 40 local files starts no Spark job, and gs:// paths keep it."""
    store = LocalObjectStore(tmp_path / "lake")
    landed = [land(store, f"s{i:02d}.example", H_NASA_1, [f"line {i}".encode()]) for i in range(40)]
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("listing", "read_lines of 40 local files")
    try:
        lines = read_lines(spark, store, landed)
        assert tracker.getJobIdsForGroup("listing") == []  # listed without a job
        assert lines.count() == 40
    finally:
        spark.sparkContext.setJobGroup(None, None)  # type: ignore[arg-type]

    remote = [f"gs://bucket/landing/pageviews/site=s{i}/hour=h/f.gz" for i in range(40)]
    assert listing_conf(remote, 2) == {
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2"
    }
    local = [store.uri(m.data_key) for m in landed]
    assert listing_conf(local, 2) == {
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "40"
    }
    assert listing_conf(["file:///x/a.gz", "/x/b.gz"], 2) == {
        "spark.sql.sources.parallelPartitionDiscovery.threshold": "2"
    }
