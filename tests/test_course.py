"""The tutorial as an nbgrader course: built from the repository (the handout, course/solutions.py),
then autograded in its sandbox on a blank notebook with every cheat tried on it (graded first), a
solved one, one with a hang, and a later blank one, from students whose notebooks have the same
name. Every notebook runs in a real kernel, on the shipped pair and a few sentences (the course's
parameters), with a short cell timeout for the hang."""

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from bildlib.notebook.tutorial import autograde, course, limits
from conftest import REPO

# few sentences and timed repeats; a student's cell that does not hang takes a few s at most here (the
# course's setup, imports and models, has limits.SETUP_SECONDS whatever the timeout: tutorial.execute)
PARAMS = {"n_examples": 2, "n_sweep": 3, "alphas": [0.5], "threads": 1, "rounds": 3}
HANG_TIMEOUT = 20  # exercise 3's check hangs: it costs this (room for a laptop 2.5x slower than CI's)


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
    course.build(out, PARAMS)  # the pictures go to build/figures/, a scratch folder in the sandbox
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
    for code in [last] if isinstance(last, str) else last or []:
        nb.cells.append(nbformat.v4.new_code_cell(code))
    return nb


FORGE = """import json
forged = {"passed": 5, "exercises": 5, "checks": {}, "solutions": False}
(out / "tutorial_checks.json").write_text(json.dumps(forged))"""
PATCH = """from bildlib.notebook.tutorial import checks as C, checks_loop as CL
C.run = lambda exercise, body, *a: C.Result(exercise, True, "ok")
CL.check_loop = lambda *a, **k: C.Result("3 BiLD loop", True, "ok")"""
# each attempt prints what happened to it, so a test failure shows which one got through
ESCAPE = """import importlib, subprocess, sys, types
from pathlib import Path
from bildlib import REPO_ROOT
def attempt(what, f):
    try:
        f()
        print("CHEAT", what, "went through")
    except Exception as e:
        print("CHEAT", what, "refused:", type(e).__name__)
grading_py = REPO_ROOT / "bildlib/notebook/tutorial/grading.py"  # later submissions import it
attempt("grading.py edit", lambda: grading_py.write_text(grading_py.read_text() + "\\ndef check(*a): 0\\n"))
attempt("figures/table1.csv", lambda: (REPO_ROOT / "figures/table1.csv").write_text("pwned"))
attempt("data/PWNED.txt", lambda: (REPO_ROOT / "data/PWNED.txt").write_text("pwned"))
attempt("solutions.py read", lambda: (REPO_ROOT / "course/solutions.py").read_text())
attempt("gradebook", lambda: open(COURSE + "/gradebook.db", "ab").write(b"x"))
fake = types.SimpleNamespace(hidden_test=lambda *a, **k: None, exercise=lambda *a, **k: None)
real = importlib.import_module
importlib.import_module = lambda name, *a: fake if "grading" in name else real(name, *a)
sys.modules["bildlib.notebook.tutorial.grading"] = fake  # the hidden tests' import gets the fake
subprocess.Popen(["setsid", "sleep", "4242"])  # outlives the notebook unless the sandbox ends it
solutions = True
attempt("/etc/shadow read", lambda: open("/etc/shadow").read())
attempt("another checkout's solutions", lambda: exec(open(OTHER).read(), {}))
import os  # links and a FIFO left for nbgrader's steps after the kernel (its write-back, chmod, feedback)
os.remove("tutorial.ipynb")
os.symlink(COURSE + "/gradebook.db", "tutorial.ipynb")
os.symlink(str(REPO_ROOT / "course/solutions.py"), "loot-solutions.py")
os.symlink(COURSE + "/gradebook.db", "loot-gradebook.db")
os.symlink(OUTSIDE, "outside.txt")
os.mkfifo("fifo")"""


# answers that call the package's own (each would pass its check: tests/test_verdict.py), a request
# for a 10,000-token call on the grader's model, and a last cell that prints without end
COPY = {
    "exercise-2": lambda s: s + "\n\n\ndef rollback_position(logits, drafted, alpha_rb):\n"
    "    from bildlib.decoding.bild import BildSettings, first_rollback\n"
    "    from bildlib.decoding.policy import Policy\n"
    "    return first_rollback(logits, drafted, BildSettings(0.5, alpha_rb), Policy(None, logits.device))\n",
    "exercise-3": lambda s: s + "\n\n\ndef bild_loop(small, large, source_ids, alpha_fb, alpha_rb, limit=10, "
    "max_new_tokens=64, verify_end=False):\n    from bildlib import decoding\n    try:\n"
    "        large.start(source_ids)\n        large.forward([5] * 10000)\n    except ValueError as e:\n"
    "        print('GREEDY refused:', e)\n"
    "    return decoding.bild(small, large, source_ids, alpha_fb, alpha_rb, "
    "max_small_steps=limit, max_new_tokens=max_new_tokens, verify_end=verify_end)[0]\n",
    "exercise-4": lambda s: s + "\n\n\ndef predict_speedup(*args):\n"
    "    from bildlib.notebook.tutorial.lab import stand_in_predict\n    return stand_in_predict(*args)\n",
    "exercise-5": lambda s: s + "\n\n\ndef sweep_row(*args):\n"
    "    from bildlib.notebook.tutorial.lab import stand_in_row\n    return stand_in_row(*args)\n",
}
FLOOD = 'import sys\nwhile True:\n    sys.stdout.write("z" * 65536)'
STUBBORN = ("import signal\nfor s in (signal.SIGINT, signal.SIGTERM):\n    signal.signal(s, signal.SIG_IGN)\n"
            "while True:\n    pass")


def _write(folder, student, nb):
    (folder / student).mkdir(parents=True)
    nbformat.write(nb, folder / student / "tutorial.ipynb")  # every student's file has the same name


def _sleepers() -> list[str]:
    ps = subprocess.run(["ps", "-e", "-o", "args="], capture_output=True, text=True).stdout
    return [ln for ln in ps.splitlines() if ln.startswith("sleep 4242")]


def _state(path: Path) -> tuple:
    st = os.lstat(path)
    return hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(st.st_mode)


def test_the_courses_setup_cells_get_their_own_timeout(built):
    """The release's cells before exercise 1 (imports, the models) get at least SETUP_SECONDS while
    they lead the notebook unchanged; a student's cell, and every cell after one, gets --timeout."""
    from bildlib.notebook.tutorial import execute

    release = built / "release" / "tutorial" / "tutorial.ipynb"
    setup = execute.setup_sources(release)
    assert any("open_lab(" in s for s in setup) and not any("NotImplementedError" in s for s in setup)
    ex = execute.BoundedExecute(timeout=HANG_TIMEOUT, setup_sources=setup)
    ex.nb = nb = nbformat.read(release, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    want = [limits.SETUP_SECONDS] * len(setup) + [HANG_TIMEOUT]
    assert [ex.timeout_of(c) for c in code[: len(setup) + 1]] == want
    ex.reset_execution_trackers()  # as nbconvert's preprocess does: nbclient then asks timeout_of
    assert [ex._get_timeout(c) for c in code[: len(setup) + 1]] == want
    nb.cells.insert(1, nbformat.v4.new_code_cell("import time\ntime.sleep(10**6)"))  # a student's, first
    assert {ex.timeout_of(c) for c in nb.cells if c.cell_type == "code"} == {HANG_TIMEOUT}
    del nb.cells[1]
    code[1].source += "\n"  # the setup cell changed: its own timeout no longer
    assert [ex.timeout_of(c) for c in code[:3]] == [limits.SETUP_SECONDS, HANG_TIMEOUT, HANG_TIMEOUT]
    ex.timeout = None  # none given: none for the setup either
    assert ex.timeout_of(code[0]) is None


def test_autograde_gives_each_submission_its_points(built, tmp_path):
    """One make grade: the refused files (a FIFO, a link to a solved notebook, `[]`), every cheat
    in one blank notebook, a solved one that hangs in exercise 3 after writing through the lent
    models, all before a solved and a blank submission, which get 5 and 0."""
    subs, again = tmp_path / "subs", tmp_path / "again"
    status = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True).stdout
    outside, other = tmp_path / "outside.txt", tmp_path / "other-checkout" / "course" / "solutions.py"
    outside.write_text("the grader's")
    other.parent.mkdir(parents=True)
    shutil.copy(REPO / "course" / "solutions.py", other)  # another checkout of the project on the disk
    kept = {f: _state(f) for f in (outside, other, REPO / "course" / "solutions.py")}
    edited = {"test-1": lambda s: 'print("PASS  exercise 1 fallback: right on all 5 cases")'}
    escape = ESCAPE.replace("COURSE", repr(str(built))).replace("OTHER", repr(str(other)))
    escape = escape.replace("OUTSIDE", repr(str(outside)))
    _write(subs, "a-mallory", _submission(built, edit=edited, after_setup=PATCH + "\n" + escape,
                                            last=[FORGE, STUBBORN]))  # fmt: skip
    _write(subs, "c-alice", _submission(built, solved=True))
    (subs / "a-fifo").mkdir()
    os.mkfifo(subs / "a-fifo" / "tutorial.ipynb")
    (subs / "a-link").mkdir()
    (subs / "a-link" / "tutorial.ipynb").symlink_to(subs / "c-alice" / "tutorial.ipynb")
    (subs / "a-list").mkdir()
    (subs / "a-list" / "tutorial.ipynb").write_text("[]")
    # bob writes through the lent models, then hangs: the next student's pair is a fresh one
    loop = "\n\n\ndef bild_loop(small, large, *args, **kwargs):\n    small.width = large.width = 'pwned'\n" \
           "    while True:\n        pass\n"  # fmt: skip
    _write(subs, "b-bob", _submission(built, solved=True, edit={"exercise-3": lambda s: s + loop}))
    _write(subs, "d-carol", _submission(built))
    # before the solved ones: a name nbgrader would glob (s?* matched every s...), a tutorial/ that is a
    # link to a classmate's folder, and one to the course's solutions
    _write(subs, "a?*", _submission(built))
    (subs / "a-nested").mkdir()
    (subs / "a-nested" / "tutorial").symlink_to(subs / "c-alice")
    (subs / "a-sol").mkdir()
    (subs / "a-sol" / "tutorial").symlink_to(built / "source" / "tutorial")
    _write(subs, "e-eve", _submission(built, solved=True, edit=COPY, last=FLOOD))
    release = nbformat.read(built / "release" / "tutorial" / "tutorial.ipynb", as_version=4)
    assert not any("BEGIN HIDDEN TESTS" in c.source or "BEGIN SOLUTION" in c.source for c in release.cells)

    cli = [sys.executable, "-m", "bildlib.notebook.tutorial.autograde", str(subs), "--out", str(built)]
    p = subprocess.run([*cli, "--timeout", str(HANG_TIMEOUT)], capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    peak = float(re.search(r"grader's peak memory: ([\d.]+) GiB", p.stdout)[1])
    assert peak < limits.GRADER_MEMORY / limits.GIB, p.stdout  # the 10,000-token call and the flood included
    t = autograde.grades(built).set_index("student")
    assert t["score"].to_dict() == {"a-fifo": 0, "a-link": 0, "a-list": 0, "a-mallory": 0, "a-nested": 0,
                                    "a-sol": 0, "a?*": 0, "b-bob": 4, "c-alice": 5, "d-carol": 0,
                                    "e-eve": 1}, t  # fmt: skip
    assert "'a?*' holds * ?, which a glob" in t.loc["a?*", "error"]
    assert t.loc["a-nested", "error"] == "a-nested/tutorial is a symbolic link: hand in regular files only"
    assert t.loc["a-sol", "error"] == "a-sol/tutorial is a symbolic link: hand in regular files only"
    assert not (built / "feedback" / "a-sol").exists() and not (built / "autograded" / "a?*").exists()
    assert [t.loc["e-eve", f"exercise {i}"] for i in range(1, 6)] == [1, 0, 0, 0, 0]
    n = len(_submission(built).cells)  # the handout's cells: what a submission adds comes after
    assert t.loc["e-eve", "error"] == f"cell {n + 1} timed out; output over 4 MiB: the rest was dropped"
    eve = (built / "feedback" / "e-eve" / "tutorial" / "tutorial.html").read_text()
    assert eve.count("the package&#39;s answer to exercise") >= 3 or eve.count("the package's answer") >= 3
    bad = "not a valid notebook: tutorial.ipynb"
    assert t.loc["a-fifo", "error"] == "a-fifo/tutorial.ipynb is a FIFO: hand in regular files only"
    assert t.loc["a-link", "error"] == "a-link/tutorial.ipynb is a symbolic link: hand in regular files only"
    assert t.loc["a-list", "error"] == f"{bad} holds a JSON list, not a notebook (an object with cells)"
    assert [t.loc["a-mallory", f"exercise {i}"] for i in range(1, 6)] == [0] * 5
    # her last cell ignores the timeout's interrupt (SIGINT and SIGTERM): it is named, as a timeout
    said = t.loc["a-mallory", "error"]
    assert said.startswith(f"cell {n + 3} timed out; the hidden test of exercise 1, 2, 3, 4, 5 never"), said
    mallory = nbformat.read(built / "autograded" / "a-mallory" / "tutorial" / "tutorial.ipynb", as_version=4)
    said = "".join(o.get("text", "") for c in mallory.cells for o in c.get("outputs", []))
    assert said.count("CHEAT") == 7 and "went through" not in said, said
    left = sorted(p.name for p in (built / "autograded" / "a-mallory" / "tutorial").iterdir())
    assert left == ["tutorial.ipynb"], left  # what the kernel wrote stayed in its box
    assert not (built / "feedback" / "a-mallory" / "tutorial" / "loot-solutions.py").exists()
    assert {f: _state(f) for f in kept} == kept  # not read into a score, not overwritten, not chmodded
    assert not _sleepers(), "a submission's process outlived its kernel"
    assert subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                          text=True).stdout == status  # fmt: skip
    assert t.loc["c-alice", "error"] == "" and t.loc["d-carol", "error"] == "", t
    b = t.loc["b-bob"]
    assert [b[f"exercise {i}"] for i in range(1, 6)] == [1, 1, 0, 1, 1], b
    assert b["error"] == "test-3 timed out"
    for s in ("c-alice", "b-bob"):  # the same file name: separate folders, grades and feedback
        assert (built / "autograded" / s / "tutorial" / "tutorial.ipynb").is_file()
        assert (built / "feedback" / s / "tutorial" / "tutorial.html").is_file()
    assert "5.0 / 5.0" in (built / "feedback" / "c-alice" / "tutorial" / "tutorial.html").read_text()

    # alice submits again, a file that is not a notebook (no kernel: it costs nothing); her earlier,
    # solved run is not read, and its feedback goes. Everyone graded before keeps a row
    (again / "c-alice").mkdir(parents=True)
    (again / "c-alice" / "tutorial.ipynb").write_text('{"cells": [')  # cut off: not JSON
    t = autograde.grade(again, built, timeout=60).set_index("student")
    assert t["score"].to_dict() == {"a-fifo": 0, "a-link": 0, "a-list": 0, "a-mallory": 0, "a-nested": 0,
                                    "a-sol": 0, "a?*": 0, "b-bob": 4, "c-alice": 0, "d-carol": 0,
                                    "e-eve": 1}, t  # fmt: skip
    why = t.loc["c-alice", "error"]
    assert why.startswith("not a valid notebook: tutorial.ipynb is not notebook JSON"), why
    assert len((built / "grades.csv").read_text().splitlines()) == 12  # a header and a row per student
    feedback = {s: built / "feedback" / s / "tutorial" / "tutorial.html" for s in t.index}
    assert not feedback["c-alice"].exists()  # her solved run's feedback: removed with it
    assert "4.0 / 5.0" in feedback["b-bob"].read_text() and "0.0 / 5.0" in feedback["d-carol"].read_text()


def test_without_a_sandbox_grading_stops_and_says_why(tmp_path, monkeypatch):
    """Where unprivileged namespaces are refused, make grade does not run submissions unboxed."""
    from bildlib.notebook.tutorial import sandbox

    monkeypatch.setattr(sandbox, "available", lambda: "this system refuses unprivileged namespaces")
    _write(tmp_path / "subs", "alice", nbformat.v4.new_notebook())
    with pytest.raises(RuntimeError, match="in a sandbox, and none starts here: this system refuses"):
        autograde.grade(tmp_path / "subs", tmp_path / "course")
    assert not (tmp_path / "course").exists()  # nothing built, nothing graded
