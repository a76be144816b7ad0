"""The tutorial as an nbgrader course: built from the repository (the handout, course/solutions.py),
then autograded on a solved notebook, one with a hang, and a blank one with four cheats, from two
students whose notebooks have the same name. Every notebook runs in a real kernel, on the shipped pair and a
few sentences (the course's parameters), with a short cell timeout for the hang."""

import re

import nbformat
import pytest

from bildlib.notebook.tutorial import course
from conftest import REPO

# few sentences and timed repeats; a cell that does not hang takes 10 s at most here (the imports)
PARAMS = {"n_examples": 2, "n_sweep": 3, "alphas": [0.5], "threads": 1, "rounds": 3}
HANG_TIMEOUT = 25  # exercise 3's check hangs: it costs this


def test_solutions_are_not_in_the_package():
    import importlib.util

    assert importlib.util.find_spec("bildlib.notebook.tutorial.solutions") is None
    assert not (REPO / "bildlib" / "tutorial" / "solutions.py").exists()
    assert set(course.solution_bodies()) >= {"should_fall_back", "rollback_position", "bild_loop",
                                              "predict_speedup", "sweep_row"}  # fmt: skip


def test_the_source_notebook_has_solutions_locked_cells_and_hidden_tests():
    nb = course.source_notebook(PARAMS)
    meta = [c.metadata.get("nbgrader") for c in nb.cells if c.cell_type == "code"]
    assert all(m is not None for m in meta)  # every code cell is a solution, a test or locked
    solutions = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert [c.metadata.nbgrader.grade_id for c in solutions] == [f"exercise-{i}" for i in range(1, 6)]
    assert [c.metadata.nbgrader.grade_id for c in tests] == [f"test-{i}" for i in range(1, 6)]
    assert all("### BEGIN SOLUTION" in c.source and "NotImplementedError" not in c.source for c in solutions)
    assert all("### BEGIN HIDDEN TESTS" in c.source and c.metadata.nbgrader.points == 1 for c in tests)
    assert all(c.source.startswith(("report.add(", "ok = report.add(")) for c in tests)  # the self-checks
    params = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    assert "n_sweep: int = 3  #" in params.source and "alphas: list = [0.5]  #" in params.source
    with pytest.raises(ValueError, match="no parameter nope"):
        course.source_notebook({"nope": 1})


@pytest.fixture(scope="module")
def built(tmp_path_factory, multi30k_dir):
    out = tmp_path_factory.mktemp("course")
    course.build(out, PARAMS | {"out_dir": str(out / "figures")})  # the pictures: not in the repository
    return out


def _solved_cells(built):
    """{grade_id: the source's solution cell, without the region markers}"""
    src = nbformat.read(built / "source" / "tutorial" / "tutorial.ipynb", as_version=4)
    out = {}
    for c in src.cells:
        g = c.metadata.get("nbgrader", {})
        if g.get("solution"):
            out[g["grade_id"]] = re.sub(r"\n *### (BEGIN|END) SOLUTION", "", c.source)
    return out


def _submission(built, edit=None, solved=False, after_setup=None, last=None):
    nb = nbformat.read(built / "release" / "tutorial" / "tutorial.ipynb", as_version=4)
    sol = _solved_cells(built)
    for c in nb.cells:
        g = c.metadata.get("nbgrader", {}).get("grade_id")
        if solved and g in sol:
            c.source = sol[g]
        if edit and g in edit:
            c.source = edit[g](c.source)
    if after_setup:
        i = next(i for i, c in enumerate(nb.cells) if "open_lab(" in c.source)
        nb.cells.insert(i + 1, nbformat.v4.new_code_cell(after_setup))
    if last:
        nb.cells.append(nbformat.v4.new_code_cell(last))
    return nb


FORGE = """import json
forged = {"passed": 5, "exercises": 5, "checks": {}, "solutions": False}
(out / "tutorial_checks.json").write_text(json.dumps(forged))"""
PATCH = """from bildlib.notebook.tutorial import checks as C, checks_loop as CL
C.run = lambda exercise, body, *a: C.Result(exercise, True, "ok")
CL.check_loop = lambda *a, **k: C.Result("3 BiLD loop", True, "ok")"""


def _write(folder, student, nb):
    (folder / student).mkdir(parents=True)
    nbformat.write(nb, folder / student / "tutorial.ipynb")  # every student's file has the same name


def test_autograde_gives_each_submission_its_points(built, tmp_path):
    """Each notebook costs a kernel and the tutorial's cells (about 15 s here), so three do: alice
    solved; bob solved but for a hang in exercise 3; alice again, blank, with every cheat (a cell
    solutions = True, a check cell edited to print PASS, the checks module patched, the checks
    file forged). Each cheat alone gave points when a papermill run was graded by the student's
    own checks file; blank, they would be all her points."""
    subs, again = tmp_path / "subs", tmp_path / "again"
    _write(subs, "alice", _submission(built, solved=True))
    loop = "\n\n\ndef bild_loop(*args, **kwargs):\n    while True:\n        pass\n"  # replaces the solved one
    _write(subs, "bob", _submission(built, solved=True, edit={"exercise-3": lambda s: s + loop}))
    release = nbformat.read(built / "release" / "tutorial" / "tutorial.ipynb", as_version=4)
    assert not any("BEGIN HIDDEN TESTS" in c.source or "BEGIN SOLUTION" in c.source for c in release.cells)

    # bob's exercise 3 check runs out of time, his others keep their points, and the timeout is his
    # row's error
    t = course.grade(subs, built, timeout=HANG_TIMEOUT).set_index("student")
    assert t["score"].to_dict() == {"alice": 5, "bob": 4} and t.loc["alice", "error"] == "", t
    b = t.loc["bob"]
    assert [b[f"exercise {i}"] for i in range(1, 6)] == [1, 1, 0, 1, 1], b
    assert b["error"] == "test-3 timed out"
    assert len((built / "grades.csv").read_text().splitlines()) == 3  # a header and a row per student
    for s in ("alice", "bob"):  # the same file name: separate folders, grades and feedback
        assert (built / "autograded" / s / "tutorial" / "tutorial.ipynb").is_file()
        assert (built / "feedback" / s / "tutorial" / "tutorial.html").is_file()
    assert (built / "figures" / "tutorial_trace.png").is_file()  # the course's out_dir, not figures/

    # alice submits again, blank with every cheat; her earlier, solved run is not read
    edited = {"test-1": lambda s: 'print("PASS  exercise 1 fallback: right on all 5 cases")'}
    cheats = _submission(built, edit=edited, after_setup=PATCH + "\nsolutions = True", last=FORGE)
    _write(again, "alice", cheats)
    t = course.grade(again, built, timeout=60).set_index("student")
    assert t.loc["alice", "score"] == 0 and t.loc["alice", "error"] == "", t
    assert [t.loc["alice", f"exercise {i}"] for i in range(1, 6)] == [0] * 5


def test_bad_submissions_folders_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="SUBMISSIONS=.*no such folder"):
        course.submissions(tmp_path / "nope")
    (tmp_path / "s" / "alice").mkdir(parents=True)
    with pytest.raises(ValueError, match="alice: expected one notebook, found 0"):
        course.submissions(tmp_path / "s")
