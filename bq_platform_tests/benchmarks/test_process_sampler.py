"""The bench's process sampler (benchmarks/process_sampler.py): memory and CPU of a whole tree."""

import subprocess
import sys
import time

from process_sampler import TreeSampler

#: A Python child that starts a Python grandchild; each spins on the CPU for ``SPIN`` seconds.
SPIN = 0.6
_SPIN = f"import time\nend = time.process_time() + {SPIN}\nwhile time.process_time() < end: pass\n"
_PARENT = (
    "import subprocess, sys\n"
    f"child = subprocess.Popen([sys.executable, '-c', {_SPIN!r}])\n"
    f"{_SPIN}"
    "child.wait()\n"
)


def test_the_sampler_adds_up_the_cpu_of_every_python_process_in_the_tree() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _PARENT])
    sampler = TreeSampler(proc.pid, interval=0.05)
    sampler.start()
    proc.wait()
    sampler.stop()
    sampler.join()
    # two processes of SPIN CPU seconds each; a process's last interval may be missed
    assert 2 * SPIN - 0.3 <= sampler.cpu["python"] <= 2 * SPIN + 0.5
    assert sampler.cpu["jvm"] == 0.0
    assert sampler.peaks["python"] > 1  # MiB: a Python interpreter's resident size


def test_a_finished_tree_keeps_its_last_samples() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _SPIN])
    sampler = TreeSampler(proc.pid, interval=0.05)
    sampler.start()
    proc.wait()
    time.sleep(0.2)  # samples after the exit find nothing, and change nothing
    sampler.stop()
    assert SPIN - 0.2 <= sampler.cpu["python"] <= SPIN + 0.3


def test_a_process_that_execs_into_python_is_counted_as_python() -> None:
    # as spark-submit's shell script execs java in the same process
    script = f"sleep 0.3; exec {sys.executable} -c '{_SPIN}'"
    proc = subprocess.Popen(["sh", "-c", script])
    sampler = TreeSampler(proc.pid, interval=0.05)
    sampler.start()
    proc.wait()
    sampler.stop()
    assert SPIN - 0.2 <= sampler.cpu["python"] <= SPIN + 0.3
