"""`make grade`: autograde a folder of submissions in the course that tutorial.course builds, each
in a sandbox, with points a submission cannot touch (docs/teaching.md, *What the sandbox isolates*).

    python -m bildlib.notebook.tutorial.autograde SUBMISSIONS [--out build/course] [--timeout 300]

SUBMISSIONS holds one folder per student with their notebook in it, or in nbgrader's collected
layout, <student>/tutorial/tutorial.ipynb. Per student, after their earlier submission,
autograded copy and feedback are removed:

- a folder name a shell or nbgrader would mangle, a folder with none or two notebooks, and a
  notebook that is not a regular file, is too large or is not valid notebook JSON: 0 and a
  one-line reason, and no kernel (tutorial.intake);
- `nbgrader autograde` runs the notebook in a sandboxed kernel (tutorial.sandbox): its file system
  holds only the system, the Python environment, the package, its data and the handouts, read-only,
  and a private copy of its working folder; nothing it writes reaches a folder nbgrader reads back,
  and every process it started ends with it; a cell timeout is its row's error;
- each hidden test serves the student's function to the grader in this process, which runs the
  exercise's check (tutorial.verdict) and writes the points into nbgrader's gradebook: a hidden
  test that never reached the grader, or whose check failed, scores 0 whatever the kernel printed.

<out>/grades.csv is then written from the gradebook: every student graded so far, in this run or
an earlier one, with their points per exercise and the error of their latest grading
(<out>/grading.json); `generate_feedback` writes the HTML for each student graded in this run
(the others keep theirs), after anything in their autograded folder that is not a regular file is
removed (named in the row).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
from pathlib import Path

import nbformat
import pandas as pd

from bildlib import data
from bildlib.notebook.tutorial import grading, intake, sandbox, verdict
from bildlib.notebook.tutorial.checks import EXERCISES
from bildlib.notebook.tutorial.course import ASSIGNMENT, BUILD, TIMEOUT, build, lab_settings


def submissions(folder: Path) -> dict[str, Path | str]:
    """{student id: their notebook, or why it is refused (one line)}: one folder per student, its
    one notebook directly inside or under tutorial/ (nbgrader's collected layout). A folder name
    a shell or nbgrader would mangle, a link in place of a folder, none or two notebooks: a reason,
    so that the other students are still graded (tutorial.intake)."""
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
        else:
            found = sorted(d.glob("*.ipynb")) + sorted((d / ASSIGNMENT).glob("*.ipynb"))
            if len(found) == 1:
                out[d.name] = found[0]
            else:
                which = f": {', '.join(str(f.relative_to(folder)) for f in found)}" if found else ""
                out[d.name] = f"expected one notebook, found {len(found)}{which} (one student, one notebook)"
    if not out:
        raise ValueError(f"SUBMISSIONS={folder} holds no student folders (<student>/tutorial.ipynb)")
    return out


def grade(folder: Path, out: Path = BUILD, timeout: int | None = None) -> pd.DataFrame:
    """Autograde every student of folder in the course at out (built first if it is not), with
    timeout seconds per cell (None: TIMEOUT); returns grades.csv's table (every student graded
    so far), which is rewritten after each student."""
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
    api = _api(out, timeout)  # in this process: no nbgrader start-up per student
    notes = _notes(out)
    for student, nb in subs.items():
        opened.clear()  # exercise 3's pair anew: a write through a lent handle ends with its student
        if isinstance(nb, str):  # the folder refused: no kernel, and nothing under out/ by its name
            _record(out, student, {})
            notes[student] = nb
        else:
            for stage in ("submitted", "autograded", "feedback"):  # nothing stale from an earlier run
                shutil.rmtree(out / stage / student / ASSIGNMENT, ignore_errors=True)
            if bad := intake.notebook(nb):
                _record(out, student, {})
                notes[student] = f"not a valid notebook: {bad}"
            else:
                notes[student] = _autograde(api, out, student, nb, check, timeout)
        with data.atomic_path(out / "grading.json") as tmp:
            tmp.write_text(json.dumps(notes, indent=1, sort_keys=True))
        table = grades(out, notes)
        with data.atomic_path(out / "grades.csv") as tmp:  # row by row: a crash keeps the graded rows
            table.to_csv(tmp, index=False)
        row = table.set_index("student").loc[student]
        why = f" ({notes[student]})" if notes[student] else ""
        name = repr(student) if intake.student_name(student) else student
        print(f"{name}: {row['score']:g} of {row['max_score']:g}{why}")
    return table


def _autograde(api, out: Path, student: str, nb: Path, check, timeout: int) -> str:
    """One valid notebook through nbgrader's autograde in the sandbox, the grader's points into
    the gradebook, then its feedback: the note for its row ("" when nothing went wrong)."""
    dest = out / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    dest.parent.mkdir(parents=True)
    shutil.copyfile(nb, dest, follow_symlinks=False)
    server = verdict.Server(check, timeout)
    path = os.pathsep.join([str(out / "jupyter"), os.environ.get("JUPYTER_PATH", "")])
    env = server.env | {sandbox.COURSE: str(out), "JUPYTER_PATH": path}  # the sandbox's kernelspec
    try:
        with _environ(env):
            r = api.autograde(ASSIGNMENT, student, force=True, create=True)
    finally:
        server.close()
    _record(out, student, server.results)
    note = _errors(out, student, server.results) or (
        "" if r["success"] else " ".join(str(r["error"]).split())[-300:])  # fmt: skip
    if removed := intake.clear(out / "autograded" / student / ASSIGNMENT):  # before feedback copies it
        note = "; ".join(filter(None, [note, f"removed from the autograded folder: {', '.join(removed)}"]))
    api.generate_feedback(ASSIGNMENT, student, force=True)  # HTML, from the points just written
    return note


@contextlib.contextmanager
def _environ(env: dict):
    """os.environ with env set (the kernel inherits it), restored after."""
    before = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _api(course: Path, timeout: int):
    """nbgrader's Python API on the course folder: `timeout` seconds per cell, the sandbox's kernel."""
    from nbgrader.apps import NbGraderAPI
    from traitlets.config import Config

    c = Config()
    c.CourseDirectory.root, c.CourseDirectory.course_id = str(course), "bild-tutorial"
    c.Execute.timeout = int(timeout)
    c.Execute.kernel_name = sandbox.NAME
    return NbGraderAPI(config=c)


def _gradebook(course: Path):
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{course / 'gradebook.db'}")


def _record(course: Path, student: str, results: dict) -> None:
    """The grader's verdicts as the points of each hidden test, whatever the kernel printed (an
    exercise with no verdict: its hidden test never reached the grader, 0)."""
    from nbgrader.api import MissingEntry

    with _gradebook(course) as gb:
        gb.update_or_create_student(student)
        for n in range(1, len(EXERCISES) + 1):
            try:
                g = gb.find_grade(f"test-{n}", ASSIGNMENT, ASSIGNMENT, student)
            except MissingEntry:  # no submission (not a notebook): nothing to score
                continue
            g.auto_score = g.max_score if n in results and results[n].passed else 0.0
        gb.db.commit()


def _errors(course: Path, student: str, results: dict) -> str:
    """The cells that ran out of time, and the hidden tests that never reached the grader: one line."""
    f = course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    out = []
    if f.is_file():
        for c in nbformat.read(f, as_version=4).cells:
            if any(o.get("ename") == "CellTimeoutError" for o in c.get("outputs", [])):
                out.append(f"{c.metadata.get('nbgrader', {}).get('grade_id', 'a cell')} timed out")
    timed = {int(o.split()[0].removeprefix("test-")) for o in out if o.startswith("test-")}
    if missing := [n for n in range(1, len(EXERCISES) + 1) if n not in results and n not in timed]:
        out.append(f"the hidden test of exercise {', '.join(map(str, missing))} never reached the grader")
    return "; ".join(out)


def _notes(course: Path) -> dict:
    f = course / "grading.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def grades(course: Path, notes: dict | None = None) -> pd.DataFrame:
    """Every student in the gradebook: points in total and per exercise, and the error of their
    latest grading (notes, else <course>/grading.json)."""
    from nbgrader.api import MissingEntry

    notes = _notes(course) if notes is None else notes
    rows = []
    with _gradebook(course) as gb:
        for s in sorted(gb.students, key=lambda s: s.id):
            row = {"student": s.id, "score": 0.0, "max_score": float(len(EXERCISES))}
            row |= {f"exercise {n}": 0.0 for n in range(1, len(EXERCISES) + 1)}
            with contextlib.suppress(MissingEntry):
                nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, s.id)
                row |= {"score": nb.score, "max_score": nb.max_score}
                row |= {f"exercise {g.name.removeprefix('test-')}": g.score for g in nb.grades}
            rows.append(row | {"error": notes.get(s.id, "")})
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.notebook.tutorial.autograde",
                                 description=__doc__.splitlines()[0])  # fmt: skip
    ap.add_argument("submissions", type=Path, help="one folder per student, each with its notebook")
    ap.add_argument("--out", type=Path, default=BUILD, help=f"the course folder (default {BUILD})")
    ap.add_argument("--timeout", type=int, help=f"seconds per cell (default {TIMEOUT})")
    a = ap.parse_args(argv)
    if a.timeout is not None and a.timeout < 1:
        ap.error(f"--timeout must be >= 1 s, got {a.timeout}")
    t = grade(a.submissions, a.out, a.timeout)
    print(f"grades: {a.out / 'grades.csv'}; feedback: {a.out / 'feedback'}/<student>/{ASSIGNMENT}/")
    print(t[["student", "score", "max_score", "error"]].to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
