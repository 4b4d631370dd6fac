"""Landing and the hourly build together (issue 7): orphan data files hold their hour, a
growing log builds what the whole file builds, and timestamps outside the partitions are
counted out of window with their own reason."""

import collections
import datetime as dt
import gzip

import pyarrow as pa
import pyarrow.parquet as pq

from bq_platform.lib.core import layout
from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.manifest import HourManifest
from bq_platform.lib.core.partition_window import (
    REASON_BEFORE_FIRST_PARTITION,
    REASON_FUTURE_TIMESTAMP,
    HourWindow,
    out_of_window_reason,
)
from bq_platform.lib.hourly_build.build import build_hours
from bq_platform.lib.landing.index import scan_landing
from bq_platform.lib.landing.producer.land import land_file, land_files
from bq_platform.lib.publish.protocol import day_completeness
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform_tests.lib.build_inputs import EPA, NASA, deliver
from bq_platform_tests.lib.build_inputs import KEY as BUILD_KEY
from bq_platform_tests.lib.built_slice import read_parquet
from bq_platform_tests.lib.landing.test_registry import growth_points

KEY = "landing-build-key"
SITE = "ksc.nasa.gov"
UTC = dt.UTC
FIRST = dt.datetime(1995, 8, 1, tzinfo=UTC)
H4 = dt.datetime(1995, 8, 1, 4, tzinfo=UTC)
LINE = b'a - - [01/Aug/1995:04:00:01 +0000] "GET /index.html HTTP/1.0" 200 1\n'


class AuditedWarehouse:
    """The two reads :func:`day_completeness` makes, answered as if every hour were staged and
    audited for the manifests given, so that only the landing can make an hour incomplete."""

    def __init__(self, manifests: list[HourManifest]) -> None:
        self.manifests = {m.hour: m for m in manifests}

    def audited_builds(self, start: dt.datetime, end: dt.datetime) -> set[tuple[dt.datetime, str]]:
        return {(h, m.fingerprint) for h, m in self.manifests.items()}

    def tables_rows(self, tables: list[str]) -> dict[str, int | None]:
        return {
            table: next((m.rows for h, m in self.manifests.items() if f"{h:%Y%m%d%H}" in table), 0)
            for table in tables
        }


def test_orphan_data_file_holds_its_hour_and_is_named(spark, tmp_path):
    """A day was published with 39,356 of 43,183 lines: a data file without manifest was
    ignored. Now the build records it, the accounting check and the daily gate name it."""
    store = LocalObjectStore(tmp_path / "lake")
    path = tmp_path / "a.log"
    path.write_bytes(LINE * 3)
    land_file(store, SITE, path, first_hour=FIRST)
    body = gzip.compress(LINE * 5, mtime=0)
    orphan = f"{layout.landing_hour_prefix(SITE, H4)}/late-delivery.log.gz"
    store.write_bytes(orphan, body)
    (manifest,) = build_hours(spark, store, [H4], attempt_id="orphan", visitor_key=KEY)
    assert manifest.orphan_files == (orphan,)
    assert manifest.input_fingerprint == scan_landing(store).get(H4).input_fingerprint
    assert [c.source_lines for c in manifest.counts] == [3]  # its lines are not counted yet
    assert any(orphan in p and "without a manifest" in p for p in manifest.accounting_problems())
    gate = day_completeness(AuditedWarehouse([manifest]), store, H4.date(), "full")
    assert any(orphan in reason for reason in gate.problems[H4])
    assert H4 + dt.timedelta(hours=1) in gate.problems  # not built: the only other reason

    # the manifest arrives (written last by its producer): the hour is whole again
    deliver(store, SITE, H4, body, 5, name="late-delivery.log.gz", source="late")
    (again,) = build_hours(spark, store, [H4], attempt_id="whole", visitor_key=KEY)
    assert again.orphan_files == () and not again.accounting_problems()
    assert [(c.source_lines, c.pageviews) for c in again.counts] == [(8, 8)]
    gate = day_completeness(AuditedWarehouse([again]), store, H4.date(), "full")
    assert H4 not in gate.problems


def _page_rows(store: LocalObjectStore, manifests: list[HourManifest]) -> collections.Counter:
    rows: collections.Counter = collections.Counter()
    for m in manifests:
        for key in m.full_files:
            table = pq.read_table(store.uri(key), columns=["visitor_id", "event_ts", "page_path"])
            columns = [table.column(c).to_pylist() for c in table.column_names]
            rows.update(zip(*columns, strict=True))
    return rows


def test_growing_log_builds_what_the_whole_file_builds(spark, tmp_path, access_logs):
    (path,) = (access_logs / SITE).glob("*.gz")
    lines = gzip.decompress(path.read_bytes()).split(b"\n")[:6000]
    data = b"\n".join(lines) + b"\n"
    grown, whole = LocalObjectStore(tmp_path / "grown"), LocalObjectStore(tmp_path / "whole")
    log = tmp_path / "access.log"
    for point in growth_points(data, seed=3):
        log.write_bytes(data[:point])
        land_file(grown, SITE, log, first_hour=FIRST)
    log.write_bytes(data)
    land_file(whole, SITE, log, first_hour=FIRST)
    hours = [h.hour for h in scan_landing(whole).hours()]
    assert [h.hour for h in scan_landing(grown).hours()] == hours
    built = {}
    for name, store in (("grown", grown), ("whole", whole)):
        manifests = build_hours(spark, store, hours, attempt_id=name, visitor_key=KEY)
        counts = [c for m in manifests for c in m.counts]
        assert all(c.balanced for c in counts) and not any(m.orphan_files for m in manifests)
        built[name] = (
            [(c.hour, c.source_lines, c.pageviews, c.non_page_hits, c.rejected) for c in counts],
            sum(c.duplicates + c.out_of_window for c in counts),
            _page_rows(store, manifests),
        )
    assert built["grown"] == built["whole"]
    assert sum(row[1] for row in built["whole"][0]) == 6000


def test_timestamps_outside_the_partitions_are_out_of_window_with_a_reason(spark, tmp_path):
    """Issue 7: a line dated 2099 created day 2099-08-01 (then DagsterUnknownPartitionError on
    every run) and one dated 1990 raised CheckError; both belong to their neighbours' hour."""
    now = dt.datetime(2026, 11, 23, 2, tzinfo=UTC)
    odd = [
        b'p - - [01/Aug/1990:00:00:01 +0000] "GET /past.html HTTP/1.0" 200 1',
        b'f - - [01/Aug/2099:00:00:01 +0000] "GET /future.html HTTP/1.0" 200 1',
    ]
    path = tmp_path / "dates.log"
    path.write_bytes(LINE + odd[0] + b"\n" + LINE + odd[1] + b"\n")
    store = LocalObjectStore(tmp_path / "lake")
    land_file(store, SITE, path, first_hour=FIRST, now=now)
    assert [h.hour for h in scan_landing(store).hours()] == [H4]
    window = HourWindow.until_now(FIRST, now)
    (manifest,) = build_hours(
        spark, store, [H4], attempt_id="dates", visitor_key=KEY, window=window
    )
    (counts,) = manifest.counts
    assert (counts.source_lines, counts.pageviews, counts.out_of_window) == (4, 2, 2)
    assert counts.balanced
    dead = pa.concat_tables(pq.read_table(store.uri(k)) for k in manifest.deadletter_files)
    reasons = dict(
        zip(dead.column("raw").to_pylist(), dead.column("reason").to_pylist(), strict=True)
    )
    assert reasons == {
        odd[0].decode(): REASON_BEFORE_FIRST_PARTITION,
        odd[1].decode(): REASON_FUTURE_TIMESTAMP,
    }
    for raw, reason in reasons.items():  # the Python reference agrees
        assert out_of_window_reason(lf.parse_clf_timestamp(raw), window) == reason


def test_window_reference_and_bounds() -> None:
    window = HourWindow.until_now(FIRST, dt.datetime(2026, 11, 23, 2, 30, tzinfo=UTC))
    assert window.last_hour == dt.datetime(2026, 11, 23, 3, tzinfo=UTC)  # now + 1 h skew
    assert window.contains(FIRST) and not window.contains(FIRST - dt.timedelta(hours=1))
    assert window.contains(window.last_hour)
    assert not window.contains(window.last_hour + dt.timedelta(hours=1))
    inside = dt.datetime(1995, 8, 1, 5, 30, tzinfo=UTC)
    assert out_of_window_reason(inside, window) == lf.REASON_OUT_OF_WINDOW
    assert HourWindow.from_json(window.to_json()) == window


def test_full_bundled_logs_through_the_lander(spark, access_logs, tmp_path) -> None:
    """All 81,744 real lines, landed by ``lib.landing.producer.land``, balance hour by hour."""
    store = LocalObjectStore(tmp_path / "lake")
    landed = []
    for site in (NASA, EPA):
        landed += land_files(store, site, sorted((access_logs / site).glob("*.log.gz")))
    hours = sorted({f.manifest.hour for f in landed})
    manifests = build_hours(spark, store, hours, attempt_id="full", visitor_key=BUILD_KEY)
    counts = [c for m in manifests for c in m.counts]
    assert all(c.balanced for c in counts)
    assert sum(c.source_lines for c in counts) == 81_744
    assert sum(c.rejected + c.out_of_window + c.duplicates for c in counts) == 0
    for manifest in manifests:
        assert read_parquet(store, manifest.full_files).num_rows == manifest.rows
        assert read_parquet(store, manifest.sample_files).num_rows == manifest.sample_rows
    assert len(manifests) == 40  # data/README.md: 25 EPA hours + 15 NASA hours
    visitors = sum(c.visitors for c in counts)  # per site-hour, so a visitor counts per hour
    sampled = sum(c.sample_visitors for c in counts)
    assert 0.001 < sampled / visitors < 0.02, (sampled, visitors)  # 1 in 200 by design
