"""The sandbox a submission's kernel runs in under `make grade` (docs/teaching.md, *What the sandbox
isolates*): Linux namespaces through util-linux's `unshare` and `setpriv`, no root needed.

    python -m bildlib.notebook.tutorial.sandbox CONNECTION_FILE [KERNEL ARGS]   (kernelspec()'s argv)

- a user namespace in which the kernel holds no capability (setpriv drops them all, and
  no_new_privs keeps a setuid program from giving any back);
- a mount namespace in which every file system is read-only: the repository, the course folder
  (gradebook, hidden tests, other students' folders), the package and the venv, the home folder.
  Writable are the kernel's working folder (the submission's own autograded folder, where nbgrader
  starts it) and a private, empty /tmp and /dev/shm;
- a PID namespace: the kernel is the child of a small init (this module), and when the kernel ends
  or is killed, the namespace ends and every process the submission started (`setsid`, `nohup`
  or a double fork included) is killed with it.

The network is shared: the kernel talks to nbgrader over local TCP and to the grader over an
abstract Unix socket (verdict). The checks run in the grader, so what a kernel does inside its
sandbox cannot change a grade (verdict).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

NAME = "bildlib-sandbox"
MODULE = "bildlib.notebook.tutorial.sandbox"  # this module (run with -m, its __name__ is __main__)
HIDE = "BILD_SANDBOX_HIDE"  # more folders to hide (separated by os.pathsep): the course
PSEUDO = {"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "securityfs", "debugfs",
          "tracefs", "bpf", "pstore", "configfs", "fusectl", "hugetlbfs", "binfmt_misc", "autofs"}


def available() -> str | None:
    """None where a sandbox starts here; else why not (a missing tool, namespaces refused)."""
    for tool in ("unshare", "setpriv", "mount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    p = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "true"],
                       capture_output=True, text=True)  # fmt: skip
    if p.returncode:
        return f"this system refuses unprivileged namespaces: unshare said {p.stderr.strip()!r}"
    return None


def kernelspec(folder: Path) -> Path:
    """A kernelspec `bildlib-sandbox` under folder/kernels/ (put folder on JUPYTER_PATH)."""
    d = Path(folder) / "kernels" / NAME
    d.mkdir(parents=True, exist_ok=True)
    spec = {"argv": [sys.executable, "-m", MODULE, "{connection_file}"],
            "display_name": "bildlib (sandboxed grading)", "language": "python",
            "interrupt_mode": "signal", "metadata": {"debugger": False}}  # fmt: skip
    (d / "kernel.json").write_text(json.dumps(spec, indent=1))
    return d


def outer(connection_file: str, extra: list[str]) -> None:
    """As the kernel manager starts it: the same module again, as init of new namespaces."""
    os.execvp("unshare", ["unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork",
                          "--kill-child", "--mount-proc", sys.executable, "-m", MODULE, "--inner",
                          connection_file, *extra])  # fmt: skip


def inner(connection_file: str, extra: list[str]) -> int:
    """Init of the sandbox: lay out the file systems (plan), start the kernel without
    capabilities, pass it the signals the kernel manager sends, reap, and end with it (which ends
    every process in the namespace)."""
    conn = Path(connection_file).read_text()  # before /tmp, where it may live, is replaced
    hide, scratch, keep, work = plan()
    with open("/proc/self/mountinfo") as f:
        fields = [ln.split() for ln in f]
    before = [(x[4], x[x.index("-") + 1]) for x in fields]  # (mount point, file system type)
    _mount("-t", "tmpfs", "tmpfs", "/dev/shm")  # staging: each folder kept, bound here while reachable
    staged = []
    for i, p in enumerate([*keep, work]):
        stage = Path(f"/dev/shm/{i}")
        stage.mkdir()
        _mount("--bind", str(p), str(stage))
        staged.append((p, stage, p == work))
    for point, fstype in before:  # every file system read-only
        if fstype not in PSEUDO and point != "/dev/shm":
            subprocess.run(["mount", "-o", "remount,bind,ro", point], capture_output=True)
    for p in sorted([*hide, *scratch], key=lambda q: len(q.parts)):  # parents first
        p.mkdir(parents=True, exist_ok=True)  # inside a hiding tmpfs when not there
        _mount("-t", "tmpfs", "-o", "mode=0755" if p in hide else "mode=1777", "tmpfs", str(p))
    for p, stage, writable in staged:
        p.mkdir(parents=True, exist_ok=True)
        _mount("--bind", str(stage), str(p))
        _mount("-o", f"remount,bind,{'rw' if writable else 'ro'}", str(p))
    for p in hide:
        _mount("-o", "remount,ro", str(p))
    _mount("-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm")  # over the staging
    kf = Path("/tmp/kernel.json")
    kf.write_text(conn)
    env = os.environ | {"HOME": "/tmp/home", "IPYTHONDIR": "/tmp/ipython", "MPLCONFIGDIR": "/tmp/mpl",
                        "XDG_CACHE_HOME": "/tmp/cache", "TMPDIR": "/tmp", "JPY_PARENT_PID": "1"}  # fmt: skip
    argv = ["setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--",
            sys.executable, "-m", "ipykernel_launcher", "-f", str(kf), *extra]  # fmt: skip
    child = subprocess.Popen(argv, env=env, cwd=work, process_group=0)  # signals reach it through init only
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(s, lambda sig, _: child.send_signal(sig))
    while True:  # init reaps every orphan until the kernel itself ends
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return 1
        except InterruptedError:
            continue
        if pid == child.pid:
            return os.waitstatus_to_exitcode(status) & 0xFF


def plan() -> tuple[list[Path], list[Path], list[Path], Path]:
    """(hidden, scratch, kept, work): folders an empty read-only tmpfs hides (the repository with
    its .git, tests and course solutions; the home folder; the course folder, with the hidden
    tests and every submission: BILD_SANDBOX_HIDE); folders an empty writable tmpfs replaces
    (/tmp, the repository's build/, where a notebook writes its figures); folders bound back
    read-only (the package, the data, the handouts, the Python environment); and the working
    folder, the only one of the real disk a kernel can write."""
    root = Path(__file__).resolve().parents[3]
    work = Path.cwd().resolve()
    more = [Path(p).resolve() for p in os.environ.get(HIDE, "").split(os.pathsep) if p]
    hide = {root, Path.home().resolve(), *more}
    keep = {root / "bildlib", root / "kernels", root / "data", root / "notebooks", Path(sys.prefix).resolve(),
            Path(sys.base_prefix).resolve(), root.parent / "shared"}  # fmt: skip
    if os.environ.get("BILD_DATA_DIR"):
        keep.add(Path(os.environ["BILD_DATA_DIR"]).resolve())
    hide = {p for p in hide if p.is_dir() and p != Path("/")}
    scratch = [Path("/tmp"), root / "build"]
    covered = [*hide, *scratch]
    keep = {p for p in keep if p.is_dir() and p != work and any(p.is_relative_to(h) for h in covered)}
    return sorted(hide), scratch, sorted(keep), work


def _mount(*args: str) -> None:
    p = subprocess.run(["mount", *args], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"sandbox: mount {' '.join(args)} failed: {p.stderr.strip()}")


def main(argv: list[str]) -> int:
    """CONNECTION_FILE [kernel arguments...] (a kernelspec's argv, and the kernel manager's extra
    arguments, such as nbgrader's --HistoryManager.hist_file=:memory:)."""
    if argv[:1] == ["--inner"] and len(argv) >= 2:
        return inner(argv[1], argv[2:])
    if not argv or argv[0].startswith("-"):
        raise SystemExit(f"usage: python -m {MODULE} CONNECTION_FILE [KERNEL ARGS...]")
    outer(argv[0], argv[1:])
    return 1  # not reached: outer execs


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
