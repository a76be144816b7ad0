"""The batch > 1 throughput benchmark and exactness check (docs/batching.md): `make bench-batch`.

    python -m bildlib.bench.batchbench [--n 512] [--batches 1,2,4,8,16,32] [--dtype float32] [--out DIR]
    python -m bildlib.bench.batchbench --check      # every row of all of val at batch 8, fp32

A run writes to build/figures/batch/ unless --out names a folder; figures/batch/, the committed
run the README's blocks read, takes only a run with the default parameters (make bench-batch
passes it), so a trial run never overwrites a committed result.

Throughput: the first n val sentences, cut into chunks of B. For each B, every decoder runs
every chunk, interleaved chunk by chunk (the order rotating per chunk), after one untimed
warm-up chunk each; a chunk's wall time is its decode call. Sentences per second = n / the
summed chunk times; the speedup against batched vanilla large at the same B is a ratio of
sums over the same chunks, with a 95 % paired bootstrap interval over chunks. The decoders:
vanilla large (batched and one sentence at a time), BiLD lossless and the best BiLD within
0.5 BLEU (their settings read from the committed float32 `make bench` run, analysis.targets;
batched and, for the best, also with schedule="eager" and one sentence at a time) and greedy
speculative decoding (batched).
Every batched row is also compared with its batch-1 decoder's output (`equal`).

The per-call breakdown: calls and rows per call, ms per call, and the time outside the calls
(the decoders' Python: row bookkeeping, host syncs) per sentence.

Each B's rows are kept in <out>/.partial/ as they finish: an interrupted run resumes there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bildlib import REPO_ROOT, data, notebook
from bildlib import decoding as D
from bildlib.analysis import intervals, metrics, targets
from bildlib.analysis.evaluate import device_name, machine
from bildlib.decoding.batch import bild_batch, speculative_batch, vanilla_batch
from bildlib.models import load_pair

OUT = "figures/batch"  # the committed run (make bench-batch)
TRIAL = "build/figures/batch"  # any other
CK = REPO_ROOT / "data" / "checkpoints"
PEERS = targets.RUNS["float32"]  # the committed run the BiLD settings come from


def settings(root: Path = REPO_ROOT) -> dict[str, dict]:
    """bild keyword arguments of the lossless row and of the best row within 0.5 BLEU of the
    committed float32 bench run, and of Algorithm 1 at the best row's α (no end check)."""
    every = pd.read_csv(root / PEERS / "peers_all.csv").set_index("label", drop=False)
    t = targets.targets(every)
    out = {}
    for name, label in (("lossless", t["lossless_vs_assisted"]["row"]), ("best", t["speedup"]["row"])):
        r = every.loc[label]
        kw, rule = {"fallback": float(r["fallback"]), "rollback": float(r["rollback"])}, targets.end_rule(r)
        if rule == "exact":
            kw["distance"] = "exact"
        elif rule.startswith("verify_end_below"):
            kw["verify_end_below"] = float(r["verify_end_below"])
        elif rule == "verify_end":
            kw["verify_end"] = True
        out[name] = kw
    out["algorithm1"] = {k: out["best"][k] for k in ("fallback", "rollback")}
    return out


def decoders(small, large, s: dict) -> dict:
    """name -> (batched?, function of a chunk of sources -> (outputs, BatchTrace or None))."""
    one = lambda f: (lambda xs: ([f(x)[0] for x in xs], None))  # noqa: E731
    return {
        "vanilla large": (True, lambda xs: vanilla_batch(large, xs)),
        "BiLD lossless": (True, lambda xs: bild_batch(small, large, xs, **s["lossless"])),
        "BiLD best": (True, lambda xs: bild_batch(small, large, xs, **s["best"])),
        "BiLD best, eager": (True, lambda xs: bild_batch(small, large, xs, schedule="eager", **s["best"])),
        "speculative": (True, lambda xs: speculative_batch(small, large, xs, window=4)),
        "vanilla large, per sentence": (False, one(lambda x: D.vanilla(large, x))),
        "BiLD best, per sentence": (False, one(lambda x: D.bild(small, large, x, **s["best"]))),
    }


# what each decoder's output must equal: its batch-1 decoder (lossless and speculative: large greedy)
V1 = "vanilla large, per sentence"
REFERENCE = {"vanilla large": V1, "BiLD lossless": V1, "speculative": V1}
REFERENCE["BiLD best"] = REFERENCE["BiLD best, eager"] = "BiLD best, per sentence"


def measure(small, large, srcs: list, refs: list[str], B: int, s: dict) -> list[dict]:
    """One batch size: every decoder on every chunk, interleaved; a row per decoder."""
    dec = decoders(small, large, s)
    chunks = [srcs[i : i + B] for i in range(0, len(srcs), B)]
    for _, f in dec.values():  # warm-up: allocator, the batch models' buffers at this size
        f(chunks[0])
    names = list(dec)
    t = {k: [] for k in names}
    outs = {k: [] for k in names}
    calls = {k: [] for k in names}
    for c, xs in enumerate(chunks):
        for k in names[c % len(names) :] + names[: c % len(names)]:  # rotate who runs first
            t0 = time.perf_counter()
            o, bt = dec[k][1](xs)
            t[k].append(time.perf_counter() - t0)
            outs[k] += o
            calls[k].append(bt.counters() if bt is not None else {})
    W = intervals.draws(len(chunks))  # (b, chunks): one set of resamples for every decoder
    base = np.array(t["vanilla large"])
    rows = []
    for k in names:
        tk, n = np.array(t[k]), len(srcs)
        cs = pd.DataFrame(calls[k]).sum() if dec[k][0] else pd.Series(dtype=float)
        lo, hi = intervals._tails((W @ base) / (W @ tk))
        hyps, ref = [small.decode(o) for o in outs[k]], outs[REFERENCE.get(k, k)]
        sc = metrics.bleu(hyps, refs)
        r = {"batch": B, "decoder": k, "batched": dec[k][0], "n": n, "seconds": tk.sum(),
             "sentences_per_s": n / tk.sum(), "speedup": base.sum() / tk.sum(), "speedup_lo": lo,
             "speedup_hi": hi, "bleu": sc.value,
             "equal": sum(a == b for a, b in zip(outs[k], ref, strict=True))}  # fmt: skip
        if dec[k][0]:
            sm, lg = cs["small_calls"], cs["large_calls"]
            r |= {"small_calls_per_sentence": sm / n, "large_calls_per_sentence": lg / n,
                  "small_ms_per_call": 1e3 * cs["small_s"] / max(sm, 1),
                  "large_ms_per_call": 1e3 * cs["large_s"] / max(lg, 1),
                  "rows_per_small_call": cs["small_call_rows"] / max(sm, 1),
                  "rows_per_large_call": cs["large_call_rows"] / max(lg, 1),
                  "padded_large_tokens_per_sentence": cs["large_padded_tokens"] / n,
                  "encode_ms_per_sentence": 1e3 * cs["start_s"] / n,
                  "other_ms_per_sentence": 1e3 * (tk.sum() - cs[["start_s", "small_s", "large_s"]].sum()) / n,
                  }  # fmt: skip
        rows.append(r | {"signature": sc.signature})
    return rows


def check(small, large, srcs: list, s: dict, B: int = 8) -> dict:
    """Every row of every chunk of B against the batch-1 decoder, for lossless BiLD, Algorithm 1
    and the best row's settings, vanilla large and greedy speculative decoding."""
    out = {}
    cases = {f"bild {k}": (lambda xs, kw=kw: bild_batch(small, large, xs, **kw)[0],
                           lambda x, kw=kw: D.bild(small, large, x, **kw)[0])
             for k, kw in s.items()}  # fmt: skip
    cases["vanilla large"] = (lambda xs: vanilla_batch(large, xs)[0], lambda x: D.vanilla(large, x)[0])
    cases["speculative"] = (lambda xs: speculative_batch(small, large, xs, window=4)[0],
                            lambda x: D.speculative_sampling(small, large, x, window=4)[0])  # fmt: skip
    for name, (batch, one) in cases.items():
        got = sum((batch(srcs[i : i + B]) for i in range(0, len(srcs), B)), [])
        differ = [i for i, (g, x) in enumerate(zip(got, srcs, strict=True)) if g != one(x)]
        out[name] = {"settings": s.get(name.removeprefix("bild "), {}), "rows": len(srcs), "differ": differ}
        print(f"{name}: {len(srcs) - len(differ)} of {len(srcs)} rows equal", file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.bench.batchbench",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, help="val sentences (default: 512 timed; all of val for --check)")
    ap.add_argument("--batches", default="1,2,4,8,16,32", help="batch sizes, comma-separated")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check", action="store_true", help="all of val at batch 8 against batch 1 (fp32)")
    ap.add_argument("--out", default=TRIAL, help=f"output folder, relative paths from the repository root "
                    f"(default {TRIAL}; make bench-batch: {OUT})")
    a = ap.parse_args(argv)
    try:
        batches = [int(b) for b in a.batches.split(",")]
    except ValueError:
        ap.error(f"--batches must be integers separated by commas, got {a.batches!r}")
    if a.n is not None and a.n < 1 or any(b < 1 for b in batches):
        ap.error("--n and every --batches entry must be >= 1")
    if (REPO_ROOT / a.out).resolve() == (REPO_ROOT / OUT).resolve():
        keys = ("n", "batches", "dtype", "threads")
        changed = [f"--{k}" for k in keys if getattr(a, k) != ap.get_default(k)]
        if changed:
            ap.error(f"--out {OUT} holds the committed run, made with the default parameters; with "
                     f"{', '.join(changed)} write elsewhere (the default, {TRIAL})")  # fmt: skip
    torch.set_num_threads(a.threads)
    dtype = "float32" if a.check else a.dtype
    small, large = load_pair(CK / "multi30k-small-aligned", CK / "multi30k-large", dtype=dtype)
    split = data.load("multi30k", "val", a.n if a.n or a.check else 512)
    srcs = [small.encode(x) for x in split.sources]
    s, out = settings(), REPO_ROOT / a.out
    cmd = "python -m bildlib.bench.batchbench " + " ".join(sys.argv[1:] if argv is None else argv)
    run = {"machine": machine() | {"device": device_name(torch.device("cpu"))}, "dtype": dtype,
           "threads": a.threads, "settings": s, "command": cmd.strip()} | notebook.run_state()  # fmt: skip
    if a.check:
        _write(out / "exact.json", run | {"batch": 8, "cases": check(small, large, srcs, s)})
        return 0
    rows = []
    for B in batches:
        what = json.dumps([run["settings"], dtype, a.threads, len(srcs), B])  # what a part depends on
        tag = hashlib.sha256(what.encode()).hexdigest()[:10]
        part = out / ".partial" / f"b{B}-{tag}.json"
        if part.is_file():
            rows += json.loads(part.read_text())
            continue
        print(f"batch {B} ...", file=sys.stderr)
        got = measure(small, large, srcs, list(split.references), B, s)
        _write(part, got)
        rows += got
    df = pd.DataFrame(rows)
    _write(out / "throughput.json", run | {"n": len(srcs), "signature": df["signature"].iloc[0]})
    with data.atomic_path(out / "throughput.csv") as tmp:
        df.drop(columns="signature").to_csv(tmp, index=False, float_format="%.4g")
    for B in batches:  # the whole run is written: its parts are not needed to resume any more
        for part in (out / ".partial").glob(f"b{B}-*.json"):
            part.unlink()
    return 0


def _write(path: Path, obj) -> None:
    with data.atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=1, default=float) + "\n")


if __name__ == "__main__":
    sys.exit(main())
