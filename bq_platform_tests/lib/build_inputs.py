"""What the build tests feed the build: landed files as a producer writes them, the bundled
logs' lines by UTC hour, odd lines, the hours of the slice they use, and the visitor key.

Shared by ``test_build*.py`` and the tests of what reads the build's inputs or outputs
(deliveries, landing index, dead letters, plans, the runner).
"""

import collections
import datetime as dt
import gzip
import hashlib
from pathlib import Path

import pyarrow.parquet as pq

from bq_platform.lib.core import layout
from bq_platform.lib.core import logformat as lf
from bq_platform.lib.core.manifest import LandedManifest
from bq_platform.lib.storage.base import crc32c
from bq_platform.lib.storage.local import LocalObjectStore

#: The visitor key of the build tests. Their slice (:mod:`bq_platform_tests.lib.built_slice`)
#: has ~200 page visitors, so about one is sampled on average; this key's sample holds 4 of
#: them (``test_landing_build.py``'s full-log test checks the rate on all visitors).
KEY = "build-test-key-5"
NASA, EPA = "ksc.nasa.gov", "epa.gov"


def utc(*args: int) -> dt.datetime:
    """``dt.datetime(*args)`` in UTC."""
    return dt.datetime(*args, tzinfo=dt.UTC)


#: Hours of the bundled logs the build tests land: two of each site's, and one without data.
H_NASA_1, H_NASA_2, H_EMPTY = utc(1995, 8, 1, 4), utc(1995, 8, 1, 5), utc(1995, 8, 1, 6)
H_EPA_1, H_EPA_2 = utc(1995, 8, 30, 3), utc(1995, 8, 30, 4)
#: Real lines per landed file the build tests land (a slice keeps them fast).
PER_HOUR = 700

#: Odd lines appended to NASA's 04:00 file: empty, garbage, next hour, bad status, hour 24,
#: IPv6 with a trailing CR, and a truncated last line.
ODD = [
    b"",
    b"garbage \xff\xfe",
    b'h - - [01/Aug/1995:01:30:00 -0400] "GET /next-hour.html HTTP/1.0" 200 1',  # 05 UTC
    b'h - - [01/Aug/1995:00:30:00 -0400] "GET / HTTP/1.0" 2000 1',
    b'h - - [31/Jul/1995:24:30:00 -0400] "GET / HTTP/1.0" 200 1',
    b'2001:db8::1 - - [01/Aug/1995:00:59:59 -0400] "GET /v6.html HTTP/1.0" 200 -\r',
    b'h - - [01/Aug/1995:00:31:00 -0400] "GET /trunc',  # last line, no newline
]


def land(
    store: LocalObjectStore,
    site: str,
    hour: dt.datetime,
    lines: list[bytes],
    *,
    name: str | None = None,
    final_newline: bool = True,
    manifest_lines: int | None = None,
) -> LandedManifest:
    """Write a landed gzip file and (last) its manifest, as a producer would."""
    body = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    lines_n = len(lines) if manifest_lines is None else manifest_lines
    return deliver(store, site, hour, gzip.compress(body, mtime=0), lines_n, name=name)


def deliver(
    store: LocalObjectStore,
    site: str,
    hour: dt.datetime,
    data: bytes,
    lines: int,
    *,
    name: str | None = None,
    source: str = "test",
    with_crc32c: bool = False,
) -> LandedManifest:
    """Write ``data`` as a landed file (named by its SHA-256, or ``name``) and, last, its
    manifest saying ``lines``; ``with_crc32c``: the manifest has the CRC32C too, as
    ``bq-platform land`` writes it (a producer's may not)."""
    sha = hashlib.sha256(data).hexdigest()
    key = layout.landed_data_key(site, hour, sha)
    if name is not None:
        key = f"{layout.landing_hour_prefix(site, hour)}/{name}"
    manifest = LandedManifest(
        site=site,
        hour=hour,
        data_key=key,
        lines=lines,
        bytes=len(data),
        sha256=sha,
        source=source,
        crc32c=crc32c(data) if with_crc32c else "",
    )
    store.write_bytes(key, data)
    store.write_text(layout.landed_manifest_key(key), manifest.to_json())
    return manifest


def real_lines(access_logs: Path) -> dict[tuple[str, dt.datetime], list[bytes]]:
    """The bundled logs' lines by (site, UTC hour), in file order."""
    out: dict[tuple[str, dt.datetime], list[bytes]] = collections.defaultdict(list)
    for site in (NASA, EPA):
        (path,) = (access_logs / site).glob("*.log.gz")
        for raw in gzip.decompress(path.read_bytes()).split(b"\n")[:-1]:
            ts = lf.parse_clf_timestamp(raw.decode("utf-8", errors="replace"))
            assert ts is not None
            out[(site, ts.replace(minute=0, second=0))].append(raw)
    return out


def parquet_rows(store: LocalObjectStore, keys: tuple[str, ...]) -> list[tuple]:
    """Every row of the Parquet files ``keys``, each as sorted ``(column, str(value))`` pairs,
    sorted: two builds' outputs compare equal whatever their files' split and row order."""
    rows = []
    for key in keys:
        for row in pq.read_table(store.uri(key)).to_pylist():
            rows.append(tuple(sorted((k, str(v)) for k, v in row.items())))
    return sorted(rows)
