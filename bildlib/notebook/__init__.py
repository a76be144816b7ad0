"""Notebooks and JupyterLab: what the notebooks share, and `make lab`.

`params` (a notebook's parameters cell: defaults, type checks, where outputs go, the sweep
arguments its parameters give), `checks` (what a run records beside its figures: the checks
file with commit, code state and machine; how a table shows), `jupyter` and `jupyter_config`
(`make lab`), `tutorial` (the course: the lab, its grading and its sandbox)."""

from bildlib.notebook.checks import (
    CODE,
    RUN_FIELDS,
    code_state,
    commit,
    machine,
    products,
    run_fields,
    run_state,
    save_checks,
    show,
    sweep_checks,
)  # fmt: skip
from bildlib.notebook.params import (
    FIGURES,
    NOTEBOOKS,
    PLACES,
    PUBLISH,
    TYPES,
    check_out_dir,
    check_parameters,
    defaults,
    outputs,
    parameters,
    sweep_args,
)  # fmt: skip

__all__ = [
    "CODE", "FIGURES", "NOTEBOOKS", "PLACES", "PUBLISH", "RUN_FIELDS", "TYPES", "check_out_dir",
    "check_parameters", "code_state", "commit", "defaults", "machine", "outputs", "parameters", "products",
    "run_fields", "run_state", "save_checks", "show", "sweep_checks", "sweep_args",
]  # fmt: skip
