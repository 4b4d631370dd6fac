"""Peak memory and CPU seconds of a process tree, JVMs and Python processes apart, from /proc.

``benchmarks/benchmark.py`` samples every step's subprocess tree with :class:`TreeSampler`: the
peak resident size (``VmHWM``, the kernel's high-water mark) and the CPU time (``utime`` +
``stime`` of ``/proc/<pid>/stat``, proc(5)) of each ``java`` and ``python*`` process in the
tree. CPU seconds say what wall time on a busy 2-core machine cannot: how much work a step
did, whatever else ran.
"""

import os
import threading
from pathlib import Path

#: Kinds of process kept apart, by program name (the first word of the command line).
KINDS = ("jvm", "python")
_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


def stat_fields(text: str) -> list[str]:
    """The fields of a ``/proc/<pid>/stat`` or ``/proc/<pid>/task/<tid>/stat`` line after the
    command name (which may hold blanks and parentheses): ``[0]`` is proc(5)'s field 3, the
    state, ``[1]`` the parent's pid."""
    return text.rsplit(")", 1)[1].split()


def cpu_seconds(fields: list[str]) -> float:
    """CPU seconds of a process or thread, user plus system (proc(5): fields 14 ``utime`` and 15
    ``stime``, in clock ticks), from :func:`stat_fields`."""
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_SECOND


def _kind(pid: int) -> str | None:
    try:
        program = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0]
    except OSError:
        return None
    name = program.rsplit(b"/", 1)[-1]
    return "jvm" if name == b"java" else "python" if name.startswith(b"python") else None


class TreeSampler(threading.Thread):
    """Samples the process tree under ``root`` every ``interval`` seconds until :meth:`stop`.

    Attributes:
        peaks: peak resident size per kind, MiB (the largest process of the kind).
        cpu: CPU seconds per kind, summed over the kind's processes: each process's last
            sample, so a process's last ``interval`` seconds before it exits are not seen
            (at most ~0.2 s per process at the default interval, x its cores).
    """

    def __init__(self, root: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root, self.interval = root, interval
        self.peaks: dict[str, float] = dict.fromkeys(KINDS, 0.0)
        self._cpu: dict[int, tuple[str, float]] = {}  # pid -> (kind, CPU seconds so far)
        self._stopping = threading.Event()

    @property
    def cpu(self) -> dict[str, float]:
        totals = dict.fromkeys(KINDS, 0.0)
        for kind, seconds in self._cpu.values():
            totals[kind] += seconds
        return totals

    def _tree(self) -> dict[int, list[str]]:
        """The ``/proc/<pid>/stat`` fields after the command name, for ``root`` and its
        descendants."""
        children: dict[int, list[int]] = {}
        stats: dict[int, list[str]] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat_fields(stat.read_text())
            except OSError:
                continue
            pid = int(stat.parent.name)
            stats[pid] = fields
            children.setdefault(int(fields[1]), []).append(pid)
        out, todo = {}, [self.root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                out[pid] = stats[pid]
            todo += children.get(pid, [])
        return out

    def sample(self) -> None:
        """One sample of every process in the tree."""
        for pid, fields in self._tree().items():
            kind = _kind(pid)  # each time: spark-submit's shell execs java in the same pid
            if kind is None:
                continue
            self._cpu[pid] = (kind, cpu_seconds(fields))
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    self.peaks[kind] = max(self.peaks[kind], int(line.split()[1]) / 1024)

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.sample()

    def stop(self) -> None:
        self._stopping.set()
