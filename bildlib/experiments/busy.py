"""How busy the machine was while a configuration ran, recorded in its result file so that a
timing taken under contention can be told from a clean one (README, Experiments).

A segment is one uninterrupted stretch of a configuration's timed examples (a resumed run has
several): the 1-minute load average (os.getloadavg) at its start and end, this process's CPU
time and the wall time. A segment ran on a busy machine when the other processes' load plus the
run's own threads exceeded the CPUs by more than SLACK: the load average at either end, minus
this process's own share (its CPU time / wall time, the threads it kept running), plus
`threads`, above cpus + SLACK. On a 2-CPU machine at 2 threads that is any other load above
SLACK; a second sweep beside it counts about 2.
"""

from __future__ import annotations

import os
import time


class BusyMachineWarning(UserWarning):
    """A configuration's timings were taken on a busy machine."""


SLACK = 0.5  # load-average noise of an idle machine (short-lived processes)


def cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class Meter:
    """Started at the first timed example of a segment; segment() reads it at any later point."""

    def __init__(self, first: int):
        self.first, self.load0 = first, os.getloadavg()[0]
        self.cpu0, self.t0 = time.process_time(), time.perf_counter()

    def segment(self, end: int) -> dict:
        """The segment of examples [first, end) so far."""
        return {
            "examples": [self.first, end],
            "load_start": self.load0,
            "load_end": os.getloadavg()[0],
            "cpu_s": time.process_time() - self.cpu0,
            "wall_s": time.perf_counter() - self.t0,
        }


def others(seg: dict) -> float:
    """The load of other processes during a segment: the larger load average at its ends minus
    this process's own average use of the CPUs."""
    own = seg["cpu_s"] / seg["wall_s"] if seg["wall_s"] > 0 else 0.0
    return max(seg["load_start"], seg["load_end"]) - own


def busy(load: dict) -> str | None:
    """Why a configuration's timings are suspect (a sentence), or None. load: a result file's
    record, {"threads", "cpus", "segments"}."""
    free = load["cpus"] - load["threads"] + SLACK  # what other processes may use without contention
    worst = max((others(s) for s in load["segments"]), default=0.0)
    if worst > free:
        return (
            f"other processes' load {worst:.1f} with {load['threads']} threads of its own "
            f"on {load['cpus']} CPUs"
        )
    return None
