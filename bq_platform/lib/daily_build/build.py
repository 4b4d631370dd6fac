"""The build of a day's rollups: the day's pageview files -> one Parquet folder per rollup
table and a :class:`~bq_platform.lib.daily_build.rollup_files.RollupFiles` manifest, written
last.

The body of the ``spark`` resource's ``build_rollups``, in the run's process or in its own
Spark application (:mod:`bq_platform.spark_apps.build_rollups`). A table whose manifest for
this content exists is not built again; a folder left by a build that did not finish is
replaced.
"""

import logging
from collections.abc import Callable, Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from bq_platform.lib.core.column_modes import with_table_modes
from bq_platform.lib.core.layout import rollup_prefix
from bq_platform.lib.daily_build.rollup_files import RollupFiles, RollupInputs, read_rollup_files
from bq_platform.lib.daily_build.rollups import AGGREGATIONS, read_pages
from bq_platform.lib.storage.base import ObjectStore
from bq_platform.lib.warehouse.schema import ROLLUP_TABLES, rollup_spec


def parquet_keys(store: ObjectStore, prefix: str) -> list[str]:
    """The Parquet files under ``prefix`` (hidden ``.``/``_`` files left out), sorted."""
    keys = []
    for key in store.list_keys(prefix):
        name = key.rsplit("/", 1)[-1]
        if name.endswith(".parquet") and not name.startswith((".", "_")):
            keys.append(key)
    return sorted(keys)


def build_rollups(
    spark: SparkSession | Callable[[], SparkSession],
    store: ObjectStore,
    inputs: RollupInputs,
    *,
    tables: Sequence[str] = ROLLUP_TABLES,
    log: logging.Logger | None = None,
) -> dict[str, RollupFiles]:
    """Write the rollups of ``inputs`` for ``tables`` and their manifests; one manifest per
    table, built now or found.

    Args:
        spark: the session, or a function that returns it (called only if a table is built).

    Raises:
        ValueError: if ``inputs`` names no file.
        ManifestError: as :func:`~bq_platform.lib.daily_build.rollup_files.read_rollup_files`.
    """
    log = log or logging.getLogger(__name__)
    found = read_rollup_files(store, inputs, tables)
    missing = [table for table, files in found.items() if files is None]
    if not missing:
        return {table: files for table, files in found.items() if files is not None}
    session = spark() if callable(spark) else spark
    pages = read_pages(session, [store.uri(key) for key in inputs.files])
    built: dict[str, RollupFiles] = {}
    for table in missing:
        prefix = rollup_prefix(table, inputs.day, inputs.fingerprint)
        # One file: a day's rollup is small, and one load URI per table.
        rows = with_table_modes(AGGREGATIONS[table](pages), rollup_spec(table).columns, table)
        rows.coalesce(1).write.mode("overwrite").parquet(store.uri(prefix))
        keys = parquet_keys(store, prefix)
        if not keys:
            raise RuntimeError(f"Spark wrote no Parquet file under {store.uri(prefix)}")
        written = session.read.parquet(*[store.uri(key) for key in keys])
        bots = "bot_pageviews" in written.columns
        totals = written.agg(
            F.count(F.lit(1)).alias("rows"),
            F.coalesce(F.sum("human_pageviews"), F.lit(0)).alias("human"),
            (F.coalesce(F.sum("bot_pageviews"), F.lit(0)) if bots else F.lit(0)).alias("bot"),
        ).first()
        files = RollupFiles(
            table=table,
            day=inputs.day,
            fingerprint=inputs.fingerprint,
            day_fingerprint=inputs.day_fingerprint,
            files=tuple(keys),
            rows=int(totals["rows"]),
            human_pageviews=int(totals["human"]),
            bot_pageviews=int(totals["bot"]),
        )
        store.write_text(files.key, files.to_json())
        log.info(
            "%s of %s: %d rows in %s (%s)",
            table,
            inputs.day,
            files.rows,
            store.uri(prefix),
            inputs.fingerprint[:12],
        )
        built[table] = files
    done = {table: files for table, files in found.items() if files is not None} | built
    return {table: done[table] for table in tables}
