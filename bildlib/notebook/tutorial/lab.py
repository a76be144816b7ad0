"""What the tutorial notebook runs besides the exercises: the pair and its sentences, one decode
recorded for the picture, per-call costs, and interleaved timings (warm-up excluded) for the
predicted-against-measured speedup and the α_FB sweep."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import pandas as pd
import torch

from bildlib import data
from bildlib import decoding as D
from bildlib.decoding.common import check_count, check_threshold
from bildlib.experiments import presets
from bildlib.experiments.calls import prefix, timed
from bildlib.models import load_pair
from bildlib.notebook.tutorial.record import Recorded, story


@dataclass
class Lab:
    """The pair (small: the aligned model), and the first n sentences of a split."""

    small: object
    large: object
    sources: list[list[int]]  # token ids
    texts: list[str]
    references: list[str]
    max_new_tokens: int

    def text(self, ids: list[int]) -> str:
        return self.small.decode(ids)

    def piece(self, token: int) -> str:
        """One token's text for a picture (sentencepiece's word mark dropped; a bare mark: ␣)."""
        return self.small.tok.convert_ids_to_tokens(int(token)).replace("▁", "") or "␣"

    def run_info(self) -> dict:
        """What the notebook ran on, for its checks file."""
        from bildlib.analysis.evaluate import device_name

        return {"device": device_name(self.small.device), "threads": torch.get_num_threads(),
                "dtype": str(self.small.model.dtype).removeprefix("torch.")}  # fmt: skip


def check_settings(n_examples: int, n_sweep: int, fallback: float, rollback: float, alphas: list,
                   sentence: int, threads: int, rounds: int = 30) -> None:  # fmt: skip
    """The notebook's numbers, checked before anything loads; errors name the parameter."""
    counts = {"n_examples": n_examples, "n_sweep": n_sweep, "threads": threads, "rounds": rounds}
    for name, v in counts.items():
        check_count(name, v)
    check_count("sentence", sentence, minimum=-1)
    if sentence >= max(n_examples, n_sweep):
        n = max(n_examples, n_sweep)
        raise ValueError(f"sentence must be < max(n_examples, n_sweep) = {n}, got {sentence}")
    check_threshold("fallback", fallback, 0, 1)
    check_threshold("rollback", rollback, 0)
    if not alphas:
        raise ValueError("alphas must hold at least one α_FB")
    for a in alphas:
        check_threshold("alphas", a, 0, 1)


def open_lab(preset: str, split: str, n: int, device: str = "cpu", dtype: str = "float32",
             threads: int = 2) -> Lab:  # fmt: skip
    """The preset's aligned small and large models, and the first n sentences of split. The lab
    runs the lean engine, as its checks say: engine "native" would build its C++ on first use,
    and a graded kernel's sandbox has neither the built library nor the time to build it."""
    p = presets.get(preset)
    torch.set_num_threads(threads)
    small, large = load_pair(p.model("aligned"), p.model("large"), device, dtype, "lean")
    ex = data.load(p.dataset, split, n)
    srcs = [small.encode(p.prompt(s)) for s in ex.sources]
    return Lab(small, large, srcs, ex.sources, ex.references, min(p.max_new_tokens, 64))


def recorded(lab: Lab, src: list[int], fb: float, rb: float):
    """decoding.bild on one source with both models recorded: (ids, Trace, record.Story)."""
    log: list = []
    s, lg = Recorded(lab.small, "S", log), Recorded(lab.large, "L", log)
    ids, tr = D.bild(s, lg, src, fb, rb, max_new_tokens=lab.max_new_tokens)
    return ids, tr, story(log, ids)


def pick_sentence(lab: Lab, fb: float, rb: float, longest: int = 18) -> int:
    """The first sentence whose BiLD decode has a fallback and a rollback and at most `longest`
    tokens (a picture that fits on a page); else the first."""
    for i, x in enumerate(lab.sources):
        ids, tr = D.bild(lab.small, lab.large, x, fb, rb, max_new_tokens=lab.max_new_tokens)
        if tr.fallbacks and tr.rollbacks and len(ids) <= longest:
            return i
    return 0


def call_costs(lab: Lab, ks=range(1, 12), rounds: int = 30):
    """(small step in s, large_call(k) in s): medians of one-token small calls and of large calls
    over k tokens after a 9-token prefix, as BiLD makes them (models.callbench's method)."""
    src = lab.sources[0]
    for m in (lab.small, lab.large):
        prefix(m, src)
        timed(m, [7], 9)  # warm-up
    step = statistics.median(timed(lab.small, [7], 9) for _ in range(rounds))
    cost = {k: statistics.median(timed(lab.large, [7] * k, 9) for _ in range(rounds)) for k in ks}
    top = max(cost)

    def large_call(k: int) -> float:
        return cost[k] if k in cost else cost[top] * k / top  # past the table: linear

    return step, large_call


def interleaved(decoders: dict, sources: list[list[int]], warmup: int = 2) -> dict:
    """Each decoder (name -> fn(src) -> (ids, Trace)) on every source, one source at a time and
    the decoders in turn, so that drift hits all alike; the first `warmup` sources run untimed
    first. Returns name -> list of (ids, Trace, seconds)."""
    for x in sources[:warmup]:
        for f in decoders.values():
            f(x)
    out: dict = {k: [] for k in decoders}
    for x in sources:
        for k, f in decoders.items():
            t0 = time.perf_counter()
            ids, tr = f(x)
            out[k].append((ids, tr, time.perf_counter() - t0))
    return out


def stand_in_predict(trace, n_large: int, step: float, large_call) -> float:
    """The notebook's own cost model, used where a student's exercise 4 does not pass yet: vanilla
    large's n_large one-token calls over BiLD's small steps and large calls."""
    bild = trace.small_calls * step + sum(map(large_call, trace.large_call_tokens))
    return n_large * large_call(1) / bild


def stand_in_row(hyps: list[str], refs: list[str], traces: list, seconds: list[float]) -> dict:
    """The notebook's own sweep point, used where a student's exercise 5 does not pass yet."""
    import sacrebleu

    tokens = sum(len(t.source) for t in traces)
    return {"bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
            "fallback_pct": 100 * sum(t.fallbacks for t in traces) / tokens,
            "ms": 1e3 * sum(seconds) / len(seconds)}  # fmt: skip


def predicted_vs_measured(lab: Lab, fb: float, rb: float, predict, step: float, large_call,
                          n: int | None = None) -> pd.DataFrame:  # fmt: skip
    """Per sentence of the first n: the speedup predict(trace, n_large, step, large_call) gives
    (None: stand_in_predict) and the one measured (vanilla large over BiLD, interleaved)."""
    predict = predict or stand_in_predict
    runs = interleaved({
        "large": lambda x: D.vanilla(lab.large, x, max_new_tokens=lab.max_new_tokens),
        "bild": lambda x: D.bild(lab.small, lab.large, x, fb, rb, max_new_tokens=lab.max_new_tokens),
    }, lab.sources[:n])  # fmt: skip
    rows = []
    for i, ((ids_l, _, t_l), (_, tr, t_b)) in enumerate(zip(runs["large"], runs["bild"], strict=True)):
        guess = float(predict(tr, len(ids_l), step, large_call))
        rows.append({"sentence": i, "tokens": len(tr.source), "small_calls": tr.small_calls,
                     "large_calls": tr.large_calls, "predicted": guess,
                     "measured": t_l / t_b, "large_ms": 1e3 * t_l, "bild_ms": 1e3 * t_b})  # fmt: skip
    return pd.DataFrame(rows)


def sweep(lab: Lab, alphas: list[float], rb: float, row, n: int | None = None) -> tuple[pd.DataFrame, float]:
    """BiLD at each α_FB (α_RB = rb) and vanilla large on the first n sentences, interleaved.
    row(hyps, refs, traces, seconds) -> dict (exercise 5; None: stand_in_row) makes each point;
    norm_latency is its ms over vanilla large's. Returns (one row per α_FB, vanilla large's BLEU)."""
    row = row or stand_in_row
    srcs, refs = lab.sources[:n], lab.references[:n]
    mnt = lab.max_new_tokens
    decoders = {"large": lambda x: D.vanilla(lab.large, x, max_new_tokens=mnt)}
    for a in alphas:
        decoders[a] = lambda x, a=a: D.bild(lab.small, lab.large, x, a, rb, max_new_tokens=mnt)
    runs = interleaved(decoders, srcs)
    points = {}
    for k, r in runs.items():
        ids, traces, secs = zip(*r, strict=True)
        points[k] = dict(row([lab.text(i) for i in ids], refs, list(traces), list(secs)))
    base = points.pop("large")
    t = pd.DataFrame([{"alpha_fb": a, "alpha_rb": rb} | p for a, p in points.items()])
    t["norm_latency"] = t["ms"] / base["ms"]
    return t, base["bleu"]
