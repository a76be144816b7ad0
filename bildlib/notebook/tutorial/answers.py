"""The package's own answers to the tutorial's exercises, which a graded function may not call.

The handout imports bildlib, and bildlib holds what the exercises ask for: `decoding.bild` is
exercise 3's loop, `decoding.bild.first_rollback` exercise 2's rule (the loop's too), and the
notebook's stand-ins (`lab.stand_in_predict`, `lab.stand_in_row`) exercises 4 and 5. While the
kernel serves a student's function to the grader (verdict.serve), each of them refuses to run:
their code objects are swapped for one that raises, so a name bound before the hidden test (`from
bildlib.decoding import bild`) refuses too; they are put back as soon as the function returns.
Exercise 1 is one comparison, which no function of the package holds.

What this does not stop, and docs/teaching.md leaves to a human reader: a kernel that undoes the
swap, or a submission that copies the package's code into its own cell.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect

ANSWERS = {
    "bildlib.decoding.bild:first_rollback": "2 and 3",
    "bildlib.decoding.bild:bild": "3",
    "bildlib.notebook.tutorial.lab:stand_in_predict": "4",
    "bildlib.notebook.tutorial.lab:stand_in_row": "5",
}


def _refusal(name: str, where: str, exercises: str):
    msg = (f"{where} is the package's answer to exercise {exercises}; a graded exercise is your own "
           "code, not a call to it")  # fmt: skip
    ns: dict = {}
    exec(f"def {name}(*args, **kwargs):\n    raise RuntimeError({msg!r})\n", ns)  # noqa: S102 - our own text
    return ns[name].__code__


def functions() -> list[tuple]:
    """[(the function object whose code runs, the place it is named by, exercises)]."""
    out = []
    for where, exercises in ANSWERS.items():
        module, name = where.split(":")
        f = inspect.unwrap(getattr(importlib.import_module(module), name))  # bild: under inference_mode
        out.append((f, f"{module}.{name}", exercises))
    return out


@contextlib.contextmanager
def refusing(exercise: int):
    """Every answer in ANSWERS refuses to run inside the block (exercise: the one being served)."""
    swapped = []
    try:
        for f, where, exercises in functions():
            swapped.append((f, f.__code__))
            f.__code__ = _refusal(f.__name__, where, exercises)
        yield
    finally:
        for f, code in swapped:
            f.__code__ = code
