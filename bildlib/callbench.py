"""Per-call latency of the two engines on one pair: a one-token step and a k-token call of each
model, HF's forward against the lean engine on the same weights, interleaved in blocks (medians;
CUDA synchronised). README's engine table comes from this.

    python -m bildlib.callbench --threads 2 --dtype float32
    python -m bildlib.callbench --compile     # also the lean forward under torch.compile
"""

from __future__ import annotations

import argparse
import statistics
import time

import pandas as pd
import torch

from bildlib import data
from bildlib.models import LM, load_model

PAIR = ("data/checkpoints/multi30k-small-aligned", "data/checkpoints/multi30k-large")


def _time(lm: LM, tokens: list[int], n: int) -> float:
    """Seconds of one forward of `tokens` after a prefix of n decoder tokens."""
    lm.crop(n)
    t0 = time.perf_counter()
    lm.forward(tokens)
    if lm.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def bench(
    paths=PAIR,
    device="cpu",
    dtype="default",
    k: int = 10,
    rounds: int = 20,
    block: int = 10,
    compile: bool = False,
) -> pd.DataFrame:
    """One row per (model, engine): median ms of a one-token step and of a k-token call, and the
    k-token call in steps of the same engine. The engines alternate in blocks of `block` calls
    of each kind, `rounds` times: drift hits both alike, and each call runs as BiLD runs a model,
    after calls of the same model (one call at a time between the engines would time every call
    with the other engine's data in the CPU caches: 1.0 ms instead of 0.43 for the small step).
    compile: a third engine, "lean+compile": the lean forward under torch.compile(dynamic=True),
    compiled before timing (the row's compile_s)."""
    src_text = data.load("multi30k", "val", 1).sources[0]
    rows = []
    for path in paths:
        model, tok = load_model(path, device, dtype)
        lms = {e: LM(model, tok, path, e) for e in ("hf", "lean")}
        if compile:
            lms["lean+compile"] = LM(model, tok, path, "lean")
            lms["lean+compile"].impl.forward = torch.compile(lms["lean+compile"].impl.forward, dynamic=True)
        compile_s = {}
        for e, lm in lms.items():
            t0 = time.perf_counter()
            lm.start(tok(src_text)["input_ids"])
            lm.forward([0] + [5] * 8)  # a 9-token prefix, as mid-sentence
            _time(lm, [7], 9), _time(lm, [7] * k, 9)  # compiles every shape it will meet
            compile_s[e] = time.perf_counter() - t0
        times = {(e, c): [] for e in lms for c in ("1", "k")}
        for _ in range(rounds):
            for e, lm in lms.items():  # interleaved in blocks: drift hits both engines alike
                times[e, "1"] += [_time(lm, [7], 9) for _ in range(block)]
                times[e, "k"] += [_time(lm, [7] * k, 9) for _ in range(block)]
        for e in lms:
            one, many = (1e3 * statistics.median(times[e, c]) for c in ("1", "k"))
            name = path.rsplit("/", 1)[-1]
            rows.append({"model": name, "engine": e, "dtype": str(model.dtype).removeprefix("torch."),
                         "step_ms": one, f"call{k}_ms": many, f"call{k}_in_steps": many / one,
                         "first_calls_s": compile_s[e]})  # fmt: skip
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="default")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also time the lean forward under torch.compile")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with torch.inference_mode():
        df = bench(device=a.device, dtype=a.dtype, k=a.k, rounds=a.rounds, compile=a.compile)
    print(df.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
