"""Per-call latency of the engines on one pair: a one-token step and a k-token call of each
model, HF's forward against the lean engine (and native, on a CPU) on the same weights,
interleaved in blocks (medians; CUDA synchronised), with the weights a step reads and, on a CPU,
the step in units of the time to read them at this machine's measured rate. README's engine
table comes from this.

    python -m bildlib.bench.callbench --threads 2 --dtype float32
    python -m bildlib.bench.callbench --compile     # also the lean forward under torch.compile
    python -m bildlib.bench.callbench --anatomy     # where a lean step's time goes; calls as BiLD makes them
    python -m bildlib.bench.callbench --rows attention --out figures/engines/calls.csv
        # also the lean engine with those op families one row at a time (models.wholecall's switch)
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pandas as pd
import torch

from bildlib import data
from bildlib.experiments.calls import prefix, timed
from bildlib.models import LM, cpuinfo, load_model
from bildlib.models.engine import runs_native
from bildlib.notebook import machine

PAIR = ("data/checkpoints/multi30k-small-aligned", "data/checkpoints/multi30k-large")


def bench(
    paths=PAIR,
    device="cpu",
    dtype="default",
    k: int = 10,
    rounds: int = 20,
    block: int = 10,
    compile: bool = False,
    one_row: tuple[str, ...] = (),
) -> pd.DataFrame:
    """One row per (model, engine): median ms of a one-token step and of a k-token call, and the
    k-token call in steps of the same engine. The engines alternate in blocks of `block` calls
    of each kind, `rounds` times: drift hits both alike, and each call runs as BiLD runs a model,
    after calls of the same model (one call at a time between the engines would time every call
    with the other engine's data in the CPU caches: 1.0 ms instead of 0.43 for the small step).
    compile: a third engine, "lean+compile": the lean forward under torch.compile(dynamic=True),
    compiled before timing (the row's compile_s).
    one_row: a further engine, "lean, rows: <one_row>": the lean engine with those op families run one
    row at a time (models.wholecall's switch; e.g. "attention", the self-attention path the engine
    took on bf16 before lean_common.attend_prefix), against the engine as the check settled it."""
    src_text = data.load("multi30k", "val", 1).sources[0]
    rows = []
    for path in paths:
        model, tok = load_model(path, device, dtype)
        native = runs_native(model.config, model.dtype, model.device)
        engines = ("hf", "lean", "native") if native else ("hf", "lean")
        engines = ("native",) if getattr(model, "bild_int8", False) else engines  # int8: native alone
        lms = {e: LM(model, tok, path, e) for e in engines}
        if compile:
            lms["lean+compile"] = LM(model, tok, path, "lean")
            lms["lean+compile"].impl.forward = torch.compile(lms["lean+compile"].impl.forward, dynamic=True)
        if one_row:
            e = "lean, rows: " + "+".join(one_row)
            lms[e] = LM(model, tok, path, "lean")
            lms[e].impl.set_rows(tuple(lms[e].impl.rows | set(one_row)))
        compile_s = {}
        for e, lm in lms.items():
            t0 = time.perf_counter()
            prefix(lm, tok(src_text)["input_ids"])
            timed(lm, [7], 9), timed(lm, [7] * k, 9)  # compiles every shape it will meet
            compile_s[e] = time.perf_counter() - t0
        times = {(e, c): [] for e in lms for c in ("1", "k")}
        for _ in range(rounds):
            for e, lm in lms.items():  # interleaved in blocks: drift hits both engines alike
                times[e, "1"] += [timed(lm, [7], 9) for _ in range(block)]
                times[e, "k"] += [timed(lm, [7] * k, 9) for _ in range(block)]
        for e in lms:
            one, many = (1e3 * statistics.median(times[e, c]) for c in ("1", "k"))
            name = path.rsplit("/", 1)[-1]
            rows.append({"model": name, "engine": e, "dtype": lms[e].precision,
                         "step_ms": one, f"call{k}_ms": many, f"call{k}_in_steps": many / one,
                         "first_calls_s": compile_s[e], "weights_MB": step_bytes(lms[e]) / 1e6})  # fmt: skip
    df = pd.DataFrame(rows)
    if device == "cpu":  # the step against the time to read its weights at this machine's rate
        df["read_GBps"] = read_rate()
        df["step_in_reads"] = df["step_ms"] / (df["weights_MB"] / df["read_GBps"])
    return df


def read_rate(mb: int = 256, rounds: int = 20) -> float:
    """GB/s at which this process's threads read memory: the median of `rounds` sums over a
    fresh `mb` MB bf16 buffer (larger than a CPU's last-level cache, as a decode's weights,
    with the other model's and the activations', mostly are not: an upper bound on the cost)."""
    buf = torch.ones(mb * 2**19, dtype=torch.bfloat16)
    buf.sum()
    ts = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        buf.sum()
        ts.append(time.perf_counter() - t0)
    return mb * 2**20 / statistics.median(ts) / 1e9


def step_bytes(lm: LM) -> int:
    """Bytes of weights one decoder step reads: the decoder's linears but the cross-attention
    keys and values (computed once per source), and the head. The lean T5 reads the
    cross-attention's folded matrices (models.lean_t5) instead of its query and output weights.
    In int8 (dtype "int8") a weight is read as its codes, a byte each (and a float per output)."""
    m = lm.model
    dec = m.get_decoder() if lm.is_encoder_decoder else m
    folded = getattr(lm.impl, "folded_cross", False)
    cross = tuple(f"EncDecAttention.{w}" for w in ("kvqo" if folded else "kv"))
    skip = {id(x.weight) for name, x in dec.named_modules() if name.endswith(cross)}
    seen, int8 = set(), lm.precision == "int8"
    folds = [t for ab in lm.impl.cross for t in ab if t is not None] if folded else []  # A, B, mask
    n = sum(t.numel() * t.element_size() for t in folds)
    for x in [*dec.modules(), m.get_output_embeddings()]:
        w = getattr(x, "weight", None)
        if isinstance(x, torch.nn.Linear) and id(w) not in skip | seen:
            seen.add(id(w))
            n += w.numel() + 4 * w.shape[0] if int8 else w.numel() * w.element_size()
    return n


MATMUL = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "mkldnn::_linear_pointwise",
          "bild::gemm", "bild::gemm8")  # the native engine's products (kernels/cpu_gemm.h, cpu_gemm8.h)


def anatomy(lm: LM, src: list[int], steps: int = 200) -> dict:
    """Where a one-token step after a 9-token prefix goes: its median time (no profiler), the
    share of the profiled time in matrix products (torch.profiler's self times; attention's
    bmm included), the weights it reads and the rate it reads them at within the products."""
    from torch.profiler import ProfilerActivity, profile

    prefix(lm, src)
    ts = sorted(timed(lm, [7], 9) for _ in range(steps))
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(steps // 2):
            timed(lm, [7], 9)
    ev = p.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    mm = sum(e.self_cpu_time_total for e in ev if e.key in MATMUL)
    step, share, b = 1e3 * ts[len(ts) // 2], mm / total, step_bytes(lm)
    ops = sum(e.count for e in ev) / (steps // 2)
    return {"step_ms": step, "matmul_pct": 100 * share, "weights_MB": b / 1e6,
            "matmul_GBps": b / (step * share * 1e-3) / 1e9, "other_ms": step * (1 - share),
            "ops_per_step": ops}  # fmt: skip


def situ(small: LM, large: LM, src: list[int], k: int = 10, draft: int = 5, rounds: int = 100) -> dict:
    """Calls as BiLD makes them: `draft` small steps, then one large call of k tokens, `rounds`
    times; medians of each against the same calls in blocks of one model (as bench times them)."""
    for lm in (small, large):
        prefix(lm, src)
    alone_s = [timed(small, [7], 9) for _ in range(rounds)]
    alone_l = [timed(large, [7] * k, 9) for _ in range(rounds)]
    mixed_s, mixed_l = [], []
    for _ in range(rounds):
        mixed_s += [timed(small, [7], 9) for _ in range(draft)]
        mixed_l.append(timed(large, [7] * k, 9))
    med = lambda x: 1e3 * statistics.median(x)  # noqa: E731
    return {"small_step_alone_ms": med(alone_s), "small_step_in_bild_ms": med(mixed_s),
            f"large_call{k}_alone_ms": med(alone_l), f"large_call{k}_in_bild_ms": med(mixed_l)}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="default")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--compile", action="store_true", help="also time the lean forward under torch.compile")
    ap.add_argument("--rows", nargs="+", default=(), metavar="OP",
                    help="also time the lean engine with these op families one row at a time (its OPS)")
    ap.add_argument("--out", type=Path, help="also write the table here (CSV, its machine in a column)")
    what = "instead: where a lean step's time goes, and calls as BiLD alternates them"
    ap.add_argument("--anatomy", action="store_true", help=what)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with torch.inference_mode():
        if a.anatomy:
            src_text = data.load("multi30k", "val", 1).sources[0]
            lms = [LM.from_pretrained(p, a.device, a.dtype) for p in PAIR]
            src = lms[0].encode(src_text)
            rows = [{"model": p.rsplit("/", 1)[-1], "dtype": lm.precision}
                    | anatomy(lm, src) for p, lm in zip(PAIR, lms, strict=True)]  # fmt: skip
            print(pd.DataFrame(rows).round(3).to_string(index=False))
            print(pd.Series(situ(*lms, src, a.k)).round(3).to_string())
            return
        df = bench(device=a.device, dtype=a.dtype, k=a.k, rounds=a.rounds, compile=a.compile,
                   one_row=tuple(a.rows))
    df["threads"], df["machine"] = a.threads, f"{cpuinfo.cpu_name()} ({cpuinfo.isa()}), {machine()}"
    print(df.round(3).to_string(index=False))
    if a.out:
        with data.atomic_path(a.out) as tmp:
            df.round(4).to_csv(tmp, index=False)


if __name__ == "__main__":
    main()
