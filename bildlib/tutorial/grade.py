"""Grade students' copies of notebooks/tutorial.ipynb: run each with papermill (solutions off,
its checks into <out>/<name>/tutorial_checks.json) and write one table, <out>/grades.csv.

    python -m bildlib.tutorial.grade submissions/*.ipynb --out build/grades

A notebook that stops with an error (a student's cell outside the exercises) gets its error in
the table and no checks; the others are graded by their checks alone (docs/teaching.md).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT, data
from bildlib.tutorial.checks import EXERCISES


def grade(notebook: Path, out: Path, parameters: dict | None = None) -> dict:
    """One row: the notebook, how many exercises pass, and each exercise's pass/fail and message."""
    import papermill

    d = out / notebook.stem
    d.mkdir(parents=True, exist_ok=True)
    row = {"notebook": str(notebook), "passed": 0, "error": ""}
    try:
        papermill.execute_notebook(str(notebook), str(d / notebook.name),
                                   parameters=(parameters or {}) | {"out_dir": str(d), "solutions": False},
                                   progress_bar=False, cwd=str(REPO_ROOT))  # fmt: skip
    except Exception as e:  # papermill's PapermillExecutionError names the cell and the error
        row["error"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:300]}"
    checks = d / "tutorial_checks.json"
    if checks.is_file() and not row["error"]:
        doc = json.loads(checks.read_text())
        row["passed"] = doc["passed"]
        for k in EXERCISES:
            c = doc["checks"].get(k, {"passed": False, "message": "not checked"})
            row[f"{k} passed"], row[f"{k} message"] = c["passed"], c["message"]
    return row


def main(argv: list[str] | None = None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("notebooks", nargs="+", type=Path, help="students' copies of tutorial.ipynb")
    ap.add_argument("--out", type=Path, default=Path("build/grades"), help="the runs and grades.csv go here")
    ap.add_argument("--n-examples", type=int, default=20, help="the notebook's n_examples")
    ap.add_argument("--n-sweep", type=int, default=60, help="the notebook's n_sweep")
    a = ap.parse_args(argv)
    missing = [str(p) for p in a.notebooks if not p.is_file()]
    if missing:
        ap.error(f"no such notebook: {', '.join(missing)}")
    params = {"n_examples": a.n_examples, "n_sweep": a.n_sweep}
    table = pd.DataFrame([grade(p.resolve(), a.out.resolve(), params) for p in a.notebooks])
    with data.atomic_path(a.out / "grades.csv") as tmp:
        table.to_csv(tmp, index=False)
    print(table[["notebook", "passed", "error"]].to_string(index=False))
    print(f"grades: {a.out / 'grades.csv'}")
    return table


if __name__ == "__main__":
    main()
