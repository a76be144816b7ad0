"""Notebooks and JupyterLab: what the notebooks share, and `make lab` (jupyter, jupyter_config).

This module: what the notebooks share: their parameters cells' defaults, where their outputs go, and how
their tables show in JupyterLab."""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import os
import platform
import subprocess
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
    (papermill -p passes text that is not a number as a string; lists and dicts go with -y)."""
    for k, p in parameters(name).items():
        t, x = p["inferred_type_name"], values[k]
        if t not in TYPES:
            continue
        if not isinstance(x, TYPES[t]) or isinstance(x, bool) and t != "bool":
            hint = f" (papermill: -y '{{{k}: ...}}' passes a {t})" if t in ("list", "dict") else ""
            raise TypeError(f"{name}: parameter {k} must be {t}, got {x!r} ({type(x).__name__}){hint}")


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


RUN_FIELDS = ("dtype", "engine", "device")  # every checks file names them (test_provenance)


def run_fields(dtype: str, engine: str, device: str = "cpu") -> dict:
    """The run fields of a notebook that is not one sweep: its dtype and engine as it states
    them, and the device's name (the CPU's model, or the GPU's)."""
    from bildlib.analysis.evaluate import device_name
    from bildlib.models import resolve_device

    return {"dtype": dtype, "engine": engine, "device": device_name(resolve_device(device))}


CODE = ("bildlib", "kernels", "notebooks")  # what a run's outputs come from (docs and figures are not)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout


def commit(root: Path = REPO_ROOT) -> str:
    """The commit a run ran from: the checkout's HEAD, with "+changes" where the package or the
    notebooks differed from it; "unknown" outside a git checkout (an installed wheel)."""
    return run_state(root)["commit"]


def code_state(root: Path = REPO_ROOT) -> str:
    """The code a run ran: a hash of HEAD's trees of the package, the kernels and the notebooks,
    so that runs made at different commits that changed only docs or figures share it; with
    "+changes" where those folders differed from HEAD; "unknown" outside a git checkout."""
    return run_state(root)["code"]


def run_state(root: Path = REPO_ROOT) -> dict[str, str]:
    """{"commit": commit, "code": code_state}, from one `git status` of the code folders: what a
    run's record (a checks JSON, a benchmark's JSON) says it ran from."""
    try:
        head = _git(root, "rev-parse", "--short=12", "HEAD").strip()
        trees = _git(root, "rev-parse", *(f"HEAD:{d}" for d in CODE))
        changes = "+changes" if _git(root, "status", "--porcelain", "--", *CODE).strip() else ""
    except (OSError, subprocess.CalledProcessError):
        return {"commit": "unknown", "code": "unknown"}
    return {"commit": head + changes, "code": hashlib.sha256(trees.encode()).hexdigest()[:12] + changes}


def machine() -> str:
    """The machine a run ran on, as its record names it: "Linux x86_64, 2 CPUs, torch 2.13.0+cpu"."""
    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs, torch {_torch_version()}"


def products() -> dict:
    """The product paths this process's engines chose and whether all are row-invariant here
    (models.rowinv.summary): {"products": ..., "row_invariant": ..., "isa": ...}."""
    from bildlib.models import rowinv

    return rowinv.summary()


def save_checks(checks: dict, name: str, out_dir: Path | str) -> None:
    """<out_dir>/<name>_checks.json: what a notebook checked while it ran (baseline spread,
    equivalences, busy flags, ...), so that the checks reach git with the figures and a test can
    assert them on the committed files. Values are numbers, strings, booleans or lists of them; the
    commit the run ran from (`commit`), its code (`code_state`), the machine, and the product
    paths its engines chose with whether they are row-invariant here (`products`) are added. It
    prints the checks and where they went, and returns nothing (a cell ending with it echoes no
    path)."""
    from bildlib import data

    if missing := [k for k in RUN_FIELDS if k not in checks]:
        raise ValueError(f"{name}'s checks must name the run's {', '.join(missing)} (analysis.run_info or "
                         "notebook.run_fields give them): README states each block's dtype and engine")
    checks = checks | run_state() | {"machine": machine()} | products()
    path = Path(out_dir) / f"{name}_checks.json"
    for k, v in checks.items():
        print(f"{k}: {v:.2f}" if isinstance(v, float) else f"{k}: {v}")
    with data.atomic_path(path) as tmp:
        tmp.write_text(
            json.dumps(checks, indent=1, ensure_ascii=False, sort_keys=True, default=_plain) + "\n"
        )
    print(f"checks saved to {path}")


def sweep_checks(s, df) -> dict:
    """The checks every sweep notebook records: its baseline's latency and the spread of its
    repeats, how many configurations were timed on a busy machine, the run (analysis.run_info)
    and the metric's signature. s: analysis.summarize(df)."""
    from bildlib import analysis

    return analysis.run_info(s) | {
        "threads": df.attrs.get("threads"),
        "baseline ms": 1e3 * s.attrs["baseline_latency_s"],
        "baseline repeats": s.attrs["baseline_repeats"],
        "baseline spread %": s.attrs["baseline_spread_pct"],
        "configurations": int(len(s)),
        "busy configurations": int(s["busy"].sum()),
        "signature": df.attrs.get("signature", ""),
    }


def _torch_version() -> str:
    from importlib.metadata import version

    return version("torch")


def _plain(x):
    """numpy numbers as Python's (json.dumps default)."""
    return x.item() if hasattr(x, "item") else str(x)


def show(df, digits: int = 3, hide: tuple = ("n", "split", "dtype", "device")):
    """A table as a notebook shows it (the CSV keeps every column): no index, numbers to `digits`
    decimals, a missing value as "–", and the run's constant columns (hide) left out, since the
    checks file and the print above the table name them."""
    keep = [c for c in df.columns if not (c in hide and df[c].nunique(dropna=False) <= 1)]
    return df[keep].style.hide(axis="index").format(precision=digits, na_rep="–")
