"""One product of each of the large model's decoder matrices, as the lean engine runs it: the packed
bf16 product (models.linear.Packed) against torch's CPU int8 weight-only kernel
(models.linear.Int8), and torchao's int8 weight-only linear where torchao is installed. Shapes
from the shipped large's config, rows k as vanilla (1) and BiLD's multi-token calls (4, 10) make
them. The products alternate in blocks of `block` calls, `rounds` times, the first round untimed
(callbench's reason: each call after calls of the same product, as in a decode); medians per
call, and the int8 speedup as the median over rounds of each round's ratio.

    python -m bildlib.bench.int8bench --out figures/quantized    # make quantized-bench runs it
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import pandas as pd
import torch
from transformers import AutoConfig

from bildlib import REPO_ROOT, data, notebook
from bildlib.models.linear import Int8, linear
from bildlib.quant.build import BASE
from bildlib.quant.uniform import int8, int8_parts

ROUNDS, BLOCK = 11, 100  # rounds of blocks of calls per product, the first round untimed


def shapes(base: str = BASE) -> dict[str, tuple[int, int]]:
    """{matrix: (out, in)} of a T5 decoder layer and the head, from the checkpoint's config."""
    c = AutoConfig.from_pretrained(REPO_ROOT / base)
    inner = c.num_heads * c.d_kv
    return {"self-attention qkv": (3 * inner, c.d_model), "self-attention o": (c.d_model, inner),
            "feed-forward wi": (c.d_ff, c.d_model), "feed-forward wo": (c.d_model, c.d_ff),
            "head": (c.vocab_size, c.d_model)}  # fmt: skip


def torchao_linear(w: torch.Tensor):
    """torchao's int8 weight-only linear of w (bf16), or None without torchao."""
    try:
        from torchao.quantization import Int8WeightOnlyConfig, quantize_
    except ImportError:
        return None
    m = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
    m.weight.data.copy_(w)
    quantize_(m, Int8WeightOnlyConfig())
    return m


def products(out: int, n: int, seed: int = 0) -> dict:
    """{name: callable} for one (out, n) matrix: bf16 and int8 of the same int8-representable weights."""
    w = torch.randn(out, n, generator=torch.Generator().manual_seed(seed)) * 0.05
    codes, scale = int8_parts(int8(w))
    wb = (codes.float() * scale[:, None]).bfloat16()
    f = {"bf16": linear(wb), "int8": Int8(codes, scale)}
    if (ao := torchao_linear(wb)) is not None:
        f["torchao"] = ao
    return f


@torch.no_grad()
def bench(rows=(1, 4, 10), rounds: int = ROUNDS, block: int = BLOCK, threads: int = 2) -> pd.DataFrame:
    torch.set_num_threads(threads)
    out = []
    for name, (o, n) in shapes().items():
        f = products(o, n)
        for k in rows:
            x = torch.randn(k, n).bfloat16()
            us: dict[str, list[float]] = {p: [] for p in f}
            for r in range(rounds):
                for p, fn in f.items():
                    t0 = time.perf_counter()
                    for _ in range(block):
                        fn(x)
                    if r:  # the first round warms up
                        us[p].append((time.perf_counter() - t0) / block * 1e6)
            ratio = statistics.median(b / i for b, i in zip(us["bf16"], us["int8"], strict=True))
            out.append({"matrix": name, "out": o, "in": n, "rows": k,
                        **{f"{p}_us": statistics.median(v) for p, v in us.items()}, "int8_speedup": ratio})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/figures/quantized", help="folder for int8_products.csv")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    t = bench(threads=a.threads)
    out = Path(a.out) if Path(a.out).is_absolute() else REPO_ROOT / a.out
    out.mkdir(parents=True, exist_ok=True)
    with data.atomic_path(out / "int8_products.csv") as tmp:
        t.to_csv(tmp, index=False, float_format="%.4g")
    try:
        import torchao

        ao = torchao.__version__
    except ImportError:
        ao = "not installed"
    checks = {**notebook.run_fields("bfloat16", "lean"), "threads": a.threads, "torchao": ao,
              "rounds": ROUNDS, "block": BLOCK}  # fmt: skip
    notebook.save_checks(checks, "int8_products", out)  # with the commit, code state and machine
    print(t.to_string(index=False))


if __name__ == "__main__":
    main()
