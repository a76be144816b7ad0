"""The hidden tests of the nbgrader course (bildlib.notebook.tutorial.course): each checks one
exercise's function and fails with the check's message.

Under `make grade` (course.grade) a hidden test cell only serves the student's function to the
grader (verdict.serve), which runs `check` in its own process: nothing in the student's kernel (a
patched import, a rewritten module) reaches the check or the points. Run elsewhere (an instructor
executing the source notebook), the hidden test checks the function in the kernel (`exercise`).
Exercise 3 opens its own pair and sentences, with the settings the course was built with, not the
notebook's variables (a student's cell can reassign those).
"""

from __future__ import annotations

import os

# The code of a hidden test cell; course.build fills in the exercise, the function and the lab.
HIDDEN = """### BEGIN HIDDEN TESTS
from bildlib.notebook.tutorial import grading as _grading  # the grader runs the check (docs/teaching.md)
_grading.hidden_test({n}, {fn}, {lab!r})
### END HIDDEN TESTS"""


def hidden_test(n: int, fn, lab: dict) -> None:
    """A hidden test cell: under a grader (verdict.ENV set), serve fn for the grader's check;
    otherwise check fn here. AssertionError with the check's message when it fails."""
    from bildlib.notebook.tutorial import verdict

    if os.environ.get(verdict.ENV):
        verdict.serve(n, fn)
    else:
        exercise(n, fn, lab)


def exercise(n: int, fn, lab: dict) -> None:
    """Run exercise n's check on fn in this process; AssertionError with its message when it fails."""
    r = check(n, fn, lab)
    assert r.passed, r.message


def check(n: int, fn, lab: dict, opened=None):
    """Exercise n's check of fn: a checks.Result. lab: the notebook settings exercise 3 runs on
    (preset, split, n_examples, device, dtype, threads, fallback, rollback); opened: the
    tutorial.lab.Lab of those settings, when the caller holds one already (the grader opens it
    once for every submission)."""
    from bildlib.notebook.tutorial import checks as C
    from bildlib.notebook.tutorial import checks_loop as CL
    from bildlib.notebook.tutorial import lab as L

    if n == 3:
        pair = opened or L.open_lab(lab["preset"], lab["split"], lab["n_examples"], lab["device"],
                                    lab["dtype"], lab["threads"])  # fmt: skip
        return CL.check_loop(fn, pair.small, pair.large, pair.sources[: lab["n_examples"]], lab["fallback"],
                             lab["rollback"], pair.max_new_tokens)  # fmt: skip
    checks = {1: C.check_fallback, 2: C.check_rollback, 4: C.check_predict, 5: C.check_sweep_row}
    if n not in checks:
        raise ValueError(f"exercise must be 1 to 5, got {n!r}")
    return checks[n](fn)
