"""Is lossless BiLD exact on this machine, and what does exactness cost? On Multi30k val, the shipped
pair, one engine (`--engine`: auto, native where it builds; or lean) and one dtype per run:

- `check`: BiLD with distance="exact" against vanilla greedy decoding of the large model, under the
  ISA caps the environment sets (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY; `--sweep` runs each cap
  this CPU supports in its own process). Each sentence's two decodes run back to back, their
  order alternating. Rows in figures/exactness/exactness.csv.
- `cost`: the engine with its probed, row-invariant paths (models.rowinv) against today's engine
  before the probe (each product's fastest path, unprobed: rowinv.first_only), in one process on
  the same sentences, the four decoders (vanilla and lossless on each engine) interleaved per
  sentence, their order rotating, after a warm-up. Rows in figures/exactness/cost.csv: each
  decoder's ms per sentence, the probed engine's time over today's with its 95 % interval (the
  paired bootstrap of bildlib.analysis.intervals), and how many sentences each engine's lossless
  BiLD decodes otherwise than its vanilla.

A row already recorded for this CPU, ISA, dtype, n and code state is skipped, so `make exactness`
resumes; rows are written atomically.

    python -m bildlib.bench.exactness --sweep                 # make exactness: check, every cap
    python -m bildlib.bench.exactness --dtype float32 [--n 1014] [--cost]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bildlib.models import rowinv

OUT = Path("figures/exactness")
KEY = ["cpu", "isa", "dtype", "n", "code", "engine"]


def with_engines(t: pd.DataFrame) -> pd.DataFrame:
    """t with its engine column filled: rows recorded before runs named their engine ran the
    lean engine (the exactness block reads them so too: bildlib.reports.exactness)."""
    return t.assign(engine=t["engine"].fillna("lean")) if "engine" in t else t.assign(engine="lean")


def _setup(n: int | None, dtype: str, threads: int, engine: str = "lean"):
    """(the first n val sources, encoded; {"vanilla", "lossless"}: f(source) -> output ids on the
    shipped pair in dtype)."""
    from bildlib import data
    from bildlib import decoding as D
    from bildlib.experiments.presets import PRESETS
    from bildlib.models import load_pair

    torch.set_num_threads(threads)
    p = PRESETS["multi30k"]
    small, large = load_pair(p.model("aligned"), p.model("large"), "cpu", dtype, engine)
    srcs = [small.encode(x) for x in data.load("multi30k", "val", n).sources]
    run = {"vanilla": lambda x: D.vanilla(large, x)[0],
           "lossless": lambda x: D.bild(small, large, x, distance="exact")[0]}  # fmt: skip
    return srcs, run


def _row(dtype: str, n: int, threads: int, engine: str = "lean") -> dict:
    from bildlib.notebook import code_state

    return {"cpu": rowinv.cpu_name(), "isa": rowinv.isa(), "dtype": dtype, "n": n, "code": code_state(),
            "engine": engine, "threads": threads}  # fmt: skip


def check(n: int | None, dtype: str, threads: int = 2, engine: str = "auto") -> dict:
    """One row: lossless BiLD against vanilla on the first n val sentences (None: all), on
    `engine` ("auto" recorded as what it resolved to)."""
    srcs, run = _setup(n, dtype, threads, engine)
    head = _row(dtype, len(srcs), threads, _resolved(engine, dtype))  # the code state as the run starts
    for f in run.values():
        f(srcs[0])  # warm-up
    ms, differ, first = dict.fromkeys(run, 0.0), 0, None
    for i, x in enumerate(srcs):
        outs = {}
        for name in list(run)[:: 1 if i % 2 == 0 else -1]:
            t = time.perf_counter()
            outs[name] = run[name](x)
            ms[name] += 1e3 * (time.perf_counter() - t)
        if outs["vanilla"] != outs["lossless"]:
            differ, first = differ + 1, i if first is None else first
    s = rowinv.summary()
    return head | {
        "differ": differ, "first_differing": first, "row_invariant": s["row_invariant"],
        "products": s["products"], "whole_call": s["whole_call"],
        **{f"{k}_ms": v / len(srcs) for k, v in ms.items()}}  # fmt: skip


def _resolved(engine: str, dtype: str) -> str:
    """What `engine` runs the shipped large on here in dtype ("auto": models.engine.auto_engine)."""
    if engine != "auto":
        return engine
    from transformers import AutoConfig

    from bildlib.experiments.presets import PRESETS
    from bildlib.models import auto_engine

    config = AutoConfig.from_pretrained(PRESETS["multi30k"].model("large"))
    weights = torch.float32 if dtype == "int8" else getattr(torch, dtype)  # int8: float32 weights
    return auto_engine(config, weights, "cpu")


def cost(n: int | None, dtype: str, threads: int = 2) -> list[dict]:
    """Rows per decoder: the probed engine against today's, in this process (module docstring)."""
    from bildlib.analysis import intervals

    with rowinv.first_only():
        srcs, old = _setup(n, dtype, threads)  # today's engine: its products' fastest paths
    _, new = _setup(n, dtype, threads)
    head = _row(dtype, len(srcs), threads)  # the code state as the run starts
    dec = {f"{k} today": v for k, v in old.items()} | {f"{k} probed": v for k, v in new.items()}
    names = list(dec)

    def call(name, x):
        if name.endswith("today"):
            with rowinv.first_only():  # rows_mm and attention choose at call time
                return dec[name](x)
        return dec[name](x)

    for name in names:
        call(name, srcs[0])  # warm-up
    secs, outs = {k: [] for k in names}, {k: [] for k in names}
    for i, x in enumerate(srcs):
        for name in names[i % 4 :] + names[: i % 4]:  # the order rotates
            t = time.perf_counter()
            outs[name].append(call(name, x))
            secs[name].append(time.perf_counter() - t)
    W = intervals.draws(len(srcs))  # (B, n) resample counts, shared by every decoder (paired)
    s = rowinv.summary()
    for e in ("today", "probed"):  # sentences whose lossless BiLD is not that engine's vanilla
        pairs = zip(outs[f"lossless {e}"], outs[f"vanilla {e}"], strict=True)
        head[f"lossless_differ_{e}"] = sum(a != b for a, b in pairs)
    head |= {"row_invariant": s["row_invariant"], "products": s["products"]}
    rows = []
    for kind in ("vanilla", "lossless"):
        a, b = (np.asarray(secs[f"{kind} {e}"]) for e in ("probed", "today"))
        lo, hi = intervals._tails((W @ a) / (W @ b))
        rows.append(head | {"decoder": kind, "ms_probed": 1e3 * a.mean(), "ms_today": 1e3 * b.mean(),
                            "time_ratio": a.mean() / b.mean(), "time_ratio_lo": lo, "time_ratio_hi": hi})
    return rows


def record(rows: list[dict], out: Path) -> None:
    """Append rows to the CSV out (atomically), replacing rows with the same KEY (and decoder)."""
    from bildlib.data import atomic_path

    new = pd.DataFrame(rows)
    key = KEY + (["decoder"] if "decoder" in new else [])
    old = with_engines(pd.read_csv(out)) if out.is_file() else new.iloc[:0]
    if len(old):
        old = old[~old[key].astype(str).apply(tuple, axis=1).isin(new[key].astype(str).apply(tuple, axis=1))]
    with atomic_path(out) as tmp:
        pd.concat([old, new], ignore_index=True).to_csv(tmp, index=False)


def done(n: int, dtype: str, out: Path, engine: str = "lean") -> bool:
    """Whether out has a row of this CPU, ISA, dtype, n, code state and engine."""
    if not out.is_file():
        return False
    t = with_engines(pd.read_csv(out)).astype(str)
    want = {k: str(v) for k, v in _row(dtype, n, 0, engine).items() if k in KEY}
    return bool((t[list(want)] == pd.Series(want)).all(axis=1).any())


def sweep(n: int, dtypes: list[str], out: Path = OUT, timeout_s: int = 3600) -> None:
    """`make exactness`: the cost run without caps, then the check under no cap and each ISA cap
    of this CPU (rowinv.caps), for each dtype, each in its own process; a run recorded already is
    skipped, a run that fails or passes timeout_s stops the sweep, named."""
    runs = [({}, d, ["--cost"]) for d in dtypes] + [(c, d, []) for c in rowinv.caps() for d in dtypes]
    for cap, dtype, extra in runs:
        cmd = [sys.executable, "-m", "bildlib.bench.exactness", "--dtype", dtype, "--n", str(n),
               "--out", str(out), *extra]  # fmt: skip
        print(" ".join(f"{k}={v}" for k, v in cap.items()), " ".join(cmd[1:]), flush=True)
        r = subprocess.run(cmd, env=os.environ | cap, timeout=timeout_s)
        if r.returncode:
            raise SystemExit(f"exactness: {cap or 'no cap'} {dtype} {extra}: exit status {r.returncode}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32", "int8"])
    ap.add_argument("--n", type=int, default=1014, help="val sentences (1014: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--engine", default="auto", choices=["auto", "lean", "native"],
                    help="the check's engine (auto: native where it builds); --cost compares lean's paths")
    ap.add_argument("--cost", action="store_true", help="the probed engine against today's, interleaved")
    ap.add_argument("--sweep", action="store_true", help="make exactness: every run, each in its own process")
    ap.add_argument("--out", type=Path, default=OUT, help="the folder of exactness.csv and cost.csv")
    ap.add_argument("--strict", action="store_true", help="exit 1 where the engine calls itself exact "
                    "and lossless BiLD still differs (make test-cpus)")  # fmt: skip
    a = ap.parse_args(argv)
    if a.sweep:
        return sweep(a.n, ["bfloat16", "float32"], a.out)
    out = a.out / ("cost.csv" if a.cost else "exactness.csv")
    engine = "lean" if a.cost else _resolved(a.engine, a.dtype)
    if done(a.n, a.dtype, out, engine) and not a.strict:
        print(f"exactness: {rowinv.isa()} {a.dtype} n = {a.n} recorded already in {out}")
        return
    rows = cost(a.n, a.dtype, a.threads) if a.cost else [check(a.n, a.dtype, a.threads, a.engine)]
    record(rows, out)
    print(pd.DataFrame(rows).drop(columns=["products", "whole_call"], errors="ignore").to_string(index=False))
    wrong = [r for r in rows if r.get("row_invariant") and r.get("differ")]  # the check's rows
    if a.strict and wrong:
        raise SystemExit(f"exactness: {rowinv.isa()} {a.dtype}: the engine calls itself exact, yet lossless "
                         f"BiLD differs from vanilla on {wrong[0]['differ']} of {a.n} sentences")


if __name__ == "__main__":
    main()
