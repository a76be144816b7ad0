"""The hidden tests of the nbgrader course (bildlib.notebook.tutorial.course): each runs one exercise's
check on the student's function and fails with the check's message.

A hidden test cell first drops every bildlib module from sys.modules and imports this module
anew (HIDDEN), so the checks it runs are the ones on disk: a student's cell that patched the
checks module, its Result or a decoder in the kernel changes nothing here. Exercise 3 opens its
own pair and sentences too, with the settings the course was built with, not the notebook's
variables (a student's cell can reassign those).
"""

from __future__ import annotations

# The code of a hidden test cell; course.build fills in the exercise, the function and the lab.
HIDDEN = """### BEGIN HIDDEN TESTS
import importlib, sys  # a fresh bildlib: the cells above may have patched the modules they imported
for _m in [m for m in list(sys.modules) if m.split(".")[0] == "bildlib"]:
    del sys.modules[_m]
importlib.import_module("bildlib.notebook.tutorial.grading").exercise({n}, {fn}, {lab!r})
### END HIDDEN TESTS"""


def exercise(n: int, fn, lab: dict) -> None:
    """Run exercise n's check on fn; AssertionError with the check's message when it fails.
    lab: the notebook settings exercise 3 runs on (preset, split, n_examples, device, dtype,
    threads, fallback, rollback)."""
    from bildlib.notebook.tutorial import checks as C
    from bildlib.notebook.tutorial import checks_loop as CL
    from bildlib.notebook.tutorial import lab as L

    if n == 3:
        pair = L.open_lab(lab["preset"], lab["split"], lab["n_examples"], lab["device"], lab["dtype"],
                          lab["threads"])  # fmt: skip
        r = CL.check_loop(fn, pair.small, pair.large, pair.sources[: lab["n_examples"]], lab["fallback"],
                          lab["rollback"], pair.max_new_tokens)  # fmt: skip
    else:
        check = {1: C.check_fallback, 2: C.check_rollback, 4: C.check_predict, 5: C.check_sweep_row}
        if n not in check:
            raise ValueError(f"exercise must be 1 to 5, got {n!r}")
        r = check[n](fn)
    assert r.passed, r.message
