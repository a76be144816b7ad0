"""The course's gradebook under `make grade`: written once per student, in one step that touches
that student's rows and no other's (docs/teaching.md, *What the sandbox isolates*).

Each student is graded in a scratch course of their own (autograde), whose gradebook starts as
the course's with no student in it (`pristine`): nbgrader's autograde, the points and the feedback
happen there, where no other student's rows or files exist. Then `merge` copies the course's
gradebook, replaces that student's submission in the copy, checks that every other student's rows
are as they were, and moves the copy over the gradebook (an atomic rename): an interrupted run
leaves it as it was before the student in progress.
"""

from __future__ import annotations

import contextlib
import shutil
import warnings
from pathlib import Path

import pandas as pd
import sqlalchemy.exc

from bildlib import data
from bildlib.notebook.tutorial.checks import EXERCISES
from bildlib.notebook.tutorial.course import ASSIGNMENT

DB, PRISTINE = "gradebook.db", "gradebook.assignment.db"


def open_db(path: Path):
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{path}")


def pristine(course: Path) -> Path:
    """<course>/gradebook.assignment.db: the course's gradebook with the assignment and no student
    (made from gradebook.db once, by removing every student from a copy)."""
    f = course / PRISTINE
    if not f.is_file():
        with data.atomic_path(f) as tmp:
            shutil.copyfile(course / DB, tmp)
            with open_db(tmp) as gb:
                for s in list(gb.students):
                    gb.remove_student(s.id)
                gb.db.commit()
    return f


def rows(gb) -> dict[str, tuple]:
    """{student: (their points per hidden test, or None without a submission)}: what a merge must
    leave unchanged for everyone but the student it writes."""
    from nbgrader.api import MissingEntry

    out = {}
    for s in gb.students:
        try:
            nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, s.id)
            out[s.id] = tuple(sorted((g.name, g.auto_score, g.manual_score) for g in nb.grades))
        except MissingEntry:
            out[s.id] = None
    return out


def points(results: dict) -> dict[int, float]:
    """The grader's verdicts as each hidden test's points (no verdict: it never reached the grader, 0)."""
    return {n: 1.0 if n in results and results[n].passed else 0.0 for n in range(1, len(EXERCISES) + 1)}


def record(gb, student: str, pts: dict[int, float] | None) -> None:
    """student's submission in gb replaced by one with pts (None: no submission, only the student)."""
    from nbgrader.api import MissingEntry

    gb.update_or_create_student(student)
    with contextlib.suppress(MissingEntry):
        gb.remove_submission(ASSIGNMENT, student)
    if pts is not None:
        with warnings.catch_warnings():  # nbgrader's own add_submission trips SQLAlchemy's autoflush warning
            warnings.simplefilter("ignore", getattr(sqlalchemy.exc, "SAWarning", Warning))
            gb.add_submission(ASSIGNMENT, student)
        for n, p in pts.items():
            with contextlib.suppress(MissingEntry):
                g = gb.find_grade(f"test-{n}", ASSIGNMENT, ASSIGNMENT, student)
                g.auto_score, g.needs_manual_grade = p, False
    gb.db.commit()


def merge(course: Path, student: str, pts: dict[int, float] | None) -> None:
    """Write student's row into <course>/gradebook.db (see the module's doc); a change to any other
    student's rows is an error, and the gradebook is left as it was."""
    with data.atomic_path(course / DB) as tmp:
        shutil.copyfile(course / DB, tmp)
        with open_db(tmp) as gb:
            before = {k: v for k, v in rows(gb).items() if k != student}
            record(gb, student, pts)
            after = {k: v for k, v in rows(gb).items() if k != student}
        if after != before:
            changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
            who = ", ".join(map(repr, changed))
            raise RuntimeError(f"grading {student!r} would change the rows of {who}: the gradebook is left "
                               "as it was")  # fmt: skip


def only(gb, student: str) -> str:
    """Why a scratch course's gradebook holds more than student's own rows ("" when it does not)."""
    ids = sorted(s.id for s in gb.students)
    return "" if ids == [student] else f"the scratch gradebook holds {ids}, not only {student!r}"


def table(course: Path, notes: dict) -> pd.DataFrame:
    """grades.csv: every student in the gradebook, and every refused folder name in notes (0, never
    written to the gradebook), with points in total and per exercise and their latest note."""
    from nbgrader.api import MissingEntry

    out = {}
    empty = {"score": 0.0, "max_score": float(len(EXERCISES))} | {
        f"exercise {n}": 0.0 for n in range(1, len(EXERCISES) + 1)}  # fmt: skip
    with open_db(course / DB) as gb:
        for s in gb.students:
            row = dict(empty)
            with contextlib.suppress(MissingEntry):
                nb = gb.find_submission_notebook(ASSIGNMENT, ASSIGNMENT, s.id)
                row |= {"score": nb.score, "max_score": nb.max_score}
                row |= {f"exercise {g.name.removeprefix('test-')}": g.score for g in nb.grades}
            out[s.id] = row
    for s in notes.keys() - out.keys():  # a folder name refused before anything was written
        out[s] = dict(empty)
    return pd.DataFrame([{"student": s} | out[s] | {"error": notes.get(s, "")} for s in sorted(out)])
