"""The Parquet files a load job reads carry the destination table's column modes.

Every load sends the table's schema, and BigQuery has refused a load whose schema marks a column
``REQUIRED`` when the Parquet file marks it optional ("Field 'x' is specified as REQUIRED in
provided schema which does not match NULLABLE as specified in the file",
googleapis/google-cloud-python#8305; the client library fixed its own writer by writing the
nullable bit, googleapis/google-cloud-python#8230). So a ``REQUIRED`` column is a required
Parquet field in every file we write, and a ``NULLABLE`` one an optional field.

Spark writes a field as required when the DataFrame's column is not nullable, and marks a
column not nullable only where it can prove it: :func:`with_table_modes` gives it that proof
without substituting any value (a null fails the write, naming the column).
"""

import datetime as dt
from collections.abc import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from bq_platform.lib.warehouse.schema import Column as TableColumn
from bq_platform.lib.warehouse.schema import normalize_mode


def is_required(column: TableColumn) -> bool:
    """True if ``column``'s mode is ``REQUIRED`` (as :func:`normalize_mode` reads it)."""
    return normalize_mode(column.mode) == "REQUIRED"


#: A constant of each BigQuery type, only to type the never-taken branch of
#: :func:`required_column`.
_UNREACHED: dict[str, object] = {
    "STRING": "",
    "INT64": 0,
    "DATE": dt.date(1970, 1, 1),
    "TIMESTAMP": dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
}
_SPARK_TYPES = {"STRING": "string", "INT64": "bigint", "DATE": "date", "TIMESTAMP": "timestamp"}


def required_column(name: str, bq_type: str, what: str) -> Column:
    """Column ``name``, not nullable in the plan's schema; a null in it raises when the row is
    computed (``raise_error``: "<what> has a null <name>, a REQUIRED column ..."), never
    written.

    ``coalesce(x, constant)`` is the only form Spark's analyzer treats as not nullable; here
    ``x`` itself raises on null, so the constant is never taken.

    Raises:
        ValueError: if ``bq_type`` is not one of STRING, INT64, DATE, TIMESTAMP.
    """
    if bq_type not in _UNREACHED:
        raise ValueError(f"no Parquet mode rule for type {bq_type!r} of column {name!r}")
    value = F.col(name)
    checked = F.when(value.isNotNull(), value).otherwise(
        F.raise_error(
            F.lit(
                f"internal error: {what} has a null {name}, a REQUIRED column of its table; "
                "nothing of this build was published. Report it with the hour's landed files."
            )
        )
    )
    unreached = F.lit(_UNREACHED[bq_type]).cast(_SPARK_TYPES[bq_type])
    return F.coalesce(checked, unreached).alias(name)


def with_table_modes(frame: DataFrame, columns: Sequence[TableColumn], what: str) -> DataFrame:
    """``frame`` with ``columns`` first, in order, each ``REQUIRED`` one not nullable
    (:func:`required_column`), then ``frame``'s other columns (a partition folder column) as
    they are. ``what`` names the rows in the error a null raises (``a pageview row``)."""
    names = [c.name for c in columns]
    rest = [name for name in frame.columns if name not in names]
    return frame.select(
        *[
            required_column(c.name, c.type, what) if is_required(c) else F.col(c.name)
            for c in columns
        ],
        *rest,
    )
