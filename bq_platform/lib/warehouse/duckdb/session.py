"""DuckDB's settings for the local warehouse (duckdb.org/docs/stable/configuration/overview):
global to the database, except the time zone and replacement scans, set on each connection.
"""

import dataclasses

import duckdb

#: A missing table is never read from a caller's Python variable of that name (DuckDB's
#: "replacement scans", on by default in Python): it is missing, as in BigQuery.
_NO_PYTHON_TABLES = "SET python_enable_replacements = false"


@dataclasses.dataclass(frozen=True)
class SessionSettings:
    """The defaults suit many small commits on a small machine shared with a Spark driver.
    Raises ValueError if ``threads`` < 1 or ``max_vacuum_tasks`` < 0.

    Attributes:
        threads: ``SET threads``; one job uses one core.
        memory_limit: ``SET memory_limit``, beyond which DuckDB spills to disk.
        disabled_compression: ``SET disabled_compression_methods`` (comma-separated; ``""``:
            none); ``fsst,dictionary`` trades a larger file for faster loads and checkpoints.
        max_vacuum_tasks: ``SET max_vacuum_tasks``; 0 keeps checkpoints from merging row
            groups that appends left partly filled.
        auto_checkpoint_skip_wal_threshold: WAL bytes above which a commit checkpoints at once,
            blocking other commits; at 1 GB a stage load goes through the WAL.
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
        """Set every setting on the warehouse's connection, the global ones too; ValueError if
        DuckDB refuses ``disabled_compression``."""
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
