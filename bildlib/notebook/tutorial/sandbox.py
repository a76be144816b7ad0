"""The sandbox a submission's kernel runs in under `make grade` (docs/teaching.md, *What the sandbox
isolates*): Linux namespaces through util-linux's `unshare`, `mount`, `pivot_root` and `setpriv`.

    python -m bildlib.notebook.tutorial.sandbox CONNECTION_FILE [KERNEL ARGS]   (kernelspec()'s argv)

The kernel's file system is a list of what it may see, not of what it may not (allowed()): an
empty root, with only the system's programs and libraries, the Python environment, the package,
its data and the handouts bound into it read-only, and a few device files. Its working folder (a
private copy of the regular files nbgrader put there), /tmp, /dev/shm and the repository's build/
are empty or copied tmpfs, writable and discarded with the kernel: nothing it writes reaches the
folders nbgrader reads back. Nothing else of the host exists for it: not the course folder
(gradebook, hidden tests, other submissions), not the repository's .git, tests or solutions, not
the home folder, not another checkout, not /etc beyond what the dynamic loader reads.

- A grader that is root: a mount and a PID namespace made as root, then the kernel runs as uid
  and gid 65534 (nobody) with no supplementary group, so the host checks a nobody's rights.
- Any other grader: a user namespace too (no root needed), the kernel as the grader's uid.
- Either way the kernel holds no capability (setpriv drops them all; no_new_privs keeps a setuid
  program from giving any back), and it is the child of a small init (this module): when the
  kernel ends or is killed, the PID namespace ends, and every process the submission started
  (`setsid`, `nohup` or a double fork included) is killed with it.

It has no network (an empty network namespace): it talks to nbgrader and to the grader (verdict)
through Unix sockets in one folder the grader made for it (the connection file's `ip` with
transport "ipc"), bound into its root writable. What it may spend is limited before it starts
(tutorial.limits). The checks run in the grader: what a kernel does here cannot change a grade.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path

from bildlib.notebook.tutorial import limits

NAME = "bildlib-sandbox"
MODULE = limits.SANDBOX  # this module (run with -m, its __name__ is __main__)
OUTSTREAM = "bildlib.notebook.tutorial.stream.BoundedOutStream"  # the kernel's stdout, stderr (stream)
NOBODY = 65534  # the kernel's uid and gid on the host where the grader is root
ROOT = Path("/dev/shm")  # where the new root is built, in the namespace only (its tmpfs hides the host's)
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "hosts", "nsswitch.conf", "host.conf",
       "alternatives")  # fmt: skip  # what the dynamic loader and Python read; no passwd, shadow or keys
COURSE = "BILD_SANDBOX_COURSE"  # a folder the kernel must not see: the grader names the course folder
ENV = {"PATH", "LANG", "LANGUAGE", "TZ", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
       "VIRTUAL_ENV", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TRITON_INTERPRET"}  # fmt: skip
ENV_PREFIXES = ("BILD_", "LC_", "OMP_", "MKL_", "JPY_")  # and these (BILD_VERDICT: the grader's socket)
WORK_FILES, WORK_BYTES = 200, 64 << 20  # the working folder copied in: at most this many files, bytes
TMPFS = "size=256m,nr_inodes=16k"  # each writable folder of the kernel's (a memory cgroup counts it)
CGROUPS = "_BILD_SANDBOX_CGROUPS"  # outer tells inner which limits a cgroup holds (not passed on)


def _root_grader() -> bool:
    return os.geteuid() == 0


def available() -> str | None:
    """None where a sandbox starts here; else why not (a missing tool, namespaces refused)."""
    for tool in ("unshare", "setpriv", "mount", "pivot_root", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    p = subprocess.run(["unshare", *_namespaces(), "true"], capture_output=True, text=True)
    if p.returncode:
        return f"this system refuses the namespaces: unshare said {p.stderr.strip()!r}"
    return None


def _namespaces() -> list[str]:
    user = [] if _root_grader() else ["--user", "--map-root-user"]
    return [*user, "--mount", "--pid", "--net", "--fork"]


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
    mode = "--inner-nobody" if _root_grader() else "--inner"  # inside, both are uid 0: say which it is
    os.environ[CGROUPS] = ",".join(limits.enter(os.getppid()))  # before the namespaces: all of it is in them
    os.execvp("unshare", ["unshare", *_namespaces(), "--kill-child", "--mount-proc", sys.executable, "-m",
                          MODULE, mode, connection_file, *extra])  # fmt: skip


def allowed() -> dict[str, list[Path]]:
    """What the kernel's root holds: {"bind": host folders bound read-only at their own paths,
    "scratch" and "build": empty writable tmpfs, "work": [the working folder, copied in]}. The system's
    programs and libraries, the Python environment, the package, the data and the handouts."""
    from bildlib import REPO_ROOT as root  # the checkout (or $BILD_HOME): its data and handouts
    python = {Path(sys.prefix), Path(sys.base_prefix), Path(sys.exec_prefix),
              Path(sys.executable).resolve().parents[1]}  # fmt: skip
    data = [root / "data", root.parent / "shared" / "data"]
    if os.environ.get("BILD_DATA_DIR"):
        data.append(Path(os.environ["BILD_DATA_DIR"]))
    package = Path(__file__).resolve().parents[2]  # bildlib/, wherever it is installed
    bind = {Path("/usr"), *python, package, root / "kernels", root / "notebooks", *data,
            Path("/sys/devices/system/cpu"), Path("/sys/devices/system/node")}  # fmt: skip
    bind = {p.resolve() for p in bind if p.is_dir()}
    bind = sorted(p for p in bind if not any(p != q and p.is_relative_to(q) for q in bind))  # outermost
    return {
        "bind": bind,
        "scratch": [Path("/tmp"), Path("/dev/shm")],
        "build": [root / "build"],
        "work": [Path.cwd().resolve()],
    }


def inner(connection_file: str, extra: list[str], nobody: bool) -> int:
    """Init of the sandbox: build the root (allowed()), move into it, start the kernel without
    capabilities (and as nobody where the grader is root), pass it the signals the kernel
    manager sends, reap, and end with it (which ends every process in the namespace)."""
    conn = Path(connection_file).read_text()
    plan, uid = allowed(), NOBODY if nobody else None  # None: the user namespace's own uid, kept
    plan["sockets"] = [_sockets(conn)]
    _refuse_overlap(plan)
    _mount("-t", "tmpfs", "-o", "mode=0755", "tmpfs", str(ROOT))
    _dev()
    (ROOT / "proc").mkdir()
    _mount("-t", "proc", "proc", str(ROOT / "proc"))
    for p in plan["scratch"]:  # /tmp and /dev/shm first: a folder bound or copied below may lie under them
        _tmpfs(p, "mode=1777")
    for p in plan["bind"]:
        _bind(p)
    (sockets,) = plan["sockets"]  # under /tmp: after its tmpfs
    (ROOT / sockets.relative_to("/")).mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(sockets), str(ROOT / sockets.relative_to("/")))
    for name in ("bin", "lib", "lib64", "sbin", "lib32", "libx32"):  # merged /usr: links; else folders
        host = Path("/") / name
        if host.is_symlink():
            (ROOT / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            _bind(host)
    _etc()
    for p in plan["build"]:  # the figures a notebook draws: under the repository, after its binds
        _tmpfs(p, "mode=1777")
    (work,) = plan["work"]
    _tmpfs(work, "mode=0755")
    _copy_regular(work, ROOT / work.relative_to("/"), uid)
    (ROOT / ".old").mkdir()
    run("pivot_root", str(ROOT), str(ROOT / ".old"))
    os.chdir("/")
    run("umount", "-l", "/.old")  # the host's tree leaves the namespace
    os.rmdir("/.old")
    run("mount", "-o", "remount,bind,ro", "/")
    kf = Path("/tmp/kernel.json")
    kf.write_text(conn)
    _own(kf, uid)
    env = {k: v for k, v in os.environ.items() if k in ENV or k.startswith(ENV_PREFIXES)}
    env |= {"HOME": "/tmp/home", "IPYTHONDIR": "/tmp/ipython", "MPLCONFIGDIR": "/tmp/mpl", "TMPDIR": "/tmp",
            "XDG_CACHE_HOME": "/tmp/cache", "JPY_PARENT_PID": "1", "MALLOC_ARENA_MAX": "2"}  # fmt: skip
    who = [f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid is not None else []
    argv = ["setpriv", *who, "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--",
            sys.executable, "-m", "ipykernel_launcher", "-f", str(kf),
            f"--IPKernelApp.outstream_class={OUTSTREAM}", *extra]  # fmt: skip
    cgroups = [c for c in os.environ.get(CGROUPS, "").split(",") if c]
    child = subprocess.Popen(argv, env=env, cwd=work, process_group=0,  # signals reach it through init only
                             preexec_fn=lambda: limits.rlimits(nobody, cgroups))  # fmt: skip
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


def _sockets(conn: str) -> Path:
    """The folder of the kernel's Unix sockets, from its connection file: it has no network."""
    c = json.loads(conn)
    folder = Path(str(c.get("ip", ""))).parent
    if c.get("transport") != "ipc" or not folder.is_absolute() or folder == Path("/"):
        raise SystemExit("sandbox: the kernel has no network; start it with transport 'ipc' and an `ip` "
                         "in a folder of its own (KernelManager.transport, KernelManager.ip)")  # fmt: skip
    if folder.is_symlink() or not folder.is_dir():
        raise SystemExit(f"sandbox: the sockets' folder {folder} is not a folder")
    return folder.resolve()


def _refuse_overlap(plan: dict) -> None:
    """The course folder (COURSE) must not lie in what is bound, nor anything under the root being built."""
    course = [Path(v).resolve() for v in os.environ.get(COURSE, "").split(os.pathsep) if v]
    for c in course:
        if seen := [p for p in plan["bind"] if c.is_relative_to(p)]:
            raise SystemExit(f"sandbox: the course folder {c} lies in {seen[0]}, which a kernel sees; "
                             "build the course elsewhere (make course COURSE=...)")  # fmt: skip
    if any(p.is_relative_to(ROOT) for p in [*plan["bind"], *plan["work"], *plan.get("sockets", [])]):
        raise SystemExit(f"sandbox: a folder it binds is under {ROOT}, where it builds its root")
    if [p for p in plan["bind"] if plan["work"][0].is_relative_to(p)]:
        raise SystemExit(f"sandbox: the working folder {plan['work'][0]} lies in a folder bound read-only")


def _bind(host: Path) -> None:
    """host (a folder or a file), read-only, at its own path in the new root (folders above it:
    empty, 0755)."""
    dest = ROOT / host.relative_to("/")
    if host.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.touch()
    else:
        dest.mkdir(parents=True, exist_ok=True)
    _mount("--bind", str(host), str(dest))
    _mount("-o", "remount,bind,ro", str(dest))


def _tmpfs(path: Path, mode: str) -> None:
    dest = ROOT / path.relative_to("/")
    dest.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"{mode},{TMPFS}", "tmpfs", str(dest))


def _etc() -> None:
    """/etc: the loader's cache and a few name-service files, and a passwd and group naming only
    root and nobody."""
    etc = ROOT / "etc"
    etc.mkdir()
    for name in ETC:
        host = Path("/etc") / name
        if host.is_dir() and not host.is_symlink() or host.is_file():
            _bind(host)
    users = f"root:x:0:0::/tmp/home:/bin/sh\nnobody:x:{NOBODY}:{NOBODY}::/tmp/home:/bin/sh\n"
    (etc / "passwd").write_text(users)
    (etc / "group").write_text(f"root:x:0:\nnogroup:x:{NOBODY}:\n")


def _dev() -> None:
    dev = ROOT / "dev"
    _tmpfs(Path("/dev"), "mode=0755")
    for name in DEVICES:
        if Path("/dev", name).exists():
            (dev / name).touch()
            _mount("--bind", f"/dev/{name}", str(dev / name))
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):  # fmt: skip
        (dev / name).symlink_to(target)


def _copy_regular(src: Path, dest: Path, uid: int | None) -> None:
    """The working folder's regular files and folders (no link, FIFO or device), owned by uid."""
    n = size = 0
    for top, dirs, files in os.walk(src):  # does not follow links to folders
        rel = Path(top).relative_to(src)
        for d in dirs:
            if not os.path.islink(os.path.join(top, d)):
                (dest / rel / d).mkdir(exist_ok=True)
                _own(dest / rel / d, uid)
        for f in files:
            st = os.lstat(os.path.join(top, f))
            n, size = n + 1, size + st.st_size
            if stat.S_ISREG(st.st_mode) and n <= WORK_FILES and size <= WORK_BYTES:
                shutil.copyfile(os.path.join(top, f), dest / rel / f, follow_symlinks=False)
                _own(dest / rel / f, uid)
    _own(dest, uid)


def _own(path: Path, uid: int | None) -> None:
    if uid is not None:
        os.chown(path, uid, uid)


def run(*argv: str) -> None:
    """A system command (mount, umount, pivot_root); its failure ends the sandbox, naming it."""
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"sandbox: {' '.join(argv)} failed: {p.stderr.strip()}")


def _mount(*args: str) -> None:
    run("mount", *args)


def main(argv: list[str]) -> int:
    """CONNECTION_FILE [kernel arguments...] (a kernelspec's argv, and the kernel manager's extra
    arguments, such as nbgrader's --HistoryManager.hist_file=:memory:)."""
    if argv[:1] in (["--inner"], ["--inner-nobody"]) and len(argv) >= 2:
        return inner(argv[1], argv[2:], nobody=argv[0] == "--inner-nobody")
    if not argv or argv[0].startswith("-"):
        raise SystemExit(f"usage: python -m {MODULE} CONNECTION_FILE [KERNEL ARGS...]")
    outer(argv[0], argv[1:])
    return 1  # not reached: outer execs


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
