"""How busy the machine was while a configuration ran, recorded in its result file so that a
timing taken under contention can be told from a clean one (docs/experiments.md).

A segment is one uninterrupted stretch of a configuration's timed examples (a resumed run has
several). It records the 1-minute load average (os.getloadavg) at its start and end, this
process's CPU time, the wall time and, where Linux reports it (/proc/thread-self/schedstat),
the run-queue wait of the decoding thread: the seconds it was ready to run but had no CPU.

That wait is the contention itself, without the load average's one-minute lag. Measured on the
2-CPU development machine, 12 val sentences at 2 threads (vanilla large, vanilla small, BiLD):
alone, the decoding thread waited 0.0-0.1 % of the wall time in a plain process and 0.4-1.0 %
in a papermill kernel; beside one CPU-bound process 33-38 % (plain) and 49 % (papermill), while
vanilla large ran 3.3x and 12x slower and the load average moved from 1.06 to 1.36. Over a
whole `make figures` on the otherwise idle machine, the 52 configurations of fig4 and fig2
waited 0.9-4.8 % (mean 1.9 %). (The sum over all the process's threads is no use: a kernel's
message threads wait 4-7 % of the time on their own.) So a configuration counts as timed on a
busy machine when its decoding thread waited for a CPU more than WAIT of the wall time, twice
the most an idle run showed and a third of the least a competing process caused; where no wait
is reported, when the load average at either end of a segment exceeded the CPUs by more than
SLACK.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

WAIT = 0.10  # run-queue wait / wall time above which the timings are suspect
SLACK = 0.5  # load-average noise of an idle machine (short-lived processes)


class BusyMachineWarning(UserWarning):
    """A configuration's timings were taken on a busy machine."""


def cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_queue_wait() -> float | None:
    """Seconds the calling thread has spent runnable but without a CPU (the second field of
    Linux's schedstat); None where the kernel does not report it."""
    try:
        return int(Path("/proc/thread-self/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class Meter:
    """Started at the first timed example of a segment by the thread that decodes; segment()
    reads it from the same thread at any later point."""

    def __init__(self, first: int):
        self.first, self.load0, self.wait0 = first, os.getloadavg()[0], run_queue_wait()
        self.cpu0, self.t0 = time.process_time(), time.perf_counter()

    def segment(self, end: int) -> dict:
        """The segment of examples [first, end) so far."""
        wait = run_queue_wait()
        return {
            "examples": [self.first, end],
            "load_start": self.load0,
            "load_end": os.getloadavg()[0],
            "cpu_s": time.process_time() - self.cpu0,
            "wall_s": time.perf_counter() - self.t0,
            "wait_s": None if wait is None or self.wait0 is None else wait - self.wait0,
        }


def busy(load: dict) -> str | None:
    """Why a configuration's timings are suspect (a sentence), or None. load: a result file's
    record, {"threads", "cpus", "segments"}."""
    for s in load["segments"]:
        if s.get("wait_s") is not None:
            waited = s["wait_s"] / s["wall_s"] if s["wall_s"] > 0 else 0.0
            if waited > WAIT:
                pct, n = 100 * waited, load["cpus"]
                return f"the decoding thread waited for a CPU {pct:.0f}% of the time, on {n} CPUs"
        elif (top := max(s["load_start"], s["load_end"])) > load["cpus"] + SLACK:
            return f"load average {top:.1f} on {load['cpus']} CPUs"
    return None
