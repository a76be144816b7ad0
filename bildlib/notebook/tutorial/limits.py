"""What a graded kernel may spend, set before it starts (docs/teaching.md, *Limits*), and how the
grader ends every sandbox it started.

- memory: the sandbox's processes together in a memory cgroup of KERNEL_MEMORY (cgroup v2's
  memory.max, else v1's memory.limit_in_bytes, where the grader may make one: as root), and each
  process's address space at most ADDRESS_SPACE (RLIMIT_AS, everywhere; torch reserves about 1 GiB
  of it that it never touches);
- processes: PROCESSES in a pids cgroup where there is one, else RLIMIT_NPROC where the kernel
  runs as nobody (that limit counts a uid's processes, the grader's own where it is not root);
- CPU time CPU_SECONDS per process (RLIMIT_CPU), open files OPEN_FILES (RLIMIT_NOFILE), a file
  it writes FILE_BYTES (RLIMIT_FSIZE), no core dumps;
- the network: none (an empty network namespace: sandbox; the kernel reaches nbgrader and the
  grader through Unix sockets in a folder of its own);
- what the grader itself spends on a kernel's behalf is bounded where it takes the request:
  frames (wire.MAX_FRAME), tokens per model call and calls per exercise (verdict.Budget), and the
  notebook's output (autograde's BoundedExecute keeps OUTPUT_BYTES and drops the rest);
- output in the kernel: its stdout and stderr hold at most STREAM_BYTES before a write waits for
  the send (stream.BoundedOutStream), so a cell printing without end never fills its memory.

The cgroups live under <hierarchy>/bildlib-sandbox/g<grader pid>/k<kernel pid>: `outer` (the
kernel's first process, on the host) makes its own and enters it, so everything the kernel starts
is in it; the grader kills what is left and removes them (`end`).
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
from pathlib import Path

GIB = 1 << 30
KERNEL_MEMORY = 3 * GIB  # the sandbox's resident memory, all its processes together (cgroup)
ADDRESS_SPACE = 8 * GIB  # per process (RLIMIT_AS): the tutorial's kernel maps about 2 GiB at 1 thread
GRADER_MEMORY = 4 * GIB  # the budget make grade holds: the grader's own peak resident memory
PROCESSES = 256  # tasks (threads count) in the sandbox
CPU_SECONDS = 3600  # per process
OPEN_FILES = 1024
FILE_BYTES = 256 << 20  # one file the kernel writes (its tmpfs folders are 256 MiB each)
OUTPUT_BYTES = 4 << 20  # of a notebook's outputs kept by the grader; the rest is dropped, and said so
SETUP_SECONDS = 300  # the course's own leading cells at least (execute.BoundedExecute), whatever --timeout
STREAM_BYTES = 64 << 10  # the kernel's stdout (or stderr) holds before a write waits for the send (stream)
CGROUP = Path("/sys/fs/cgroup")
SANDBOX = "bildlib.notebook.tutorial.sandbox"  # the module a sandbox's first process runs (sandbox.MODULE)
PARENT = "bildlib-sandbox"


def _hierarchies() -> dict[str, Path]:
    """{"memory": folder, "pids": folder} where this process may make cgroups (v2, else v1)."""
    v2 = CGROUP / "cgroup.controllers"
    if v2.is_file():
        have = set(v2.read_text().split())
        return {c: CGROUP for c in ("memory", "pids") if c in have and os.access(CGROUP, os.W_OK)}
    return {c: CGROUP / c for c in ("memory", "pids") if os.access(CGROUP / c, os.W_OK)}


def _group(base: Path, grader: int, kernel: int | None = None) -> Path:
    g = base / PARENT / f"g{grader}"
    return g if kernel is None else g / f"k{kernel}"


def enter(grader: int) -> list[str]:
    """In the kernel's first process (on the host, before the namespaces): make this process's
    cgroups with their limits and move into them. [what was limited this way]; nothing where no
    cgroup can be made (the rlimits still hold)."""
    done = []
    for ctl, base in _hierarchies().items():
        try:
            g = _group(base, grader, os.getpid())
            if base == CGROUP:  # v2: the parents must hand the controller down
                for p in (base / PARENT, base / PARENT / f"g{grader}"):
                    p.mkdir(exist_ok=True)
                    (p.parent / "cgroup.subtree_control").write_text(f"+{ctl}")
            g.mkdir(parents=True, exist_ok=True)
            if ctl == "memory":
                v2 = (g / "memory.max").exists()
                (g / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(KERNEL_MEMORY))
                swap = g / ("memory.swap.max" if v2 else "memory.memsw.limit_in_bytes")  # no way around it
                if swap.exists():
                    swap.write_text("0" if v2 else str(KERNEL_MEMORY))
            else:
                (g / "pids.max").write_text(str(PROCESSES))
            (g / "cgroup.procs").write_text(str(os.getpid()))
            done.append(ctl)
        except OSError:
            continue
    return done


def rlimits(nobody: bool, cgroups: list[str]) -> None:
    """The per-process limits, in the process that then execs the kernel (inherited by its children)."""
    limits = {resource.RLIMIT_AS: ADDRESS_SPACE, resource.RLIMIT_CPU: CPU_SECONDS, resource.RLIMIT_CORE: 0,
              resource.RLIMIT_NOFILE: OPEN_FILES, resource.RLIMIT_FSIZE: FILE_BYTES}  # fmt: skip
    if nobody and "pids" not in cgroups:
        limits[resource.RLIMIT_NPROC] = PROCESSES
    for r, v in limits.items():
        _soft, hard = resource.getrlimit(r)
        v = v if hard == resource.RLIM_INFINITY else min(v, hard)
        resource.setrlimit(r, (v, v))


def end(grader: int | None = None) -> None:
    """Kill every sandbox this grader started (its cgroups' processes, else each `outer` process,
    whose end ends the namespace) and remove its cgroups."""
    grader = grader or os.getpid()
    for _ in range(50):
        pids = set(_outers(grader))
        for base in _hierarchies().values():
            for g in _group(base, grader).glob("k*"):
                with contextlib.suppress(OSError, ValueError):
                    pids |= {int(p) for p in (g / "cgroup.procs").read_text().split()}
        if not pids:
            break
        for p in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.1)
    for base in _hierarchies().values():
        top = _group(base, grader)
        for g in [*top.glob("k*"), top]:
            with contextlib.suppress(OSError):
                g.rmdir()


def _outers(grader: int) -> list[int]:
    """The sandboxes' first processes among this grader's children (unshare, or the module itself)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == grader and SANDBOX.encode() in (d / "cmdline").read_bytes():
                out.append(int(d.name))
    return out
