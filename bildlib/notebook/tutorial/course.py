"""The tutorial as an nbgrader course: `make course` builds it (`make grade` autogrades a folder of
submissions: tutorial.autograde; docs/teaching.md walks an instructor through release, collect,
autograde, export).

    python -m bildlib.notebook.tutorial.course build [--out build/course] [--timeout 300] [-p NAME VALUE]

The nbgrader source notebook, source/tutorial/tutorial.ipynb, comes from the student's handout
(notebooks/tutorial.ipynb) and the solutions (course/solutions.py in the repository, outside the
package): each exercise's body becomes a solution region; each exercise's check cell becomes its
autograded cell, worth a point, with a hidden test (tutorial.grading) after the student's
self-check; every other code cell is locked. nbgrader restores locked and graded cells at
autograde, so an edited check cell changes nothing. Then `nbgrader generate_assignment` writes
release/tutorial/, what students get: the hidden tests and the solutions taken out; and
course.json keeps the settings the grader checks exercise 3 on.
"""

from __future__ import annotations

import argparse
import ast
import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat

from bildlib import REPO_ROOT, data, notebook
from bildlib.notebook.tutorial.checks import EXERCISES
from bildlib.notebook.tutorial.grading import HIDDEN

ASSIGNMENT = "tutorial"
BUILD = REPO_ROOT / "build" / "course"
HANDOUT = REPO_ROOT / "notebooks" / "tutorial.ipynb"
SOLUTIONS = REPO_ROOT / "course" / "solutions.py"
TIMEOUT = 300  # s per cell: the timing and sweep cells need far more than nbgrader's default 30 s
LAB = ("preset", "split", "n_examples", "device", "dtype", "threads", "fallback", "rollback")


def solution_bodies(path: Path = SOLUTIONS) -> dict[str, str]:
    """{function name: its body without the docstring, indented as in the file}."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the course needs the solutions (a checkout of the repository)")
    text = path.read_text()
    lines = text.splitlines()
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body  # the docstring
            out[node.name] = "\n".join(lines[body[0].lineno - 1 : node.end_lineno])
    return out


def _meta(grade_id: str, *, solution=False, grade=False, locked=False, points=0) -> dict:
    m = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3,
         "solution": solution, "task": False}  # fmt: skip
    return {"nbgrader": m | ({"points": points} if grade else {})}


def source_notebook(params: dict | None = None, handout: Path = HANDOUT, solutions: Path = SOLUTIONS):
    """The nbgrader source notebook: the handout with its solutions, locked cells and hidden tests.
    params: parameters whose defaults the course changes (e.g. fewer sentences)."""
    run = settings(params)
    lab = {k: run[k] for k in LAB}  # exercise 3's hidden test opens its own pair with these
    bodies = solution_bodies(solutions)
    nb = nbformat.read(handout, as_version=4)
    cells, current = [], None  # current: the exercise whose check cell comes next
    for i, c in enumerate(nb.cells):
        c = copy.deepcopy(c)
        if c.cell_type != "code":
            cells.append(c)
            continue
        if "parameters" in c.metadata.get("tags", []):
            c.source = "\n".join(_set_default(line, run) for line in c.source.splitlines())
        ex = next((k for k, fn in EXERCISES.items() if f"def {fn}(" in c.source), None)
        if ex is not None and "raise NotImplementedError" in c.source:
            fn = EXERCISES[ex]
            stub = next(ln for ln in c.source.splitlines() if "raise NotImplementedError" in ln)
            c.source = c.source.replace(stub, f"    ### BEGIN SOLUTION\n{bodies[fn]}\n    ### END SOLUTION")
            c.metadata.update(_meta(f"exercise-{ex[0]}", solution=True))
            cells.append(c)
            current = ex
            continue
        if current is not None and "report.add(" in c.source:  # the check cell of `current`: it grades
            c.source += "\n" + HIDDEN.format(n=current[0], fn=EXERCISES[current], lab=lab)
            c.metadata.update(_meta(f"test-{current[0]}", grade=True, locked=True, points=1))
            current = None
        else:
            c.metadata.update(_meta(f"cell-{i}", locked=True))
        cells.append(c)
    nb.cells = cells
    return nb


def settings(params: dict | None = None) -> dict:
    """The tutorial's parameters with the course's changes (params)."""
    defaults = notebook.defaults("tutorial")
    if bad := sorted(set(params or {}) - set(defaults)):
        raise ValueError(f"params: the tutorial has no parameter {', '.join(bad)}")
    return defaults | (params or {})


def lab_settings(course: Path) -> dict:
    """The settings exercise 3's check runs on, as the course at `course` was built (course.json)."""
    f = Path(course) / "course.json"
    try:
        return json.loads(f.read_text())["lab"]
    except (OSError, ValueError, KeyError) as e:
        raise FileNotFoundError(f"{f}: the course's settings are missing or unreadable ({e}); make course "
                                "builds them") from None  # fmt: skip


def _set_default(line: str, run: dict) -> str:
    """A parameters-cell line `name: type = value  # comment` with run's value for name."""
    name, sep, rest = line.partition(":")
    if not sep or name.strip() not in run or "=" not in rest:
        return line
    kind, _, tail = rest.partition("=")
    comment = tail[tail.index("  #"):] if "  #" in tail else ""
    return f"{name}:{kind}= {run[name.strip()]!r}{comment}"


def build(out: Path = BUILD, params: dict | None = None, timeout: int = TIMEOUT) -> Path:
    """The course folder: nbgrader_config.py, source/ and release/ (what students get)."""
    out = Path(out).resolve()
    src = out / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    src.parent.mkdir(parents=True, exist_ok=True)
    nb = source_notebook(params)
    with data.atomic_path(src) as tmp:
        nbformat.write(nb, tmp)
    config = "\n".join(["c = get_config()  # noqa: F821 (nbgrader's config file)",
                        f"c.CourseDirectory.root = {str(out)!r}",
                        "c.CourseDirectory.course_id = 'bild-tutorial'",
                        f"c.Execute.timeout = {int(timeout)}", ""])  # fmt: skip
    (out / "nbgrader_config.py").write_text(config)
    with data.atomic_path(out / "course.json") as tmp:  # what the grader checks exercise 3 on
        tmp.write_text(json.dumps({"lab": {k: settings(params)[k] for k in LAB}}, indent=1))
    _nbgrader(out, "generate_assignment", ASSIGNMENT, "--force")
    print(f"course: {out} (source/{ASSIGNMENT}/ with the solutions; release/{ASSIGNMENT}/ for students)")
    return out


def _nbgrader(course: Path, *args: str) -> None:
    """nbgrader's command line in the course folder; its error ends the build. A subprocess, with
    this environment's bin/ on PATH: creating the gradebook runs the `alembic` command."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    p = subprocess.run(cmd, cwd=course, capture_output=True, text=True, env=os.environ | {"PATH": path})
    if p.returncode != 0:
        raise RuntimeError(f"nbgrader {' '.join(args)} failed ({p.returncode}):\n{p.stderr[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.notebook.tutorial.course",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="the course folder: source (with solutions) and release")
    b.add_argument("--out", type=Path, default=BUILD, help=f"the course folder (default {BUILD})")
    b.add_argument("--timeout", type=int, help=f"seconds per cell (default {TIMEOUT})")
    b.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"),
                   help="a tutorial parameter the course sets (a literal), e.g. -p n_sweep 30")  # fmt: skip
    a = ap.parse_args(argv)
    if a.timeout is not None and a.timeout < 1:
        ap.error(f"--timeout must be >= 1 s, got {a.timeout}")
    build(a.out, {k: ast.literal_eval(v) for k, v in a.p}, a.timeout or TIMEOUT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
