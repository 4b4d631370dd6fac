"""The landing registry: a growing log landed again counts each line once (issue 7)."""

import collections
import datetime as dt
import gzip
import random
from pathlib import Path

import pytest

from bq_platform.lib.core.layout import landing_registry_key
from bq_platform.lib.landing.index import scan_landing
from bq_platform.lib.landing.producer.land import land_file
from bq_platform.lib.landing.producer.registry import read_state
from bq_platform.lib.storage.local import LocalObjectStore

SITE = "ksc.nasa.gov"


def nasa_bytes(access_logs: Path) -> bytes:
    (path,) = (access_logs / SITE).glob("*.gz")
    return gzip.decompress(path.read_bytes())


def landed_lines(store: LocalObjectStore) -> dict[dt.datetime, collections.Counter]:
    """Every landed line by hour, as a multiset, read back from the landed objects."""
    out: dict[dt.datetime, collections.Counter] = collections.defaultdict(collections.Counter)
    for hour in scan_landing(store).hours():
        for manifest in hour.manifests:
            body = gzip.decompress(store.read_bytes(manifest.data_key))
            lines = body.split(b"\n")[:-1]
            assert len(lines) == manifest.lines
            out[hour.hour].update(lines)
    return {h: c for h, c in out.items() if c}


def source_lines(store: LocalObjectStore) -> int:
    return sum(h.source_lines for h in scan_landing(store).hours())


def growth_points(data: bytes, seed: int) -> list[int]:
    """Ten byte counts a cron copy could see: mid-line (twice in the same line), right before
    and right after a newline, random, and the whole file last."""
    a = data.index(b"\n", len(data) // 5) + 7
    b = a + 20
    c = data.index(b"\n", len(data) // 2)
    points = {a, b, c, c + 1}
    rng = random.Random(seed)
    while len(points) < 9:
        points.add(rng.randrange(1, len(data)))
    return sorted(points) + [len(data)]


@pytest.mark.parametrize("seed", [1, 2])
def test_growing_log_landed_ten_times_counts_each_line_once(tmp_path, access_logs, seed):
    data = nasa_bytes(access_logs)
    points = growth_points(data, seed)
    assert sum(data[p - 1] != ord("\n") for p in points) >= 3  # some copies end mid-line
    grown = LocalObjectStore(tmp_path / "grown")
    log = tmp_path / "access.log"
    for point in points:
        log.write_bytes(data[:point])
        land_file(grown, SITE, log)
        assert source_lines(grown) == data[:point].count(b"\n") + (data[point - 1] != ord("\n"))
    whole = LocalObjectStore(tmp_path / "whole")
    log.write_bytes(data)
    land_file(whole, SITE, log)
    assert source_lines(grown) == source_lines(whole) == 33_996
    assert landed_lines(grown) == landed_lines(whole)
    state = read_state(grown, SITE, "access.log")
    assert (state.bytes, state.lines, state.partial) == (len(data), 33_996, 0)
    assert not land_file(grown, SITE, log)  # nothing new, nothing broken


def test_rotated_or_truncated_source_is_new_content(tmp_path, access_logs):
    lines = nasa_bytes(access_logs).split(b"\n")[:-1]
    store = LocalObjectStore(tmp_path / "lake")
    log = tmp_path / "access.log"
    log.write_bytes(b"\n".join(lines[:2000]) + b"\n")
    land_file(store, SITE, log)
    log.write_bytes(b"\n".join(lines[2000:2500]) + b"\n")  # rotated: another start
    land_file(store, SITE, log)
    assert source_lines(store) == 2500
    log.write_bytes(b"\n".join(lines[2000:3000]) + b"\n")  # the new file grew
    land_file(store, SITE, log)
    assert source_lines(store) == 3000
    log.write_bytes(b"\n".join(lines[2000:2100]) + b"\n")  # truncated: shorter than landed
    land_file(store, SITE, log)
    assert source_lines(store) == 3100  # new content by rule (Filebeat does the same)


def test_sources_are_told_apart_by_site_and_name(tmp_path, access_logs):
    lines = nasa_bytes(access_logs).split(b"\n")[:-1]
    store = LocalObjectStore(tmp_path / "lake")
    log = tmp_path / "access.log"
    log.write_bytes(b"\n".join(lines[:1000]) + b"\n")
    land_file(store, SITE, log)
    land_file(store, SITE, log, source="web2-access.log")  # same bytes: a duplicate delivery
    assert source_lines(store) == 1000  # the same objects, landed once
    log.write_bytes(b"\n".join(lines[:1500]) + b"\n")
    land_file(store, SITE, log, source="web2-access.log")
    land_file(store, SITE, log)
    assert source_lines(store) == 1500
    assert store.exists(landing_registry_key(SITE, "web2-access.log"))


def test_crash_before_the_registry_write_relands_the_same_bytes(tmp_path, access_logs):
    data = nasa_bytes(access_logs)
    store = LocalObjectStore(tmp_path / "lake")
    log = tmp_path / "access.log"
    log.write_bytes(data[: len(data) // 3])
    land_file(store, SITE, log)
    key = landing_registry_key(SITE, "access.log")
    before = store.read_bytes(key)
    log.write_bytes(data[: 2 * len(data) // 3 + 11])  # ends mid-line
    land_file(store, SITE, log)
    store.write_bytes(key, before)  # as if the process died before writing the registry
    keys = store.list_keys("landing/pageviews")
    land_file(store, SITE, log)
    assert store.list_keys("landing/pageviews") == keys  # same objects, nothing doubled
    log.write_bytes(data)
    land_file(store, SITE, log)
    assert source_lines(store) == 33_996
