"""What DuckDB's storage compressions cost the local warehouse's stage loads (issue 9).

The local warehouse (:class:`bq_platform.lib.warehouse.duckdb.warehouse.DuckDBWarehouse`) runs each
hour's stage load job as one transaction that creates a table from the hour's Parquet files.
DuckDB compresses table data when it checkpoints (automatically, once the WAL passes
``checkpoint_threshold``, 16 MiB by default), and picking and running a compression per column
segment is CPU work paid inside those commits. This script repeats that pattern outside the
pipeline, for each setting of ``disabled_compression_methods``:

- every hour folder under ``<lake>/staging/pageviews/attempt=*/full`` is loaded into its own
  table (``CREATE TABLE ... AS SELECT * FROM read_parquet(...)``), one commit per hour;
- the first 24 hours are copied into one table, as a day's copy job does;
- the connection is closed (its final checkpoint).

It opens a fresh file per try through :class:`DuckDBWarehouse` (its session settings: UTC,
one thread, 512 MB, the compressions to disable) and prints seconds (loads, of which commits,
copy, close, total) and the file size. The lake is one that a run left, e.g.
``scripts/benchmark.py --scales 1 --keep --work W`` gives ``W/home-1x/lake``.

Usage: ``python scripts/bench_duckdb_storage.py LAKE [--rounds N] [--settings "" fsst ...]``.
"""

import argparse
import glob
import os
import tempfile
import time
from pathlib import Path

import duckdb

from bq_platform.lib.warehouse.duckdb.warehouse import DuckDBWarehouse


def one_try(full: Path, disabled: str, work: Path) -> dict[str, float]:
    """Load every hour of ``full`` with ``disabled_compression_methods = disabled``.

    Returns seconds (``loads``, ``commits``, ``copy``, ``close``, ``total``) and ``mb``, the
    database file's size in MB (10^6 bytes).
    """
    db = work / f"try-{disabled or 'auto'}.duckdb"
    for path in (db, Path(f"{db}.wal")):
        path.unlink(missing_ok=True)
    hours = sorted(p.name for p in full.iterdir() if p.is_dir())
    warehouse = DuckDBWarehouse(db, disabled_compression=disabled)
    with warehouse._connect() as con:  # the warehouse's own session settings
        started = time.monotonic()
        commits = _load_and_copy(con, full, hours)
        copied = time.monotonic()
    warehouse.close()
    closed = time.monotonic()
    return {
        "loads": commits[0] - started,
        "commits": commits[1],
        "copy": copied - commits[0],
        "close": closed - copied,
        "total": closed - started,
        "mb": db.stat().st_size / 1e6,
    }


def _load_and_copy(
    con: duckdb.DuckDBPyConnection, full: Path, hours: list[str]
) -> tuple[float, float]:
    """One table per hour (a commit each), then one day's copy; returns (loads done, commit s)."""
    commits = 0.0
    for i, hour in enumerate(hours):
        con.begin()
        con.execute(
            f"CREATE TABLE stage_{i} AS SELECT * FROM read_parquet('{full / hour}/*.parquet')"
        )
        mark = time.monotonic()
        con.commit()
        commits += time.monotonic() - mark
    loaded = time.monotonic()
    con.begin()
    con.execute(
        "CREATE TABLE day AS "
        + " UNION ALL ".join(f"SELECT * FROM stage_{i}" for i in range(min(24, len(hours))))
    )
    con.commit()
    return loaded, commits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lake", type=Path, help="a run's lake folder (BQ_PLATFORM_HOME/lake)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", nargs="+", default=["", "fsst", "fsst,dictionary"])
    args = parser.parse_args()
    found = sorted(glob.glob(str(args.lake / "staging/pageviews/attempt=*/full")))
    if not found:
        raise SystemExit(f"no staging/pageviews/attempt=*/full under {args.lake}: run the pipeline")
    full = Path(found[-1])
    print(f"{full}: {len(os.listdir(full))} hour folders, duckdb {duckdb.__version__}")
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(1, args.rounds + 1):
            for disabled in args.settings:
                r = one_try(full, disabled, Path(tmp))
                print(
                    f"round {round_no} disabled={disabled or '(none)':16} loads {r['loads']:5.2f} s"
                    f" (commits {r['commits']:5.2f} s), copy {r['copy']:4.2f} s, close "
                    f"{r['close']:4.2f} s, total {r['total']:5.2f} s, file {r['mb']:4.0f} MB"
                )


if __name__ == "__main__":
    main()
