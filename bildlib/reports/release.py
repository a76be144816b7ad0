"""make release's record (figures/release_times.csv) and README's block about it.

`make release` runs each target of the release once per code state (notebook.code_state): before a
target it asks `done TARGET` (exit 0: already recorded at this code state, skip it) and `count` (the
results in the cache, data/results), and after it `record TARGET SECONDS COUNT`, which appends the
target's minutes and how many results it computed (the rest came from the cache). README's block
says how long the release took, from those rows only, and which README blocks quote runs made at
another code state (each run's checks JSON names its `code`).

    python -m bildlib.reports.release done figures; python -m bildlib.reports.release count
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT, data, notebook
from bildlib.analysis.tables import read_csv

FILE = "figures/release_times.csv"
COLUMNS = ["target", "code", "minutes", "new_results", "machine"]


def count(root: Path = REPO_ROOT) -> int:
    """Finished results in the cache (one parquet per configuration: experiments.cache; a sweep's
    unfinished rows sit in *.partial.parquet files, which become results when they finish)."""
    files = (root / "data" / "results").rglob("*.parquet")
    return sum(1 for p in files if not p.name.endswith(".partial.parquet"))


def rows(root: Path = REPO_ROOT) -> pd.DataFrame:
    f = root / FILE
    return pd.read_csv(f, dtype={"code": str}) if f.exists() else pd.DataFrame(columns=COLUMNS)


def done(target: str, root: Path = REPO_ROOT) -> bool:
    t = rows(root)
    return bool(((t["target"] == target) & (t["code"] == notebook.code_state(root))).any())


def record(target: str, seconds: float, before: int, root: Path = REPO_ROOT) -> None:
    """Appends the target's row (atomically: the file is rewritten whole)."""
    code = notebook.code_state(root)
    if code.endswith("+changes") or code == "unknown":
        raise SystemExit(f"make release: code state {code!r}: a release records committed code only")
    machine = notebook.machine()
    row = {"target": target, "code": code, "minutes": round(seconds / 60, 1),
           "new_results": count(root) - before, "machine": machine}  # fmt: skip
    t = pd.concat([rows(root), pd.DataFrame([row])], ignore_index=True)
    with data.atomic_path(root / FILE) as tmp:
        t[COLUMNS].to_csv(tmp, index=False)


def codes_read(root: Path, paths: list[str]) -> dict[str, str]:
    """{checks file: the code state it names} for the runs behind the paths a block read: each JSON
    read, and for a CSV whose folder gave no JSON, the `<prefix>_checks.json` beside it whose prefix
    starts the CSV's name (table5.csv: table5_checks.json; peers_all.csv: peers_checks.json), or the
    JSON of the same name (throughput.csv: throughput.json); a CSV with none whose rows each name
    their run's code state (a `code` column: figures/firstrun/fig4.csv) gives {"<csv> row i": code}."""
    paths = list(dict.fromkeys(paths))
    runs = [p for p in paths if p.endswith(".json")]
    folders = {str(Path(p).parent) for p in runs}
    rows = {}
    for p in paths:
        f = root / p
        if p.endswith(".csv") and str(Path(p).parent) not in folders:
            found = [str(c.relative_to(root)) for c in sorted(f.parent.glob("*_checks.json"))
                     if f.stem.startswith(c.name.removesuffix("_checks.json"))]  # fmt: skip
            if f.with_suffix(".json").is_file():  # throughput.csv: throughput.json
                found.append(str(f.with_suffix(".json").relative_to(root)))
            if not found and "code" in (t := pd.read_csv(f)):
                rows |= {f"{p} row {i}": str(c) for i, c in enumerate(t["code"])}
            runs += found
    return {p: json.loads((root / p).read_text()).get("code", "none") for p in dict.fromkeys(runs)} | rows


def block(root: Path = REPO_ROOT, stale: list[str] | None = None, docs: dict | None = None) -> str:
    """README's release line: the last release's code state, machine, minutes per target, total;
    `stale`: the README blocks whose runs are from another code state, `docs`: {doc: such blocks}
    (reports.readme passes them)."""
    t = read_csv(root, FILE)
    code = t["code"].iloc[-1]
    t = t[t["code"] == code]
    parts = ", ".join(f"{r.target} {r.minutes:g}" for r in t.itertuples())
    total = t["minutes"].sum()
    line = (f"**The release** (`make release`, code state `{code}`, {t['machine'].iloc[-1]}): "
            f"{len(t)} targets in {int(total // 60)} h {total % 60:.0f} min ({parts}; minutes), "
            f"{t['new_results'].sum():,} results computed and the rest read from the results cache "
            f"(`data/results`, kept while the decoding code is unchanged), so a cold run takes longer.")
    if stale:
        line += (" These blocks still quote runs from another code state (the release goes on): "
                 + ", ".join(f"`{s}`" for s in stale) + ".")
    else:
        line += " Every block below quotes runs from this code state."
    if docs:
        line += (" In docs/, blocks from other code states: "
                 + "; ".join(f"{Path(f).name} ({', '.join(b)})" for f, b in docs.items()) + ".")
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("done", help="exit 0 if TARGET is recorded at this code state").add_argument("target")
    sub.add_parser("count", help="print how many results the cache holds")
    r = sub.add_parser("record", help="append TARGET's row")
    r.add_argument("target")
    r.add_argument("seconds", type=float)
    r.add_argument("before", type=int, help="`count` before the target ran")
    a = ap.parse_args(argv)
    if a.cmd == "done":
        return 0 if done(a.target) else 1
    if a.cmd == "count":
        print(count())
    else:
        record(a.target, a.seconds, a.before)
    return 0


if __name__ == "__main__":
    sys.exit(main())
