"""A newcomer's first command, timed: `make fig4` in a fresh clone, as README's "Start here" tells
it, with nothing beside the clone (no ../shared: Multi30k's val ships in data/multi30k/).

    python -m bildlib.reports.firstrun record    # clone this checkout into a temporary folder, time it
    python -m bildlib.reports.firstrun           # print README's block from the committed rows

record times the two parts apart: `make setup` (the virtual environment and the install: pip's
downloads, or its cache) and then `make fig4` (the notebook: model loading, the sweep, the figure),
and appends one row per machine kind to figures/firstrun/fig4.csv (CPU, instruction set, cores,
code state, minutes). README's block (`firstrun`) lists every row, so each kind of CPU a run was
recorded on is named with its time. A row whose `measured_by` is not "firstrun record" was
measured by hand elsewhere and says where.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT, data
from bildlib.analysis.tables import read_csv, valid

FILE = "figures/firstrun/fig4.csv"
COLUMNS = ["cpu", "isa", "cores", "setup_min", "notebook_min", "total_min", "dtype", "engine", "code",
           "measured_by"]
SELF = "firstrun record"


def record(root: Path = REPO_ROOT, out: Path | None = None) -> dict:
    """Clone root into a temporary folder, run `make setup` then `make fig4` there, and add the row
    (replacing an earlier one for the same CPU and instruction set) to out."""
    from bildlib.models.cpuinfo import cpu_name, isa

    env = {k: v for k, v in os.environ.items() if k not in ("BILD_DATA_DIR", "VIRTUAL_ENV", "BILD_HOME")}
    minutes = {}
    with tempfile.TemporaryDirectory() as d:
        clone = Path(d) / "bildlib"
        subprocess.run(["git", "clone", "-q", str(root), str(clone)], check=True)
        for part, target in (("setup_min", "setup"), ("notebook_min", "fig4")):
            t0 = time.perf_counter()
            subprocess.run(["make", "--no-print-directory", target], cwd=clone, env=env, check=True)
            minutes[part] = round((time.perf_counter() - t0) / 60, 1)
        ran = json.loads((clone / "build/figures/fig4/fig4_checks.json").read_text())  # the run's record
        if ran["code"].endswith("+changes"):  # say what differed from the clone's commit
            status = subprocess.run(["git", "status", "--short"], cwd=clone, capture_output=True, text=True)
            print(f"the run's code state differs from its commit:\n{status.stdout}")
    row = {"cpu": cpu_name(), "isa": isa(), "cores": os.cpu_count(), **minutes,
           "total_min": round(sum(minutes.values()), 1), "dtype": ran["dtype"], "engine": ran["engine"],
           "code": ran["code"], "measured_by": SELF}  # fmt: skip
    path = out or root / FILE
    old = pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=COLUMNS)
    same = (old["cpu"] == row["cpu"]) & (old["isa"] == row["isa"])
    new = pd.concat([old[~same], pd.DataFrame([row])], ignore_index=True)[COLUMNS]
    path.parent.mkdir(parents=True, exist_ok=True)
    with data.atomic_path(path) as tmp:
        new.to_csv(tmp, index=False)
    return row


def block(root: Path = REPO_ROOT) -> str:
    """README's `firstrun` block: one line per recorded kind of CPU."""
    t = valid(read_csv(root, FILE), ["cpu", "isa", "setup_min", "notebook_min", "total_min", "measured_by"])
    own = t["measured_by"] == SELF
    valid(t, COLUMNS, rows=own)  # a run this command recorded names everything; one timed by hand may not
    lines = []
    for r in t.astype(object).where(t.notna(), "").itertuples():
        cores = f", {r.cores:.0f} cores" if r.cores != "" else ""
        ran = f", in {r.dtype}" if r.dtype else ""
        ran += f" on the {r.engine} engine" if r.engine else ""
        code = f"; code state `{r.code}`" if r.code else ""
        by = "" if r.measured_by == SELF else f"; {r.measured_by}"
        lines.append(f"- **{r.cpu}, {r.isa}{cores}:** {r.total_min:.0f} min ({r.setup_min:.0f} to set up, "
                     f"{r.notebook_min:.0f} for the notebook{ran}{code}{by})")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", nargs="?", choices=["record", "block"], default="block")
    a = ap.parse_args(argv)
    print(record() if a.what == "record" else block())


if __name__ == "__main__":
    main()
