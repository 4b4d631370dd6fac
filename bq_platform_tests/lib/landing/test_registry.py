"""The landing registry: a growing log landed again counts each line once, whatever its name,
and a landing that stops half-way is completed by the next one."""

import collections
import datetime as dt
import errno
import gzip
import json
import os
import random
from pathlib import Path

import pytest

from bq_platform.lib.core.layout import REGISTRY_PREFIX, landing_registry_key, quoted_registry_key
from bq_platform.lib.core.manifest import LandingError
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


# --- any legal file name lands; a landing that stops half-way is completed --------------------


def lines_of(data: bytes, n: int) -> bytes:
    """The first ``n`` lines of ``data``, each with its newline."""
    return b"".join(data.splitlines(keepends=True)[:n])


def complete(store: LocalObjectStore) -> bool:
    """True if no landed hour has a data file without its manifest."""
    return not any(hour.orphans for hour in scan_landing(store).hours())


LONG_NAMES = {
    "80 x u-umlaut (160 bytes)": "ü" * 80,
    "255 ASCII bytes": "a" * 251 + ".log",
    "255 bytes, not UTF-8": os.fsdecode(b"\xfc" * 251 + b".log"),
}


@pytest.mark.parametrize("name", LONG_NAMES.values(), ids=LONG_NAMES.keys())
def test_a_name_past_255_bytes_lands_and_a_growing_log_counts_each_line_once(
    tmp_path, access_logs, name
):
    data = nasa_bytes(access_logs)
    log = tmp_path / name
    assert len(os.fsencode(log.name)) in (160, 255)
    store = LocalObjectStore(tmp_path / "lake")
    log.write_bytes(lines_of(data, 3_000))
    land_file(store, SITE, log)
    log.write_bytes(data)
    land_file(store, SITE, log)
    assert not land_file(store, SITE, log)  # landed again: nothing new
    whole = LocalObjectStore(tmp_path / "whole")
    land_file(whole, SITE, log, source="access.log")
    assert source_lines(store) == 33_996
    assert landed_lines(store) == landed_lines(whole)
    key = landing_registry_key(SITE, name)
    assert len(key.rsplit("/", 1)[1]) <= 255 and store.exists(key)
    assert read_state(store, SITE, name).source == name


def test_an_entry_under_the_url_quoted_key_is_still_honoured(tmp_path, access_logs):
    """A data folder whose registry holds ``<source, URL-quoted>.json`` lands only new lines."""
    data = nasa_bytes(access_logs)
    store = LocalObjectStore(tmp_path / "lake")
    log = tmp_path / "web 1 access.log"
    log.write_bytes(data[: len(lines_of(data, 3_000)) + 20])  # ends mid-line
    land_file(store, SITE, log)
    hashed = landing_registry_key(SITE, log.name)
    quoted = quoted_registry_key(SITE, log.name)
    assert quoted.endswith("/web%201%20access.log.json")
    entry = json.loads(store.read_bytes(hashed))
    del entry["pending_from"]
    store.write_text(quoted, json.dumps(entry))
    Path(store.uri(hashed)).unlink()

    log.write_bytes(data)
    land_file(store, SITE, log)

    whole = LocalObjectStore(tmp_path / "whole")
    land_file(whole, SITE, log)
    assert source_lines(store) == 33_996
    assert landed_lines(store) == landed_lines(whole)
    assert read_state(store, SITE, log.name).bytes == len(data)
    assert store.exists(hashed)


def test_an_entry_of_another_source_is_refused_naming_both(tmp_path, access_logs):
    data = nasa_bytes(access_logs)
    store = LocalObjectStore(tmp_path / "lake")
    (tmp_path / "a.log").write_bytes(lines_of(data, 100))
    (tmp_path / "b.log").write_bytes(lines_of(data, 200))
    land_file(store, SITE, tmp_path / "a.log")
    a_entry = store.read_bytes(landing_registry_key(SITE, "a.log"))
    store.write_bytes(landing_registry_key(SITE, "b.log"), a_entry)  # a copied entry
    with pytest.raises(LandingError) as refused:
        land_file(store, SITE, tmp_path / "b.log")
    message = str(refused.value)
    assert message.startswith(str(tmp_path / "b.log"))
    assert "of source 'a.log'" in message and "not of 'b.log'" in message
    assert "delete it to land 'b.log' from byte 0" in message


class WriteFails:
    """Makes :meth:`LocalObjectStore.write_bytes` raise ``OSError`` (a full disk) at the
    ``fail_at``-th write (0-based, None: never) whose key starts with ``prefix``; counts such
    writes, and notes whether it failed one."""

    def __init__(self, monkeypatch, prefix: str = "") -> None:
        self.fail_at, self.prefix, self.writes, self.failed = None, prefix, 0, False
        real = LocalObjectStore.write_bytes

        def write_bytes(store, key, data):
            if key.startswith(self.prefix):
                self.writes += 1
                if self.writes - 1 == self.fail_at:
                    self.failed = True
                    raise OSError(errno.ENOSPC, "No space left on device", store.uri(key))
            real(store, key, data)

        monkeypatch.setattr(LocalObjectStore, "write_bytes", write_bytes)


def land_stopped_then_grown(
    tmp_path, data: bytes, fails: WriteFails, fail_at: int | None
) -> tuple[LocalObjectStore, int]:
    """Land a growing log three times (each copy but the last ending mid-line), the second
    landing failing at its ``fail_at``-th write of ``fails``; return the store and how many
    writes of ``fails`` the second landing made."""
    store = LocalObjectStore(tmp_path / "lake")
    log = tmp_path / "access.log"
    cut_1 = len(lines_of(data, 1_500)) + 30
    cut_2 = len(lines_of(data, 3_000)) + 17
    log.write_bytes(data[:cut_1])
    land_file(store, SITE, log)
    log.write_bytes(data[:cut_2])  # the partial line grew: its object is rewritten
    fails.writes, fails.fail_at, fails.failed = 0, fail_at, False
    try:
        land_file(store, SITE, log)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    assert fails.failed == (fail_at is not None)
    fails.fail_at, writes = None, fails.writes
    log.write_bytes(data)  # grew again before the next landing
    land_file(store, SITE, log)
    return store, writes


@pytest.mark.parametrize("registry_write", [0, 1], ids=["pending entry", "final entry"])
def test_a_registry_write_that_fails_once_is_completed_by_the_next_landing(
    tmp_path, access_logs, monkeypatch, registry_write
):
    data = lines_of(nasa_bytes(access_logs), 4_000)
    whole = LocalObjectStore(tmp_path / "whole")
    (tmp_path / "whole.log").write_bytes(data)
    land_file(whole, SITE, tmp_path / "whole.log")

    fails = WriteFails(monkeypatch, prefix=REGISTRY_PREFIX)
    store, _ = land_stopped_then_grown(tmp_path, data, fails, registry_write)

    assert source_lines(store) == 4_000  # every line exactly once
    assert landed_lines(store) == landed_lines(whole)
    assert complete(store)
    assert read_state(store, SITE, "access.log").pending_from is None


def test_a_landing_stopped_at_any_write_is_completed_by_the_next(
    tmp_path, access_logs, monkeypatch
):
    data = lines_of(nasa_bytes(access_logs), 4_000)
    whole = LocalObjectStore(tmp_path / "whole")
    (tmp_path / "whole.log").write_bytes(data)
    land_file(whole, SITE, tmp_path / "whole.log")
    fails = WriteFails(monkeypatch)
    _, writes = land_stopped_then_grown(tmp_path / "count", data, fails, None)
    assert writes >= 6  # two entries and at least two objects with their manifests

    for fail_at in range(writes):
        store, _ = land_stopped_then_grown(tmp_path / str(fail_at), data, fails, fail_at)
        assert source_lines(store) == 4_000, f"write {fail_at} failed"
        assert landed_lines(store) == landed_lines(whole), f"write {fail_at} failed"
        assert complete(store), f"write {fail_at} failed"


def test_a_stopped_landing_of_a_file_rotated_since_is_named_in_a_warning(
    tmp_path, access_logs, monkeypatch, caplog
):
    data = lines_of(nasa_bytes(access_logs), 4_000)
    store = LocalObjectStore(tmp_path / "lake")
    log = tmp_path / "access.log"
    log.write_bytes(data[: len(lines_of(data, 1_000))])
    land_file(store, SITE, log)
    log.write_bytes(data[: len(lines_of(data, 2_000))])
    fails = WriteFails(monkeypatch)
    fails.fail_at = 1  # after the pending entry, the first object
    with pytest.raises(OSError):
        land_file(store, SITE, log)
    fails.fail_at = None
    log.write_bytes(data[len(lines_of(data, 3_000)) :])  # rotated: other content

    with caplog.at_level("WARNING"):
        land_file(store, SITE, log)

    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "source 'access.log' for ksc.nasa.gov stopped" in warning
    assert "cannot be rebuilt" in warning
    assert read_state(store, SITE, "access.log").bytes == len(data) - len(lines_of(data, 3_000))
