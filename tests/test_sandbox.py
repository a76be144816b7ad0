"""The grading sandbox's file system is a list (tutorial.sandbox.allowed): a kernel started in it
sees exactly the planned mounts and nothing else of the host, runs as nobody where the grader is
root, and what it writes never reaches the folders nbgrader reads back. Checked on the property
itself: the kernel's whole mount table and every file of its root, not a list of paths tried."""

import json
import os
import stat
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from bildlib.notebook.tutorial import limits, sandbox
from conftest import REPO

PROBE = r"""
import json, os, stat
mounts = [ln.split()[4] for ln in open("/proc/self/mountinfo")]
loose = []  # what the root's own tmpfs holds besides folders and links: nothing but passwd and group
for top, dirs, files in os.walk("/"):
    dirs[:] = [d for d in dirs if os.path.join(top, d) not in mounts]
    loose += [os.path.join(top, f) for f in files if os.path.join(top, f) not in mounts]
def writable(p):
    try:
        with open(os.path.join(p, ".probe"), "w"):
            pass
        return True
    except OSError:
        return False
import resource, socket
def reach(addr):  # a TCP connect to a public resolver, and to this host's loopback
    try:
        socket.create_connection(addr, timeout=3).close()
        return True
    except OSError:
        return False
limits = {n: resource.getrlimit(getattr(resource, n))[0] for n in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE",
          "RLIMIT_FSIZE", "RLIMIT_CORE", "RLIMIT_NPROC")}
nets = [ln.split(":")[0].strip() for ln in open("/proc/net/dev").readlines()[2:]]
try:
    big = bytearray(9 << 30)  # past RLIMIT_AS: refused, never touched
    greedy = "allocated"
except MemoryError:
    greedy = "MemoryError"
import sys
before, kind = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10, type(sys.stdout).__name__
own = sys.stdout.write
sys.stdout.write = print  # as IPython's tee does for every cell: the stream's own write should stay
kept = sys.stdout.write == own
try:
    del sys.stdout.write  # where it was replaced, the class's own again
except AttributeError:
    pass
for _ in range(4096):  # 256 MiB to stderr, in a tight loop (the test reads stdout only)
    sys.stderr.write("z" * 65536)
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
history = [o.output_type for o in get_ipython().history_manager.outputs[get_ipython().execution_count]]
print(json.dumps({"stream": {"kind": kind, "kept": kept, "grew": grew, "history": history},
                  "limits": limits, "nets": nets, "greedy": greedy,
                  "reach": [reach(("1.1.1.1", 53)), reach(("127.0.0.1", 22))],
                  "cgroup": open("/proc/self/cgroup").read(), "mounts": mounts, "loose": sorted(loose),
                  "uid": os.getuid(), "gid": os.getgid(),
                  "groups": os.getgroups(), "cwd": os.getcwd(), "here": sorted(os.listdir(".")),
                  "writable": {p: writable(p) for p in mounts if os.path.isdir(p)},
                  "env": sorted(os.environ)}))
"""


def _run_in_sandbox(tmp_path: Path, work: Path, code: str, env: dict | None = None) -> dict:
    sandbox.kernelspec(tmp_path / "jupyter")
    sockets = tmp_path / "sockets"  # the kernel has no network: its sockets' folder, as make grade makes it
    sockets.mkdir()
    if os.geteuid() == 0:
        os.chown(sockets, sandbox.NOBODY, sandbox.NOBODY)
    old = {k: os.environ.get(k) for k in ["JUPYTER_PATH", *(env or {})]}
    os.environ |= {"JUPYTER_PATH": str(tmp_path / "jupyter")} | (env or {})
    try:
        km = KernelManager(kernel_name=sandbox.NAME, transport="ipc", ip=str(sockets / "k"))
        km.start_kernel(cwd=str(work))
        kc = km.client()
        kc.start_channels()
        kc.wait_for_ready(timeout=120)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    try:
        out, msg_id = [], kc.execute(code)
        while True:
            m = kc.get_iopub_msg(timeout=120)
            if m["parent_header"].get("msg_id") != msg_id:
                continue
            if m["msg_type"] == "stream" and m["content"]["name"] == "stdout":
                out.append(m["content"]["text"])
            if m["msg_type"] == "error":
                raise AssertionError("\n".join(m["content"]["traceback"]))
            if m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                return json.loads("".join(out)) | {"host": _cgroup_limits()}
    finally:
        km.shutdown_kernel(now=True)
        limits.end()  # its cgroups, as make grade removes them


def _cgroup_limits() -> dict:
    """What the host's cgroup files say of the running kernel's limits (as the grader sees them)."""
    out = {}
    for base in limits._hierarchies().values():
        for g in limits._group(base, os.getpid()).glob("k*"):
            for name in ("memory.max", "memory.limit_in_bytes", "pids.max"):
                if (g / name).is_file():
                    out[name] = int((g / name).read_text().split()[0])
    return out


@pytest.fixture(scope="module")
def probed(tmp_path_factory, multi30k_dir):
    if why := sandbox.available():
        pytest.skip(f"no sandbox starts here: {why}")
    tmp = tmp_path_factory.mktemp("sandbox")
    work, outside = tmp / "course" / "autograded" / "alice", tmp / "outside.txt"
    work.mkdir(parents=True)
    outside.write_text("the grader's")
    (work / "tutorial.ipynb").write_text("{}")
    (work / "link.ipynb").symlink_to(outside)  # what a submission left: none of it is copied in
    os.mkfifo(work / "fifo")
    secret = {"BILD_VERDICT": "bild-verdict-x", "AWS_SECRET_ACCESS_KEY": "k", "HF_TOKEN": "t"}
    got = _run_in_sandbox(tmp, work, PROBE, secret | {sandbox.COURSE: str(tmp / "course")})
    return got, tmp, work, outside


def test_the_kernel_sees_only_what_the_plan_lists(probed):
    got, tmp, work, _ = probed
    cwd = Path.cwd()
    os.chdir(work)
    try:
        plan = sandbox.allowed()  # as the kernel's init saw it: from its working folder
    finally:
        os.chdir(cwd)
    etc = {f"/etc/{n}" for n in sandbox.ETC if Path("/etc", n).exists()}
    dev = {f"/dev/{n}" for n in sandbox.DEVICES if Path("/dev", n).exists()}
    expected = {"/", "/proc", "/dev", *dev, *etc, *map(str, plan["bind"] + plan["scratch"] + plan["build"]),
                str(work), str(tmp / "sockets")} | {f"/{n}" for n in ("bin", "lib", "lib64", "sbin")
                                                    if Path("/", n).is_dir()
                              and not Path("/", n).is_symlink()}  # fmt: skip
    assert set(got["mounts"]) == expected and len(got["mounts"]) == len(expected)
    assert got["loose"] == ["/etc/group", "/etc/passwd"]  # the root itself holds no host file
    repo = REPO
    for hidden in (tmp / "course", tmp / "outside.txt", Path.home(), repo / ".git", repo / "tests"):
        assert not any(hidden.is_relative_to(p) for p in plan["bind"]), hidden  # the host's, bound
    assert all(str(p) not in got["writable"] or not got["writable"][str(p)] for p in plan["bind"])
    assert got["writable"][str(work)] and got["writable"]["/tmp"]
    assert not got["writable"]["/"] and not got["writable"]["/usr"]


def test_the_kernel_is_nobody_where_the_grader_is_root(probed):
    got = probed[0]
    if os.geteuid() == 0:
        assert (got["uid"], got["gid"], got["groups"]) == (sandbox.NOBODY, sandbox.NOBODY, [])
    else:  # a user namespace: root inside, the grader's own uid outside
        assert got["uid"] == 0
    assert "AWS_SECRET_ACCESS_KEY" not in got["env"] and "HF_TOKEN" not in got["env"]
    assert "BILD_VERDICT" in got["env"]  # the grader's socket: the one thing it is told


def test_the_kernel_has_its_limits_and_no_network(probed):
    """Set before it starts (tutorial.limits): address space, CPU time, open files, file size, no
    core; processes by a pids cgroup or RLIMIT_NPROC; memory by a cgroup where one can be made.
    Its network namespace holds only a loopback that is down: no host is reached."""
    got = probed[0]
    L = limits
    assert got["limits"]["RLIMIT_AS"] == L.ADDRESS_SPACE and got["limits"]["RLIMIT_CPU"] == L.CPU_SECONDS
    assert got["limits"]["RLIMIT_NOFILE"] == L.OPEN_FILES and got["limits"]["RLIMIT_FSIZE"] == L.FILE_BYTES
    assert got["limits"]["RLIMIT_CORE"] == 0
    assert got["nets"] == ["lo"] and got["reach"] == [False, False], got
    assert got["greedy"] == "MemoryError"
    host = got["host"]  # what the host's cgroup files say of this kernel: the cgroups enter() could make
    if "pids.max" in host:
        assert host["pids.max"] == L.PROCESSES
    elif os.geteuid() == 0:  # no pids cgroup here: the per-uid limit of nobody
        assert got["limits"]["RLIMIT_NPROC"] == L.PROCESSES
    if memory := host.get("memory.max", host.get("memory.limit_in_bytes")):
        assert memory == L.KERNEL_MEMORY
        assert f"{L.PARENT}/g{os.getpid()}/k" in got["cgroup"], got["cgroup"]  # named after the grader
    v1 = (L.CGROUP / "memory" / "memory.limit_in_bytes").is_file()  # v1: nothing to hand down, so it is made
    if os.geteuid() == 0 and v1 and "memory" in L._hierarchies():
        assert memory, "a root grader on a writable cgroup v1 memory hierarchy made no memory cgroup"


def test_a_flood_of_output_stays_out_of_the_kernels_memory(probed):
    """The kernel's stdout and stderr are stream.BoundedOutStream: IPython's tee cannot replace their
    write, so its output history keeps no stream text, and 256 MiB written in a tight loop grows
    the kernel by far less than itself (ipykernel and IPython alone held all of it)."""
    got = probed[0]["stream"]
    assert got["kind"] == "BoundedOutStream" and got["kept"] and got["history"] == [], got
    assert got["grew"] < 64 << 20, got


def test_what_the_kernel_writes_stays_in_the_box(probed):
    got, tmp, work, outside = probed
    assert got["here"] == ["tutorial.ipynb"]  # a private copy of the regular files: no link, no FIFO
    assert sorted(p.name for p in work.iterdir()) == ["fifo", "link.ipynb", "tutorial.ipynb"]  # no .probe
    assert outside.read_text() == "the grader's" and stat.S_ISFIFO(os.lstat(work / "fifo").st_mode)


def test_a_course_folder_the_kernel_would_see_is_refused(monkeypatch):
    root = REPO
    monkeypatch.setenv(sandbox.COURSE, str(root / "notebooks" / "course"))  # inside a bound folder
    with pytest.raises(SystemExit, match="course folder .*notebooks/course lies in .*notebooks, which a"):
        sandbox._refuse_overlap(sandbox.allowed())
    monkeypatch.setenv(sandbox.COURSE, str(root / "build" / "course"))  # make course's default: unseen
    sandbox._refuse_overlap(sandbox.allowed())
