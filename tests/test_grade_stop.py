"""Ctrl-C on make grade: every sandbox and kernel ends within seconds, the gradebook is as it was
before the student in progress, and a rerun grades everyone (tutorial.autograde, limits.end)."""

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from test_course import PARAMS, _submission, _write

from bildlib.notebook.tutorial import autograde, course, limits


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(ppid, []).append(int(d.name))
    return out


def _descendants(pid: int) -> set[int]:
    tree, out, todo = _children(), set(), [pid]
    while todo:
        for c in tree.get(todo.pop(), []):
            out.add(c)
            todo.append(c)
    return out


def test_ctrl_c_ends_every_kernel_and_a_rerun_grades_the_rest(tmp_path, multi30k_dir):
    built = tmp_path / "course"
    course.build(built, PARAMS)
    subs = tmp_path / "subs"
    _write(subs, "a-blank", _submission(built))
    (subs / "b-list").mkdir()  # after her: refused at the intake (no kernel: the test stays short)
    (subs / "b-list" / "tutorial.ipynb").write_text("[]")
    before = hashlib.sha256((built / "gradebook.db").read_bytes()).hexdigest()
    cli = [sys.executable, "-m", "bildlib.notebook.tutorial.autograde", str(subs), "--out", str(built)]
    p = subprocess.Popen([*cli, "--timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not limits._outers(p.pid) and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.2)
        assert limits._outers(p.pid), "no sandbox started"
        time.sleep(3)  # the kernel is running a-blank's cells
        boxed = _descendants(p.pid)
        assert len(boxed) >= 3  # unshare, the sandbox's init, the kernel
        t0 = time.monotonic()
        p.send_signal(signal.SIGINT)  # what Ctrl-C sends the grader
        out, err = p.communicate(timeout=60)
        took = time.monotonic() - t0
    finally:
        p.kill()
    assert p.returncode == 130, (out, err[-2000:])
    assert "stopped by SIGINT while grading 'a-blank'" in err and "run it again to grade the rest" in err
    assert took < 20, took
    left = [pid for pid in boxed if Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid)]
    assert not left, f"processes of the stopped sandbox still run: {left}"
    assert hashlib.sha256((built / "gradebook.db").read_bytes()).hexdigest() == before
    assert not (built / "grades.csv").exists() and not (built / "autograded" / "a-blank").exists()
    assert not list(built.glob(".grading-*"))  # the scratch course went with the stop

    t = autograde.grade(subs, built, timeout=60).set_index("student")
    assert t["score"].to_dict() == {"a-blank": 0, "b-list": 0}, t
    assert t.loc["a-blank", "error"] == "" and "holds a JSON list" in t.loc["b-list", "error"]
    assert (built / "feedback" / "a-blank" / "tutorial" / "tutorial.html").is_file()


def _state(pid: int) -> str:
    try:
        return {"Z": "zombie"}.get(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0], "")
    except OSError:
        return "zombie"  # gone between the two reads


def test_sigterm_stops_grading_as_ctrl_c_does():
    """The same handler takes SIGTERM: the loop sees it (nbgrader would swallow an exception)."""
    before = signal.getsignal(signal.SIGTERM)
    with autograde._stoppable() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.2)
    assert stop["signal"] == signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before  # the grader's own handling, back after grading
