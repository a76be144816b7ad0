"""What a notebook's run records beside its figures: the checks file (save_checks, with the
commit, the code state, the machine and the product paths), the checks every sweep records, and
how a table shows in JupyterLab (show)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
from pathlib import Path

from bildlib import REPO_ROOT

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
