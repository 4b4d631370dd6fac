"""Lists of paths across PySpark's py4j gateway in one call each way (classic Spark only).

PySpark hands a Python list to the JVM through py4j's ``ListConverter``, one gateway round trip
per element (``DataFrameReader.text`` -> ``PythonUtils.toSeq``), and ``DataFrame.inputFiles``
reads the Java array back one element per round trip too. A build pass names every landed file
of its hours: 3,600 files at the bench's 1x input (issue 9), 4 readers of 900. Measured on the
slow machine of 2026-11-26 (``local[2]``, four readers of the 1x landing zone, first round in a
fresh JVM): readers and their ``inputFiles`` 5.0-5.6 s with PySpark's conversions, 3.9-4.0 s
with these; ``PythonUtils.toSeq`` of the 3,600 paths alone 0.5-1.2 s against 0.01-0.05 s as one
joined string (docs/PERFORMANCE.md). That time is the driver's, before the pass's first task.

The paths travel as one ``\\n``-joined string, split in the JVM (``java.util.regex.Pattern``),
and come back joined by Hadoop's ``org.apache.hadoop.util.StringUtils.join(CharSequence,
String[])`` (py4j only matches a ``String[]`` argument to a method declared with exactly that
type). A path containing ``\\n`` (no landed key can: :mod:`bq_platform.lib.core.layout`) takes
PySpark's own conversion. These use PySpark's private ``_jreader``, ``_df`` and ``_jdf``
(pyspark 4.x classic, ``pyspark/sql/readwriter.py`` and ``dataframe.py``); the build's tests
read through them on every run.
"""

from collections.abc import Sequence

from pyspark.sql import DataFrame, DataFrameReader

#: Joins the paths both ways; as a Java regular expression it matches only itself.
_SEPARATOR = "\n"


def read_text(reader: DataFrameReader, paths: Sequence[str]) -> DataFrame:
    """``reader.text(paths)``, with the paths passed to the JVM in one call.

    Args:
        reader: a ``spark.read`` with its options set (e.g. ``lineSep``).
        paths: file paths or URIs.

    Returns:
        The same DataFrame as ``reader.text(list(paths))`` (one ``value`` string column); no
        paths, or a path containing ``\\n``, go through that very call.

    Raises:
        pyspark.errors.AnalysisException: as ``reader.text``, e.g. a path that does not exist.
    """
    if not paths or any(_SEPARATOR in path for path in paths):
        return reader.text(list(paths))
    jvm = reader._spark._jvm  # noqa: SLF001 (see the module docstring)
    java_paths = jvm.java.util.regex.Pattern.compile(_SEPARATOR).split(_SEPARATOR.join(paths))
    return reader._df(reader._jreader.text(java_paths))  # noqa: SLF001


def input_files(frame: DataFrame) -> list[str]:
    """``frame.inputFiles()`` (the URIs Spark will read, no job), read back in one call.

    They are URIs (``file:///...``, ``gs://...``), so a newline in a file name comes back
    escaped (``%0A``) and cannot split one of them in two.
    """
    jvm = frame.sparkSession._jvm  # noqa: SLF001 (see the module docstring)
    joined = jvm.org.apache.hadoop.util.StringUtils.join(_SEPARATOR, frame._jdf.inputFiles())  # noqa: SLF001
    return joined.split(_SEPARATOR) if joined else []
