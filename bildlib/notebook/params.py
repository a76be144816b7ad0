"""A notebook's parameters cell: its declared parameters and defaults, their type checks, where
the notebook's outputs go, and the run settings its parameters give a sweep (sweep_args)."""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import hashlib
import io
import json
import os
import tokenize
from pathlib import Path

from bildlib import REPO_ROOT, repo_relative

NOTEBOOKS = REPO_ROOT / "notebooks"
FIGURES = REPO_ROOT / "figures"  # the committed results: written by the make targets only
PUBLISH = "BILD_PUBLISH"  # "1" in the environment of a make target's papermill runs (Makefile: PAPERMILL)
# Where the outputs go and where results are cached do not change what a run computes.
PLACES = ("out_dir", "results_dir")


# The types a parameters cell declares, as isinstance() checks them (an int is a float too).
TYPES = {"str": str, "int": int, "float": int | float, "bool": bool, "list": list, "dict": dict}


@functools.cache
def parameters(name: str) -> dict:
    """notebooks/<name>.ipynb's parameters cell as papermill.inspect_notebook reads it: {parameter:
    {name, inferred_type_name, default, help}}; read once per process (check_parameters and outputs
    both need it). Read here with ast and tokenize, not by importing papermill: that import costs
    each notebook's kernel about 2 s (nbformat's jsonschema compiles its format grammars), and
    tests/test_notebooks.py checks that both readings agree on every notebook."""
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    cell = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cell) != 1:
        raise ValueError(f"notebooks/{name}.ipynb: expected one cell tagged parameters, found {len(cell)}")
    src = "".join(cell[0]["source"])
    comments = {t.start[0]: t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
                if t.type == tokenize.COMMENT}  # fmt: skip
    out = {}
    for node in ast.parse(src).body:  # name: type = default  # help
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            k = node.target.id
            help_ = comments.get(node.end_lineno, "#")[1:].strip()
            out[k] = {"name": k, "inferred_type_name": ast.unparse(node.annotation),
                      "default": ast.get_source_segment(src, node.value), "help": help_}  # fmt: skip
    return out


def defaults(name: str) -> dict:
    """The parameters cell of notebooks/<name>.ipynb as {parameter: default value}."""
    return {k: ast.literal_eval(v["default"]) for k, v in parameters(name).items()}


def check_parameters(name: str, values: dict) -> None:
    """Every parameter has the type its line in the parameters cell declares; values: the
    notebook's variables (globals()). The error names the parameter, the type and the value
    (papermill -p passes text that is not a number as a string; lists and dicts go with -y). A
    name papermill injected that the cell does not declare (a misspelt -p) is an error naming the
    nearest declared one: papermill itself only warns, and the run would go on with the default."""
    declared = parameters(name)
    for k in injected(values):
        if k not in declared:
            near = difflib.get_close_matches(k, declared, n=1)
            hint = f"; did you mean {near[0]}?" if near else f"; its parameters: {', '.join(declared)}"
            raise NameError(f"{name}: no parameter {k!r} (papermill -p {k} was given){hint}")
    for k, p in parameters(name).items():
        t, x = p["inferred_type_name"], values[k]
        if t not in TYPES:
            continue
        if not isinstance(x, TYPES[t]) or isinstance(x, bool) and t != "bool":
            hint = f" (papermill: -y '{{{k}: ...}}' passes a {t})" if t in ("list", "dict") else ""
            raise TypeError(f"{name}: parameter {k} must be {t}, got {x!r} ({type(x).__name__}){hint}")


def injected(values: dict) -> list[str]:
    """The names papermill's injected-parameters cell assigned (it begins "# Parameters"), read from
    the kernel's input history (IPython's In); none outside IPython."""
    out = []
    for src in values.get("In") or []:
        if isinstance(src, str) and src.startswith("# Parameters\n"):
            with contextlib.suppress(SyntaxError):
                out += [t.id for n in ast.parse(src).body if isinstance(n, ast.Assign)
                        for t in n.targets if isinstance(t, ast.Name)]  # fmt: skip
    return out


def outputs(name: str, values: dict) -> Path:
    """The folder a notebook's figures and tables go to. values: the notebook's variables
    (globals()). An out_dir given: that folder (relative paths from the repository root); the
    make targets that publish results pass figures/ (or a folder in it). Empty: build/figures/<name>/
    for the parameters cell's values, build/figures/<name>-<hash of the changed ones>/ for any
    other run, so that running a notebook in Jupyter or papermill never touches a tracked file.
    Prints where the outputs go."""
    d = defaults(name)
    run = {k: values[k] for k in d}
    changed = {k: v for k, v in run.items() if k not in PLACES and v != d[k]}
    if run["out_dir"]:
        out = REPO_ROOT / run["out_dir"]  # an absolute out_dir stays as it is
        check_out_dir(run["out_dir"], out)
    elif not changed:
        out = REPO_ROOT / "build" / "figures" / name
    else:
        tag = hashlib.sha256(json.dumps(changed, sort_keys=True, default=str).encode()).hexdigest()[:8]
        out = REPO_ROOT / "build" / "figures" / f"{name}-{tag}"
        print(f"not the default run ({', '.join(f'{k}={v!r}' for k, v in changed.items())})")
    print(f"outputs go to {repo_relative(out)}/")
    return out


def check_out_dir(given: str, out: Path) -> None:
    """out_dir may name a folder (made when missing), not a file; and figures/ only in a make
    target's run (PUBLISH set): a run by hand must not replace a committed result. ValueError,
    naming out_dir."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir={given!r}: {repo_relative(out)} is a file, not a folder")
    if out.resolve().is_relative_to(FIGURES.resolve()) and os.environ.get(PUBLISH) != "1":
        raise ValueError(f"out_dir={given!r}: figures/ holds the committed results, and only the make "
                         "targets write it (make fig4 PUBLISH=1, make figures, ...: docs/experiments.md). "
                         "Leave out_dir empty (build/figures/<notebook>/) or name another folder")


SETTINGS = ("device", "dtype", "engine", "threads")  # parameters that go into RunSettings as they are


def sweep_args(values: dict, **changes) -> dict:
    """The arguments a notebook's parameters give experiments.sweep, the one place where they map
    onto them. values: the notebook's variables (globals()). split and n_examples; the
    executor, address and shards where the notebook has them (empty or 0: None); and settings, a
    RunSettings of device, dtype, engine, threads, results_dir (from the repository root) and
    checkpoints, as far as the notebook declares them. changes: RunSettings fields that replace
    those (a notebook's own checkpoints or results folder)."""
    from bildlib.experiments.settings import RunSettings

    fields = {k: values[k] for k in SETTINGS if k in values}
    if "results_dir" in values:
        fields["results"] = REPO_ROOT / values["results_dir"]
    if values.get("checkpoints"):
        fields["checkpoints"] = values["checkpoints"]
    args = {"split": values["split"], "n_examples": values["n_examples"]}
    args |= {k: values[k] or None for k in ("executor", "address", "shards") if k in values}
    return args | {"settings": RunSettings(**(fields | changes))}
