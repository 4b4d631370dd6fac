"""Paths to the JVM and input files back in one py4j call (``lib/py4j_lists.py``, issue 9)."""

import gzip

import pytest
from pyspark.sql import DataFrame, DataFrameReader

from bq_platform.lib.py4j_lists import input_files, read_text


def _files(tmp_path, names: list[str]) -> list[str]:
    """One gzip file per name, each two lines naming the file; their paths."""
    paths = []
    for name in names:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.compress(f"{name} 1\n{name} 2\n".encode()))
        paths.append(str(path))
    return paths


def _refuse_per_element_conversions(monkeypatch, frame: DataFrame) -> None:
    """PySpark's own ``text`` and ``inputFiles`` (of ``frame``'s class: classic Spark's)
    convert one element per gateway call."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("went through PySpark's per-element conversion")

    monkeypatch.setattr(DataFrameReader, "text", refuse)
    monkeypatch.setattr(type(frame), "inputFiles", refuse)


def test_read_text_and_input_files_match_pysparks_own_calls(spark, tmp_path, monkeypatch) -> None:
    names = [f"site=s{i}/hour=1995-08-01T0{i % 3}/part {i}%.log.gz" for i in range(40)]
    paths = _files(tmp_path, names)
    expected_frame = spark.read.option("lineSep", "\n").text(paths)
    expected_rows = sorted(r.value for r in expected_frame.collect())
    expected_files = sorted(expected_frame.inputFiles())

    _refuse_per_element_conversions(monkeypatch, expected_frame)
    frame = read_text(spark.read.option("lineSep", "\n"), paths)

    assert sorted(r.value for r in frame.collect()) == expected_rows
    assert len(expected_rows) == 80
    assert sorted(input_files(frame)) == expected_files
    assert len(expected_files) == 40


def test_reader_options_still_apply(spark, tmp_path) -> None:
    (path,) = _files(tmp_path, ["one.log.gz"])
    frame = read_text(spark.read.option("lineSep", " "), [path])
    assert [r.value for r in frame.collect()] == ["one.log.gz", "1\none.log.gz", "2\n"]


def test_no_paths_and_a_newline_in_a_path_take_pysparks_own_call(spark, monkeypatch) -> None:
    calls = []

    def recording_text(self, paths, *args, **kwargs):
        calls.append(list(paths))
        return spark.range(0)

    monkeypatch.setattr(DataFrameReader, "text", recording_text)
    read_text(spark.read, [])
    read_text(spark.read, ["/data/a.log.gz", "/data/odd\nname.log.gz"])
    assert calls == [[], ["/data/a.log.gz", "/data/odd\nname.log.gz"]]


def test_input_files_of_a_frame_without_files_is_empty(spark) -> None:
    assert input_files(spark.range(3)) == []


def test_a_missing_path_fails_as_pysparks_call_does(spark, tmp_path) -> None:
    with pytest.raises(Exception, match="PATH_NOT_FOUND|does not exist"):
        read_text(spark.read, [str(tmp_path / "missing.log.gz")])


def test_a_newline_in_a_file_name_is_read_back_whole(spark, tmp_path) -> None:
    """Spark's input files are URIs: the newline comes back as ``%0A``, not as a separator."""
    paths = _files(tmp_path, ["odd\nname.log.gz", "plain.log.gz"])
    frame = read_text(spark.read, paths)
    assert sorted(input_files(frame)) == sorted(frame.inputFiles())
    assert len(input_files(frame)) == 2
    assert frame.count() == 6  # the name, written into the file, holds a newline too
