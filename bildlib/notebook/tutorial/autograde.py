"""`make grade`: autograde a folder of submissions in the course that tutorial.course builds, each
in a sandbox, with points a submission cannot touch (docs/teaching.md, *What the sandbox isolates*).

    python -m bildlib.notebook.tutorial.autograde SUBMISSIONS [--out build/course] [--timeout 300]

SUBMISSIONS holds one folder per student with their notebook in it, or in nbgrader's collected
layout, <student>/tutorial/tutorial.ipynb. Each student is graded in a scratch course of their
own, from a fresh copy of the regular files of their folder, and only then published: their
earlier submission, autograded copy and feedback replaced, their row written into the gradebook in
one step that touches no other row (tutorial.gradebook). Ctrl-C or SIGTERM ends the kernel at
once and leaves the gradebook as it was before the student in progress.

- a folder name that is not a plain name (nbgrader globs it), a link, FIFO or device anywhere in
  the folder, none or two notebooks, and a notebook too large or not valid notebook JSON: 0 and a
  one-line reason, and no kernel (tutorial.intake);
- `nbgrader autograde` runs the notebook in a sandboxed kernel (tutorial.sandbox): its file system
  holds only the system, the Python environment, the package, its data and the handouts, read-only,
  and a private copy of its working folder; nothing it writes reaches a folder nbgrader reads back,
  and every process it started ends with it; what it may spend is limited (tutorial.limits); a
  cell timeout is its row's error (the course's setup cells get >= 300 s: tutorial.execute);
- each hidden test serves the student's function to the grader in this process, which runs the
  exercise's check (tutorial.verdict) and writes the points into nbgrader's gradebook: a hidden
  test that never reached the grader, or whose check failed, scores 0 whatever the kernel printed.

<out>/grades.csv is then written from the gradebook: every student graded so far, in this run or
an earlier one, with their points per exercise and the error of their latest grading
(<out>/grading.json); the feedback HTML of each student graded in this run (the others keep
theirs) is rendered after anything in their autograded folder that is not a regular file is
removed (named in the row).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pandas as pd

from bildlib import data
from bildlib.notebook.tutorial import execute, gradebook, grading, intake, limits, sandbox, verdict
from bildlib.notebook.tutorial.checks import EXERCISES
from bildlib.notebook.tutorial.course import ASSIGNMENT, BUILD, TIMEOUT, build, lab_settings


def submissions(folder: Path) -> dict[str, Path | str]:
    """{student id: their folder of files (the student's folder, or its tutorial/ in nbgrader's
    collected layout), or why it is refused (one line)}. A name that is not a plain name, a link
    in place of a folder, a link, FIFO, device or second hard link anywhere in the folder, none or
    two notebooks: a reason, so that the other students are still graded (tutorial.intake)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"SUBMISSIONS={folder}: no such folder (one folder per student inside)")
    out: dict[str, Path | str] = {}
    for d in sorted(folder.iterdir()):
        if d.is_file() and not d.is_symlink():
            continue  # a README or a list beside the students' folders
        if why := intake.student_name(d.name):
            out[d.name] = f"the folder name {d.name!r} {why}: rename it"
        elif d.is_symlink() or not d.is_dir():
            out[d.name] = f"{d.name} is {intake.kind(os.lstat(d)) or 'not a folder'}, not a student's folder"
        elif (why := intake.tree(d)[1]) or (why := _notebook(folder, d)):
            out[d.name] = why
        else:
            out[d.name] = d / ASSIGNMENT if (d / ASSIGNMENT).is_dir() and not list(d.glob("*.ipynb")) else d
    if not out:
        raise ValueError(f"SUBMISSIONS={folder} holds no student folders (<student>/tutorial.ipynb)")
    return out


def _notebook(folder: Path, d: Path) -> str:
    """Why d does not hold exactly one notebook (directly in it, or in its tutorial/)."""
    found = sorted(d.glob("*.ipynb")) + sorted((d / ASSIGNMENT).glob("*.ipynb"))
    if len(found) == 1:
        return ""
    which = f": {', '.join(str(f.relative_to(folder)) for f in found)}" if found else ""
    return f"expected one notebook, found {len(found)}{which} (one student, one notebook)"


def grade(folder: Path, out: Path = BUILD, timeout: int | None = None) -> pd.DataFrame:
    """Autograde every student of folder in the course at out (built first if it is not), with
    timeout seconds per cell (None: TIMEOUT); returns grades.csv's table (every student graded
    so far), which is rewritten after each student. SIGINT or SIGTERM ends the kernel in progress
    and raises Stopped, with the gradebook as it was before that student."""
    out, timeout = Path(out).resolve(), timeout or TIMEOUT
    if why := sandbox.available():
        raise RuntimeError(f"make grade runs each submission in a sandbox, and none starts here: {why} "
                           "(docs/teaching.md, What the sandbox isolates)")  # fmt: skip
    if not (out / "release" / ASSIGNMENT).is_dir() or not (out / "course.json").is_file():
        build(out, timeout=timeout)
    subs = submissions(folder)  # an empty folder is refused before anything is graded
    lab, opened = lab_settings(out), []  # exercise 3's pair: opened at its first check, per student

    def check(n, fn):
        if n == 3 and not opened:
            from bildlib.notebook.tutorial.lab import open_lab

            opened.append(open_lab(lab["preset"], lab["split"], lab["n_examples"], lab["device"],
                                   lab["dtype"], lab["threads"]))  # fmt: skip
        return grading.check(n, fn, lab, opened[0] if n == 3 else None)

    sandbox.kernelspec(out / "jupyter")
    gradebook.pristine(out)
    notes = _notes(out)
    with _stoppable() as stop:
        for student, src in subs.items():
            opened.clear()  # exercise 3's pair anew: a write through a lent handle ends with its student
            if isinstance(src, str):  # refused, no kernel; a name that is not a name: not in the gradebook
                if not intake.student_name(student):
                    _publish(out, student, None, None)
                notes[student] = src
            else:
                notes[student] = _one(out, student, src, check, timeout, stop)
            with data.atomic_path(out / "grading.json") as tmp:
                tmp.write_text(json.dumps(notes, indent=1, sort_keys=True))
            table = grades(out, notes)
            with data.atomic_path(out / "grades.csv") as tmp:  # row by row: a crash keeps the graded rows
                table.to_csv(tmp, index=False)
            row = table.set_index("student").loc[student]
            why = f" ({notes[student]})" if notes[student] else ""
            name = repr(student) if intake.student_name(student) else student
            print(f"{name}: {row['score']:g} of {row['max_score']:g}{why}", flush=True)
    return table


class Stopped(Exception):
    """make grade was interrupted (SIGINT, SIGTERM): the student in progress is not graded."""


@contextlib.contextmanager
def _stoppable():
    """SIGINT and SIGTERM end every sandbox of this grader at once (limits.end) and set stop["signal"];
    nbgrader catches what a signal would raise, so the grading loop checks it."""
    stop: dict = {"signal": None}

    def handler(sig, _frame):
        stop["signal"] = sig
        limits.end()

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        limits.end()


def _one(out: Path, student: str, src: Path, check, timeout: int, stop: dict) -> str:
    """One student graded in a scratch course of their own (tutorial.gradebook), then published
    into the course: the note for their row ("" when nothing went wrong)."""
    scratch = Path(tempfile.mkdtemp(prefix=".grading-", dir=out))  # in the course: hidden from the kernel
    sockets = Path(tempfile.mkdtemp(prefix="bild-", dir="/tmp"))  # short: a socket's path has <= 107 bytes
    try:
        shutil.copyfile(out / gradebook.PRISTINE, scratch / gradebook.DB)
        dest = scratch / "submitted" / student / ASSIGNMENT
        files, changed = intake.tree(src)  # again: the folder may have changed since submissions()
        changed = changed or intake.copy(src, files, dest)
        if changed or len(nbs := list(dest.glob("*.ipynb"))) != 1:
            _publish(out, student, None, None)
            return changed or f"{student}'s notebook changed while make grade ran: hand it in again"
        if bad := intake.notebook(nbs[0]):
            _publish(out, student, None, None)
            return f"not a valid notebook: {bad}"
        if os.geteuid() == 0:  # a tmpfs of 1 MiB: what the kernel may write on the host is its sockets
            sandbox.run("mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=64,mode=0700", "tmpfs", str(sockets))
            os.chown(sockets, sandbox.NOBODY, sandbox.NOBODY)  # the kernel makes its sockets there
        server = verdict.Server(check, timeout, sockets)
        path = os.pathsep.join([str(out / "jupyter"), os.environ.get("JUPYTER_PATH", "")])  # its kernelspec
        env = server.env | {sandbox.COURSE: str(out), "JUPYTER_PATH": path}
        try:
            with execute.environ(env):
                api = execute.api(scratch, timeout, sockets, out)
                r = api.autograde(ASSIGNMENT, student, force=True, create=True)
        finally:
            server.close()
            limits.end()  # nothing of the kernel's outlives it
        if stop["signal"] is not None:
            raise Stopped(f"stopped by {signal.Signals(stop['signal']).name} while grading {student!r}")
        return _finish(api, out, scratch, student, server.results, r, timeout)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if os.path.ismount(sockets):
            subprocess.run(["umount", "-l", str(sockets)], capture_output=True)
        shutil.rmtree(sockets, ignore_errors=True)


def _finish(api, out: Path, scratch: Path, student: str, results: dict, r: dict, timeout: int) -> str:
    """The scratch course's points, feedback and files into the course; the row's note. api: the
    nbgrader API on the scratch course that autograded it."""
    pts = gradebook.points(results)
    with gradebook.open_db(scratch / gradebook.DB) as gb:
        gradebook.record(gb, student, pts)
        if why := gradebook.only(gb, student):
            raise RuntimeError(why)
    note = _errors(scratch, student, results) or _failure(r, timeout)
    if removed := intake.clear(scratch / "autograded" / student / ASSIGNMENT):  # before feedback copies it
        note = "; ".join(filter(None, [note, f"removed from the autograded folder: {', '.join(removed)}"]))
    api.generate_feedback(ASSIGNMENT, student, force=True)  # HTML, from pts
    _publish(out, student, scratch, pts)
    return note


def _failure(r: dict, timeout: int) -> str:
    """nbgrader's failure in words: a kernel that died, a cell that ignored the timeout's interrupt."""
    if r["success"]:
        return ""
    err = f"{r.get('error')}\n{r.get('log')}"  # the log holds the cause nbgrader's error points to
    if "DeadKernel" in err or "Kernel died" in err:
        return (f"the kernel died (a sandbox limit: at most {limits.KERNEL_MEMORY / limits.GIB:g} GiB of "
                "memory, docs/teaching.md, Limits)")  # fmt: skip
    if "TimeoutError" in err or "timed out" in err.lower():
        return f"a cell ran past the timeout of {timeout} s and ignored the interrupt: the kernel was ended"
    last = [ln for ln in err.splitlines() if ln.strip() and "Traceback" not in ln]
    return "nbgrader failed: " + " ".join(" ".join(last[-3:]).split())[-300:]


def _publish(out: Path, student: str, scratch: Path | None, pts: dict | None) -> None:
    """The student's folders from the scratch course (None: none) in place of their earlier ones,
    then their row in the gradebook (gradebook.merge: nobody else's rows change)."""
    for stage in ("submitted", "autograded", "feedback"):
        shutil.rmtree(out / stage / student / ASSIGNMENT, ignore_errors=True)
        if scratch is not None and (new := scratch / stage / student / ASSIGNMENT).is_dir():
            (out / stage / student).mkdir(parents=True, exist_ok=True)
            shutil.move(new, out / stage / student / ASSIGNMENT)
    gradebook.merge(out, student, pts)


def _errors(course: Path, student: str, results: dict) -> str:
    """The cells that ran out of time, output cut, and the hidden tests that never reached the
    grader: one line."""
    f = course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out = []
    if f.is_file():
        cells = nbformat.read(f, as_version=4).cells
        for i, c in enumerate(cells):
            if any(o.get("ename") == "CellTimeoutError" for o in c.get("outputs", [])):
                out.append(f"{c.metadata.get('nbgrader', {}).get('grade_id', f'cell {i + 1}')} timed out")
        said = (o.get("text", "") for c in cells for o in c.get("outputs", []))
        if any(t.strip().startswith("[make grade kept") for t in said):
            out.append(f"output over {limits.OUTPUT_BYTES >> 20} MiB: the rest was dropped")
    timed = {int(o.split()[0].removeprefix("test-")) for o in out if o.startswith("test-")}
    if missing := [n for n in range(1, len(EXERCISES) + 1) if n not in results and n not in timed]:
        out.append(f"the hidden test of exercise {', '.join(map(str, missing))} never reached the grader")
    return "; ".join(out)


def _notes(course: Path) -> dict:
    if not (f := course / "grading.json").is_file():
        return {}
    try:
        notes = json.loads(f.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{f}: not the JSON make grade writes ({e}); move it away to start anew") from None
    if not isinstance(notes, dict) or not all(isinstance(v, str) for v in notes.values()):
        raise ValueError(f"{f}: not make grade's notes (an object of student: note)")
    return notes


def grades(course: Path, notes: dict | None = None) -> pd.DataFrame:
    """Every student in the gradebook (and every refused name in notes): points in total and per
    exercise, and the error of their latest grading (notes, else <course>/grading.json)."""
    return gradebook.table(course, _notes(course) if notes is None else notes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.notebook.tutorial.autograde",
                                 description=__doc__.splitlines()[0])  # fmt: skip
    ap.add_argument("submissions", type=Path, help="one folder per student, each with its notebook")
    ap.add_argument("--out", type=Path, default=BUILD, help=f"the course folder (default {BUILD})")
    ap.add_argument("--timeout", type=int, help=f"seconds per cell (default {TIMEOUT})")
    a = ap.parse_args(argv)
    if a.timeout is not None and a.timeout < 1:
        ap.error(f"--timeout must be >= 1 s, got {a.timeout}")
    try:
        t = grade(a.submissions, a.out, a.timeout)
    except Stopped as e:
        print(f"make grade: {e}; the gradebook holds everyone graded before; run it again to grade the rest",
              file=sys.stderr)  # fmt: skip
        return 130
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    budget = limits.GRADER_MEMORY / limits.GIB
    print(f"grader's peak memory: {peak / limits.GIB:.2f} GiB (its budget: {budget:g} GiB)")
    print(f"grades: {a.out / 'grades.csv'}; feedback: {a.out / 'feedback'}/<student>/{ASSIGNMENT}/")
    print(t[["student", "score", "max_score", "error"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
