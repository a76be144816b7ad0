"""Where a decoded sentence's time goes, per decoder: the small model's calls, the large model's
calls, the two encoders, the policy (confidence, token choice, the rollback test) and the rest
(the decoding loop, the Trace, LM's bookkeeping), with the calls' counts.

    python -m bildlib.bench.anatomy --n 100 --threads 2 --dtype auto
        # figures/engines/anatomy-<dtype>.csv and its _checks.json; docs/engines-cpu.md's block

The decoders run on the same sentences, interleaved per sentence after a warm-up of `warmup`
sentences (not counted), in one process. The parts come from the Trace's own call timings (the
model calls, as a decode makes them), the encoders timed where the engine runs them (the first
call of each model on a source: LM.begin), and the policy's functions timed where bild() and
vanilla() call them; the rest is the sentence's wall time less those. Timing the policy's calls
adds about a microsecond each, counted in the policy.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import torch

from bildlib import REPO_ROOT, data, decoding
from bildlib.decoding.policy import Policy
from bildlib.models import load_pair

bild_module = importlib.import_module("bildlib.decoding.bild")  # the module (decoding.bild is the function)
PAIR = ("data/checkpoints/multi30k-small-aligned", "data/checkpoints/multi30k-large")
PARTS = ("small", "large", "encoders", "policy", "rest")
# (label, the call); BiLD at the lossless setting and at the settings README's table quotes
DECODERS = {
    "vanilla large": lambda s, lg, x, n: decoding.vanilla(lg, x, max_new_tokens=n),
    "vanilla small": lambda s, lg, x, n: decoding.vanilla(s, x, max_new_tokens=n),
    "BiLD lossless (α_FB 0.5, exact)": lambda s, lg, x, n: decoding.bild(s, lg, x, 0.5, 1.0, distance="exact",
                                                                         max_new_tokens=n),
    "BiLD α_FB 0.4, α_RB 1.0": lambda s, lg, x, n: decoding.bild(s, lg, x, 0.4, 1.0, max_new_tokens=n),
    "BiLD α_FB 0.6, α_RB 1.0": lambda s, lg, x, n: decoding.bild(s, lg, x, 0.6, 1.0, max_new_tokens=n),
}  # fmt: skip


class Clock:
    """Seconds and calls by part, for the sentence being decoded."""

    def __init__(self):
        self.s: dict[str, float] = defaultdict(float)
        self.n: dict[str, int] = defaultdict(int)

    def wrap(self, part: str, f):
        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.s[part] += time.perf_counter() - t0
                self.n[part] += 1

        return timed


@contextlib.contextmanager
def instrumented(models: dict, clock: Clock):
    """The encoders (each LM's begin, by model name) and the policy's functions timed into clock."""
    saved = []

    def patch(obj, name, part):
        saved.append((obj, name, obj.__dict__.get(name, getattr(obj, name)) if isinstance(obj, type) else
                      getattr(obj, name)))  # fmt: skip
        setattr(obj, name, clock.wrap(part, getattr(obj, name)))

    try:
        for who, lm in models.items():
            patch(lm, "begin", f"encoder {who}")
        for name in ("propose", "pick", "scaled"):
            patch(Policy, name, "policy")
        patch(bild_module, "first_rollback", "policy")
        yield
    finally:
        for obj, name, f in reversed(saved):
            if isinstance(obj, type) or obj is bild_module:
                setattr(obj, name, f)
            else:
                del obj.__dict__[name]  # the instance's wrapper: the class's method shows again


def one(f, small, large, x, n: int, clock: Clock) -> dict:
    """One sentence through decoder f: ms by part and the calls' counts."""
    clock.s.clear()
    clock.n.clear()
    t0 = time.perf_counter()
    _, tr = f(small, large, x, n)
    total = time.perf_counter() - t0
    enc_s, enc_l = clock.s["encoder small"], clock.s["encoder large"]
    parts = {"small": sum(tr.small_times) - enc_s, "large": sum(tr.large_times) - enc_l,
             "encoders": enc_s + enc_l, "policy": clock.s["policy"]}  # fmt: skip
    if f is DECODERS["vanilla large"]:  # vanilla's one model is the Trace's "S"
        parts["large"], parts["small"] = parts["small"] + enc_s - enc_l, 0.0
    parts["rest"] = total - sum(parts.values())
    calls = {"small_calls": tr.small_calls, "large_calls": tr.large_calls,
             "large_call_tokens": sum(tr.large_call_tokens)}  # fmt: skip
    if f is DECODERS["vanilla large"]:
        calls = {"small_calls": 0, "large_calls": tr.small_calls, "large_call_tokens": tr.small_calls}
    return {f"{k}_ms": 1e3 * v for k, v in parts.items()} | calls | {
        "ms": 1e3 * total, "policy_calls": clock.n["policy"]}  # fmt: skip


def run(n: int = 100, warmup: int = 5, dtype: str = "auto", threads: int = 2,
        split: str = "val") -> pd.DataFrame:  # fmt: skip
    """Per decoder: mean ms a sentence and by part, and calls per sentence, over n sentences."""
    torch.set_num_threads(threads)
    small, large = load_pair(REPO_ROOT / PAIR[0], REPO_ROOT / PAIR[1], "cpu", dtype)
    ex = data.load("multi30k", split, n + warmup)
    srcs = [small.tok(s)["input_ids"] for s in ex.sources]
    clock, rows = Clock(), []
    with instrumented({"small": small, "large": large}, clock), torch.inference_mode():
        for i, x in enumerate(srcs):
            for label, f in DECODERS.items():
                r = one(f, small, large, x, 128, clock)
                if i >= warmup:
                    rows.append({"decoder": label} | r)
    per = pd.DataFrame(rows).groupby("decoder", sort=False).mean().reset_index()
    per["small_call_us"] = 1e3 * per["small_ms"] / per["small_calls"].where(per["small_calls"] > 0)
    per["large_call_ms"] = per["large_ms"] / per["large_calls"]
    per["outside_pct"] = 100 * (per["policy_ms"] + per["rest_ms"]) / per["ms"]
    per["n"], per["dtype"] = n, large.precision
    per["engine"] = f"{small.engine}/{large.engine}"
    return per


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.bench.anatomy", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="sentences of Multi30k val timed (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO_ROOT / "figures" / "engines")
    a = ap.parse_args(argv)
    if a.n < 1 or a.warmup < 0 or a.threads < 1:
        ap.error("--n and --threads must be >= 1, --warmup >= 0")
    t = run(a.n, a.warmup, a.dtype, a.threads)
    from bildlib.notebook.checks import run_fields, save_checks

    dtype = t["dtype"].iloc[0]
    with data.atomic_path(a.out / f"anatomy-{dtype}.csv") as tmp:
        t.round(4).to_csv(tmp, index=False)
    checks = {"n": a.n, "warmup": a.warmup, "threads": a.threads, "split": "val"}
    save_checks(checks | run_fields(dtype, t["engine"].iloc[0]), f"anatomy-{dtype}", a.out)
    cols = ["decoder", "ms", *[f"{p}_ms" for p in PARTS], "small_call_us", "outside_pct"]
    print(t[cols].round(3).to_string())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
