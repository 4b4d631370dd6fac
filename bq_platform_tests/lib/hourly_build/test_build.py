"""The hourly build on real log lines landed in a local object store.

A slice of the bundled logs (two hours of each site, plus odd lines, a duplicate delivery and
an hour without data) is landed by a small helper that writes the gzip file and its
LandedManifest at the layout's keys, then built once (:mod:`bq_platform_tests.lib.built_slice`);
the tests check the outputs against an independent Python computation of the same rules
(logformat / pages / pseudonymize). Builds again over that slice: ``test_build_reruns.py``.
"""

import collections
import datetime as dt
import gzip
import json
import logging

import pyarrow.parquet as pq
import pytest

from bq_platform.lib.core import layout
from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.manifest import (
    HourManifest,
    read_hour_manifest,
    read_hour_manifests,
    stage_bytes,
)
from bq_platform.lib.core.pages import is_page
from bq_platform.lib.core.pseudonymize import SAMPLE_MODULUS, in_sample, visitor_id
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.hourly_build.outputs import (
    DEADLETTER_COLUMNS,
    deadletter_arrow_schema,
    pageview_arrow_schema,
)
from bq_platform.lib.hourly_build.transform import event_id
from bq_platform.lib.landing.deliveries import landed_hour
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.lib.build_inputs import (
    EPA,
    H_EMPTY,
    H_EPA_2,
    H_NASA_1,
    H_NASA_2,
    KEY,
    NASA,
    ODD,
    land,
)
from bq_platform_tests.lib.built_slice import HOURS, Built, build_slice, read_parquet
from bq_platform_tests.lib.storage.counting_store import CountingStore


def reference_counts(lines: list[bytes], hour: dt.datetime) -> collections.Counter:
    """Category counts of one file's lines by the Python reference rules."""
    counts: collections.Counter = collections.Counter()
    for raw in lines:
        parsed = lf.parse_line(raw.decode("utf-8", errors="replace"))
        request = parsed.parsed_request
        if parsed.reason is not None:
            counts["rejected"] += 1
        elif parsed.timestamp.replace(minute=0, second=0) != hour:
            counts["out_of_window"] += 1
        elif request and is_page(request.method, request.path, parsed.status):
            counts["pageviews"] += 1
            counts[("visitor", visitor_id(KEY, parsed.host))] += 1
        else:
            counts["non_page_hits"] += 1
    return counts


@pytest.fixture(scope="module")
def built(spark, access_logs, tmp_path_factory) -> Built:
    return build_slice(spark, access_logs, tmp_path_factory.mktemp("lake"))


def test_manifests_cover_every_hour_and_site(built) -> None:
    assert sorted(built.manifests) == HOURS
    for hour, manifest in built.manifests.items():
        assert [c.site for c in manifest.counts] == [EPA, NASA]
        assert all(c.hour == hour for c in manifest.counts)
        stored = built.store.read_text(layout.hour_manifest_key(hour))
        assert HourManifest.from_json(stored) == manifest


def test_accounting_identity_and_counts_match_reference(built) -> None:
    for hour, manifest in built.manifests.items():
        for c in manifest.counts:
            lines = built.landed.get((c.site, hour), [])
            want = reference_counts(lines, hour)
            dup = built.duplicate.lines if (c.site, hour) == (EPA, H_EPA_2) else 0
            assert c.balanced, c
            assert c.source_lines == len(lines) + dup
            assert (c.pageviews, c.non_page_hits, c.rejected, c.out_of_window, c.duplicates) == (
                want["pageviews"],
                want["non_page_hits"],
                want["rejected"],
                want["out_of_window"],
                dup,
            ), (c.site, hour)
            assert c.lines_read == len(lines)
            assert c.visitors == len([k for k in want if isinstance(k, tuple)])
            assert c.files == (1 if lines else 0)
        assert manifest.file_mismatches == ()
    odd_hour = {c.site: c for c in built.manifests[H_NASA_1].counts}[NASA]
    assert (odd_hour.rejected, odd_hour.out_of_window) == (5, 1)  # from ODD


def test_parquet_rows_schema_and_layout(built) -> None:
    prefix = layout.attempt_prefix("attempt-1")
    for hour, manifest in built.manifests.items():
        label = layout.hour_label(hour)
        assert manifest.full_files and manifest.sample_files  # >= 1 file each, even if empty
        assert len(manifest.sample_files) == 1  # one writer for the sample (build.py)
        for key in manifest.full_files:
            assert key.startswith(f"{prefix}/full/hour={label}/") and key.endswith(".parquet")
        for key in manifest.sample_files:
            assert key.startswith(f"{prefix}/sample/hour={label}/")
        for key in (*manifest.full_files, *manifest.sample_files):
            schema = pq.read_schema(built.store.uri(key))
            assert schema.equals(pageview_arrow_schema()), key
        full = read_parquet(built.store, manifest.full_files)
        sample = read_parquet(built.store, manifest.sample_files)
        assert full.num_rows == manifest.rows == sum(c.pageviews for c in manifest.counts)
        assert sample.num_rows == manifest.sample_rows
        assert set(full.column("site").to_pylist()) <= {c.site for c in manifest.counts}
        assert all(f"{ts:%Y-%m-%dT%H}" == label for ts in full.column("event_ts").to_pylist())
        assert all(
            d == ts.date()
            for d, ts in zip(
                full.column("event_date").to_pylist(),
                full.column("event_ts").to_pylist(),
                strict=True,
            )
        )
    # Hadoop's checksum files are not written beside the outputs (spark.RAW_LOCAL_FILESYSTEM).
    written = [p.name for p in built.store.root.rglob("*") if p.is_file()]
    assert any(name.endswith(".parquet") for name in written)
    assert not [name for name in written if name.endswith(".crc")]
    spark_file = pq.ParquetFile(built.store.uri(built.manifests[H_NASA_1].full_files[0]))
    event_ts = spark_file.schema.column(1)
    assert (event_ts.name, event_ts.physical_type) == ("event_ts", "INT64")
    assert (
        str(event_ts.logical_type) == "Timestamp(isAdjustedToUTC=true, timeUnit=microseconds, "
        "is_from_converted_type=false, force_set_converted_type=false)"
    )


def test_manifest_records_its_files_bytes_so_steps_send_no_request_per_file(
    built, tmp_path
) -> None:
    """The build's one listing of its outputs gives their sizes (empty files included); a step
    reporting bytes reads them from the manifest, and only an older manifest without them costs
    a size request per file. A missing hour manifest is one read, not an existence check too."""
    counting = CountingStore(built.store.root)
    for manifest in built.manifests.values():
        for kind, files, recorded in (
            ("full", manifest.full_files, manifest.full_bytes),
            ("sample", manifest.sample_files, manifest.sample_bytes),
        ):
            assert recorded == sum(built.store.size(k) for k in files) > 0
            assert stage_bytes(counting, manifest, kind) == recorded
        assert HourManifest.from_json(manifest.to_json()) == manifest
    assert counting.counted() == {}  # no request at all

    manifest = built.manifests[H_NASA_1]
    older = json.loads(manifest.to_json())
    del older["full_bytes"], older["sample_bytes"]  # written before the fields existed
    parsed = HourManifest.from_json(json.dumps(older))
    assert (parsed.full_bytes, parsed.sample_bytes) == (None, None)
    assert stage_bytes(counting, parsed, "full") == manifest.full_bytes
    assert counting.counted() == {"size": len(manifest.full_files)}  # one per file

    empty = CountingStore(tmp_path / "empty")
    assert read_hour_manifest(empty, H_NASA_1) is None
    assert empty.counted() == {"read_bytes": 1}
    hours = [H_NASA_1, H_NASA_1 - dt.timedelta(days=300), *built.manifests]
    assert read_hour_manifests(counting, hours) == {
        hour: built.manifests.get(hour) for hour in hours
    }
    # one read per hour, none to check existence
    assert counting.counted() == {"read_bytes": len(set(hours))}


def test_pages_are_pseudonymized_and_sampled_by_visitor(built) -> None:
    hosts = set()
    for lines in built.landed.values():
        for raw in lines:
            parsed = lf.parse_line(raw.decode("utf-8", errors="replace"))
            if parsed.host:
                hosts.add(parsed.host)
    all_full, all_sample = [], []
    for manifest in built.manifests.values():
        full = read_parquet(built.store, manifest.full_files).to_pylist()
        sample = read_parquet(built.store, manifest.sample_files).to_pylist()
        all_full += full
        all_sample += sample
        assert sorted(r["event_id"] for r in sample) == sorted(
            r["event_id"] for r in full if in_sample(r["visitor_id"])
        )
        for c in manifest.counts:
            ids = {r["visitor_id"] for r in full if r["site"] == c.site}
            assert c.visitors == len(ids)
            assert c.sample_visitors == len({v for v in ids if in_sample(v)})
    known = {visitor_id(KEY, h) for h in hosts}
    assert {r["visitor_id"] for r in all_full} <= known
    for row in all_full:  # no client address anywhere in the stored rows
        assert not set(map(str, row.values())) & hosts
    assert len({r["event_id"] for r in all_full}) == len(all_full)
    assert 0 < len(all_sample) < len(all_full) / 20  # 1 in 200 visitors, here a handful
    assert SAMPLE_MODULUS == 200


def page_line_numbers(lines: list[bytes], hour: dt.datetime) -> list[int]:
    """The 1-based numbers of the lines that are pages of ``hour`` by the Python reference."""
    numbers = []
    for line_no, raw in enumerate(lines, 1):
        parsed = lf.parse_line(raw.decode("utf-8", errors="replace"))
        request = parsed.parsed_request
        if (
            parsed.reason is None
            and parsed.timestamp.replace(minute=0, second=0) == hour
            and request
            and is_page(request.method, request.path, parsed.status)
        ):
            numbers.append(line_no)
    return numbers


def test_event_ids_hash_the_site_landed_file_and_line(built) -> None:
    """Each written page's event_id is :func:`event_id` of its site, landed file's sha256 and
    line number, computed here from the landed files and the Python reference rules."""
    expected = set()
    for (site, hour), lines in built.landed.items():
        (kept,) = [d.manifest for d in landed_hour(built.store, site, hour)[0] if not d.duplicate]
        expected |= {event_id(site, kept.sha256, n) for n in page_line_numbers(lines, hour)}
    written = [
        i
        for m in built.manifests.values()
        for i in read_parquet(built.store, m.full_files).column("event_id").to_pylist()
    ]
    assert len(written) == len(expected) > 0
    assert set(written) == expected


def test_one_log_under_two_sites_gives_disjoint_event_ids(spark, built, tmp_path) -> None:
    """The same file delivered for two sites gives each site the same pageviews under event IDs
    the other site's do not share (the ID hashes the site too)."""
    store = LocalObjectStore(tmp_path / "lake")
    lines = built.landed[(NASA, H_NASA_2)]
    mirror = "mirror.example"
    shas = {site: land(store, site, H_NASA_2, lines).sha256 for site in (NASA, mirror)}
    assert shas[NASA] == shas[mirror]  # one object's checksum, landed under two site keys
    (manifest,) = build_hours(spark, store, [H_NASA_2], attempt_id="two", visitor_key=KEY)
    counts = {c.site: c for c in manifest.counts}
    pages = page_line_numbers(lines, H_NASA_2)
    assert counts[NASA].pageviews == counts[mirror].pageviews == len(pages) > 0
    assert counts[NASA].duplicates == counts[mirror].duplicates == 0
    rows = read_parquet(store, manifest.full_files).to_pylist()
    ids = {site: [r["event_id"] for r in rows if r["site"] == site] for site in (NASA, mirror)}
    for site in (NASA, mirror):
        assert sorted(ids[site]) == sorted(event_id(site, shas[site], n) for n in pages)
    assert not set(ids[NASA]) & set(ids[mirror])


def test_dead_letters_keep_reason_and_raw_line(built) -> None:
    manifest = built.manifests[H_NASA_1]
    dead = read_parquet(built.store, manifest.deadletter_files)
    assert dead.column_names == list(DEADLETTER_COLUMNS)
    # the types the table's load job expects (Spark marks line_no NOT NULL: loads accept it)
    assert [(f.name, f.type) for f in dead.schema] == [
        (f.name, f.type) for f in deadletter_arrow_schema()
    ]
    counts = {c.site: c for c in manifest.counts}[NASA]
    assert dead.num_rows == counts.rejected + counts.out_of_window
    lines = built.landed[(NASA, H_NASA_1)]
    for row in dead.to_pylist():
        assert row["site"] == NASA
        assert row["delivery_hour"] == H_NASA_1 and row["delivery_date"] == H_NASA_1.date()
        raw = lines[row["line_no"] - 1].decode("utf-8", errors="replace")
        assert row["raw"] == raw
        assert row["reason"] in lf.REASONS
        parsed = lf.parse_line(raw)
        assert row["reason"] == (parsed.reason or lf.REASON_OUT_OF_WINDOW)
    reasons = collections.Counter(dead.column("reason").to_pylist())
    assert reasons == {
        lf.REASON_EMPTY_LINE: 1,
        lf.REASON_MALFORMED: 2,
        lf.REASON_BAD_STATUS: 1,
        lf.REASON_BAD_TIMESTAMP: 1,
        lf.REASON_OUT_OF_WINDOW: 1,
    }
    (empty,) = built.manifests[H_EMPTY].deadletter_files
    assert read_parquet(built.store, [empty]).num_rows == 0


def test_rejected_reasons_and_samples_are_recorded(built) -> None:
    """The hour manifest carries what the rejected-share check needs (issue 7)."""
    counts = {c.site: c for c in built.manifests[H_NASA_1].counts}[NASA]
    assert counts.rejected_reasons == {
        lf.REASON_EMPTY_LINE: 1,
        lf.REASON_MALFORMED: 2,
        lf.REASON_BAD_STATUS: 1,
        lf.REASON_BAD_TIMESTAMP: 1,
    }
    assert sum(counts.rejected_reasons.values()) == counts.rejected
    odd = [raw.decode("utf-8", errors="replace") for raw in ODD]
    # first line of each reason, most frequent first, ties by name; at most three
    assert counts.rejected_samples == (odd[1], odd[3], odd[4])
    for hour, manifest in built.manifests.items():
        for c in manifest.counts:
            if (c.site, hour) != (NASA, H_NASA_1):
                assert (c.rejected_reasons, c.rejected_samples) == ({}, ()), (c.site, hour)


def test_duplicate_delivery_counts_once(built) -> None:
    counts = {c.site: c for c in built.manifests[H_EPA_2].counts}[EPA]
    n = len(built.landed[(EPA, H_EPA_2)])
    assert counts.duplicates == built.duplicate.lines == n
    assert counts.source_lines == 2 * n
    assert counts.lines_read == n and counts.files == 1
    full = read_parquet(built.store, built.manifests[H_EPA_2].full_files)
    assert full.num_rows == counts.pageviews
    assert len(set(full.column("event_id").to_pylist())) == full.num_rows


def test_empty_hour_has_zero_counts_and_one_empty_file(built) -> None:
    manifest = built.manifests[H_EMPTY]
    assert manifest.rows == manifest.sample_rows == 0
    assert all(c.source_lines == c.accounted == 0 for c in manifest.counts)
    assert len(manifest.full_files) == len(manifest.sample_files) == 1
    assert read_parquet(built.store, manifest.full_files).num_rows == 0
    # the dead-letter load of its day needs a source of the dead-letter schema
    (dead,) = manifest.deadletter_files
    empty = pq.read_table(built.store.uri(dead))
    assert empty.num_rows == 0 and empty.schema.equals(deadletter_arrow_schema())


def test_progress_is_logged(spark, built, caplog) -> None:
    caplog.set_level(logging.INFO, logger="bq_platform.lib.hourly_build.build")
    build_hours(spark, built.store, [H_EMPTY], attempt_id="logged", visitor_key=KEY)
    text = caplog.text
    assert "1 hours" in text and "1995-08-01T06" in text and "done in" in text
    assert KEY not in text


def test_an_hour_of_many_files_has_one_sample_file(spark, access_logs, tmp_path) -> None:
    """The sample is written on the driver, one file per hour (build.py: it is 1 in 200
    visitors of a pass, and each file a Spark writer opens costs ~12 ms, docs/PERFORMANCE.md),
    so an hour whose files were read by several tasks still gets one sample file, holding every
    sampled row."""
    store = LocalObjectStore(tmp_path / "lake")
    with gzip.open(access_logs / NASA / "nasa-http-19950801.log.gz") as logs:
        hour_lines = [line.rstrip(b"\n") for line in logs if b"01/Aug/1995:00:" in line]
    sites = [f"s{i:02d}.example" for i in range(12)]
    for i, site in enumerate(sites):
        land(store, site, H_NASA_1, hour_lines[i :: len(sites)])
    (manifest,) = build_hours(spark, store, [H_NASA_1], attempt_id="one", visitor_key=KEY)
    sampled_sites = {c.site for c in manifest.counts if c.sample_visitors}
    assert len(sampled_sites) > 1, sampled_sites  # sampled rows came from several files
    assert len(manifest.sample_files) == 1
    sample = read_parquet(store, manifest.sample_files)
    assert sample.num_rows == manifest.sample_rows > 0
