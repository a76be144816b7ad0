"""Is lossless BiLD exact on this machine? BiLD with distance="exact" against vanilla greedy decoding
of the shipped large model on Multi30k val, in one dtype, under whatever ISA caps the environment
sets (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY: `make exactness` runs each cap this CPU supports
in its own process). Each sentence's two decodes run back to back, their order alternating.

One row per run, appended to figures/exactness/exactness.csv (atomically; a run already recorded
for this CPU, ISA, dtype and code state is skipped, so the sweep resumes): the CPU, the ISA and
caps, the product paths the engine chose (models.rowinv) and whether all were row-invariant, how
many sentences differ, and each decoder's mean ms per sentence.

    python -m bildlib.bench.exactness --dtype bfloat16 [--n 1014] [--paths first]
    python -m bildlib.bench.exactness --sweep      # make exactness: every cap, both dtypes

--paths first runs today's engine before the probe (the fastest path of each product, unprobed),
for the cost of the invariant paths: the same command without it, alternated, gives the other
side (`make exactness` runs both).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from bildlib.models import rowinv

OUT = Path("figures/exactness/exactness.csv")
KEY = ["cpu", "isa", "dtype", "paths", "n", "code"]


def run(n: int | None, dtype: str, threads: int = 2) -> dict:
    """One row: lossless BiLD against vanilla on the first n val sentences (all: None)."""
    from bildlib import data
    from bildlib import decoding as D
    from bildlib.experiments.presets import PRESETS
    from bildlib.models import load_pair
    from bildlib.notebook import code_state

    torch.set_num_threads(threads)
    p = PRESETS["multi30k"]
    small, large = load_pair(p.model("aligned"), p.model("large"), "cpu", dtype, "lean")
    sources = [small.encode(x) for x in data.load("multi30k", "val", n).sources]
    D.vanilla(large, sources[0]), D.bild(small, large, sources[0], distance="exact")  # warm-up
    run = {"vanilla": lambda x: D.vanilla(large, x)[0],
           "lossless": lambda x: D.bild(small, large, x, distance="exact")[0]}  # fmt: skip
    ms, differ, first = {"vanilla": 0.0, "lossless": 0.0}, 0, None
    for i, x in enumerate(sources):
        outs = {}
        for name in list(run)[:: 1 if i % 2 == 0 else -1]:
            t = time.perf_counter()
            outs[name] = run[name](x)
            ms[name] += 1e3 * (time.perf_counter() - t)
        if outs["vanilla"] != outs["lossless"]:
            differ += 1
            first = i if first is None else first
    s = rowinv.summary()
    return {"cpu": rowinv.cpu_name(), "isa": s["isa"], "dtype": dtype,
            "paths": "first" if rowinv.FIRST_ONLY else "probed", "n": len(sources), "code": code_state(),
            "threads": threads, "differ": differ, "first_differing": first,
            "row_invariant": None if rowinv.FIRST_ONLY else s["row_invariant"], "products": s["products"],
            "vanilla_ms": ms["vanilla"] / len(sources),
            "lossless_ms": ms["lossless"] / len(sources)}  # fmt: skip


def record(row: dict, out: Path = OUT) -> None:
    """Append row to out (atomically), replacing a row with the same KEY."""
    from bildlib.data import atomic_path

    old = pd.read_csv(out) if out.is_file() else pd.DataFrame(columns=list(row))
    if len(old):
        same = (old[KEY].astype(str) == pd.Series({k: str(row[k]) for k in KEY})).all(axis=1)
        old = old[~same]
    t = pd.concat([old, pd.DataFrame([row])], ignore_index=True)
    with atomic_path(out) as tmp:
        t.to_csv(tmp, index=False)


def done(n: int, dtype: str, out: Path = OUT) -> bool:
    """Whether this CPU, ISA, dtype, paths and code state already have a row of n sentences."""
    from bildlib.notebook import code_state

    if not out.is_file():
        return False
    t = pd.read_csv(out).astype(str)
    want = {"cpu": rowinv.cpu_name(), "isa": rowinv.isa(), "dtype": dtype, "n": str(n),
            "paths": "first" if rowinv.FIRST_ONLY else "probed", "code": code_state()}  # fmt: skip
    return bool((t[list(want)] == pd.Series(want)).all(axis=1).any())


def sweep(n: int, dtypes: list[str], out: Path = OUT, timeout_s: int = 1800) -> None:
    """Every run `make exactness` makes, each in its own process: today's engine and the probed
    one without caps, then the probed engine under each ISA cap of this CPU (rowinv.caps), for
    each dtype; a run recorded already is skipped, a run that fails or passes timeout_s is named."""
    import os
    import subprocess
    import sys

    runs = [({}, d, p) for d in dtypes for p in ("probed", "first")]
    runs += [(cap, d, "probed") for d in dtypes for cap in rowinv.caps()[1:]]
    for cap, dtype, paths in runs:
        cmd = [sys.executable, "-m", "bildlib.bench.exactness", "--dtype", dtype, "--n", str(n),
               "--paths", paths, "--out", str(out)]  # fmt: skip
        print(" ".join(f"{k}={v}" for k, v in cap.items()), " ".join(cmd[1:]), flush=True)
        r = subprocess.run(cmd, env=os.environ | cap, timeout=timeout_s)
        if r.returncode:
            raise SystemExit(f"exactness: {cap or 'no cap'} {dtype} {paths}: exit status {r.returncode}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sweep", action="store_true", help="every cap and dtype, each in its own process")
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    ap.add_argument("--n", type=int, default=1014, help="val sentences (1014: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--paths", default="probed", choices=["probed", "first"])
    ap.add_argument("--out", type=Path, default=OUT)
    a = ap.parse_args(argv)
    if a.sweep:
        return sweep(a.n, ["bfloat16", "float32"], a.out)
    rowinv.FIRST_ONLY = a.paths == "first"
    if done(a.n, a.dtype, a.out):
        print(f"exactness: {rowinv.isa()} {a.dtype} ({a.paths}) recorded already in {a.out}")
        return
    row = run(a.n, a.dtype, a.threads)
    record(row, a.out)
    print(row)


if __name__ == "__main__":
    main()
