"""What every connection to the local warehouse file runs with: DuckDB's session settings.

Each default is chosen for this workload (many small commits of hourly stage loads, a daily
copy of ~255k rows, a 2-core machine next to a Spark driver) and was measured (issue 9,
docs/PERFORMANCE.md). Settings are global to the DuckDB database except the time zone and
replacement scans, which each connection (the warehouse's and each job worker's cursor) sets.
"""

import dataclasses

import duckdb

#: A table name DuckDB does not find is never read from a Python variable of that name in the
#: caller's frame (DuckDB's "replacement scans", on by default in its Python client): a missing
#: table is a missing table, as in BigQuery.
_NO_PYTHON_TABLES = "SET python_enable_replacements = false"


@dataclasses.dataclass(frozen=True)
class SessionSettings:
    """DuckDB settings of :class:`~bq_platform.lib.warehouse.duckdb.warehouse.DuckDBWarehouse`.

    Attributes:
        threads: DuckDB worker threads (``SET threads``). One by default: a stage load moves
            ~10k rows, too few to gain from a second thread, and on the 2-core machine two
            threads cost 40-65% more CPU for the loads and copies of a 3-day run (144 loads,
            6 copies, 765k rows: 13.0-15.3 s against 9.1-9.4 s of CPU; issue 9).
        memory_limit: DuckDB's buffer memory (``SET memory_limit``; beyond it DuckDB spills to
            disk). Its default is 80% of the RAM (duckdb.org/docs/stable/configuration/overview)
            and this is the run's driver process: 1,376 MiB at 16x the bench's lines (issue 9).
        disabled_compression: DuckDB storage compressions not to use when a checkpoint writes
            tables (``SET disabled_compression_methods``, comma-separated;
            duckdb.org/docs/stable/configuration/overview). ``fsst,dictionary`` by default
            (issue 9, docs/PERFORMANCE.md):

            - ``fsst``: compressing strings with FSST was 15-25% of the time of a 1x run's 72
              stage loads and one copy (4.0-4.5 s without it, 5.2-5.3 s with it), for a file
              ~30% smaller (156 -> 108-111 MB; ``scripts/bench_duckdb_storage.py``);
            - ``dictionary``: a checkpoint of the 1x run's 765,710 stage rows took 0.44-0.47 s
              without it against 0.80-0.83 s with it (about half of the difference is
              ``event_id`` and ``visitor_id``, unique per row: their dictionaries are built,
              then dropped). Whole 1x runs, 7 pairs alternating: 26.0-27.1 s (mean 26.6)
              against 26.8-27.6 s (mean 27.2); the three days' copies 0.77-0.81 s against
              0.99-1.04 s. The warehouse file is ~50% larger (the 1x run's: 366 against
              241 MB).

            ``""`` lets DuckDB use every method (its default).
        max_vacuum_tasks: DuckDB's ``max_vacuum_tasks`` (``duckdb_settings()``: "the maximum
            vacuum tasks to schedule during a checkpoint"; DuckDB's default is 100). 0 by
            default: a day's copy appends ~255k rows to ``pageviews`` after a partly filled row
            group, and the checkpoint at the end of the daily run then merged them again: 0.26 s
            of a 0.8 s copy-and-close, against 0.03 s without vacuum (issue 9). Six re-publishes
            of the 1x bench's days (a DELETE and an INSERT each) kept the file at 284-298 MB and
            12 row groups without vacuum, 304-364 MB with it: row groups whose rows are all
            deleted are dropped either way (docs/PERFORMANCE.md).
        auto_checkpoint_skip_wal_threshold: DuckDB's setting of that name, in bytes
            (``duckdb_settings()``: "the estimated WAL write size at which point we will skip
            writing to the WAL and only checkpoint. Skipping writing to the WAL means concurrent
            commits are blocked while the checkpoint is happening"; DuckDB's default is
            100,000). 1 GB by default: a stage load (~10k rows, ~2 MB) that fills the WAL past
            ``checkpoint_threshold`` (16 MiB) is then written to the WAL before the checkpoint,
            and the other worker's load and the publish records do not wait for it. The 144
            stage loads of the 1x bench on two workers: their commits 2.0 -> 1.5 s, the
            publish-record INSERTs 0.84 -> 0.41 s, the loads 2.05-2.08 -> 1.82-1.89 s; a larger
            ``checkpoint_threshold`` only moved the work to the close (issue 9,
            docs/PERFORMANCE.md).

    Raises:
        ValueError: if ``threads`` is below 1 or ``max_vacuum_tasks`` below 0.
    """

    threads: int = 1
    memory_limit: str = "512MB"
    disabled_compression: str = "fsst,dictionary"
    max_vacuum_tasks: int = 0
    auto_checkpoint_skip_wal_threshold: int = 1_000_000_000

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ValueError(f"threads must be at least 1, got {self.threads}")
        if self.max_vacuum_tasks < 0:
            raise ValueError(f"max_vacuum_tasks must be at least 0, got {self.max_vacuum_tasks}")

    def apply(self, con: duckdb.DuckDBPyConnection) -> None:
        """Set every setting on the warehouse's connection (the database's global ones too).

        Raises:
            ValueError: if DuckDB refuses ``disabled_compression``.
        """
        self.apply_to_cursor(con)
        con.execute(f"SET threads = {int(self.threads)}")
        con.execute("SET memory_limit = ?", [self.memory_limit])
        con.execute(f"SET max_vacuum_tasks = {int(self.max_vacuum_tasks)}")
        skip_wal = int(self.auto_checkpoint_skip_wal_threshold)
        con.execute(f"SET auto_checkpoint_skip_wal_threshold = {skip_wal}")
        try:
            con.execute("SET disabled_compression_methods = ?", [self.disabled_compression])
        except duckdb.Error as exc:
            raise ValueError(
                f"disabled_compression={self.disabled_compression!r}: DuckDB refused "
                f"it ({exc}); give names such as 'fsst,dictionary', or '' for none"
            ) from exc

    @staticmethod
    def apply_to_cursor(cursor: duckdb.DuckDBPyConnection) -> None:
        """The per-connection settings: UTC (TIMESTAMPTZ -> DATE casts, naive parameters and
        returned values use it), and no Python variables as tables."""
        cursor.execute("SET TimeZone = 'UTC'")
        cursor.execute(_NO_PYTHON_TABLES)
