"""Time the non-uniform (SqueezeLLM) matrix-vector kernel against torch's bf16 product on a CUDA GPU.

python -m bildlib.kernels.lut_bench --csv lut.csv

Per shape (out, in) and k rows of x: torch.mm on the bf16 weight (what the lean engine runs), the
Triton LUT kernel on 4-bit and 3-bit nibble codes (triton_lut), with and without a 0.45 % sparse
part; medians of CUDA-event times, warm-up excluded, and the bytes each reads as GB/s. Shapes: the
shipped large model's feed-forward (1024 x 384), and LLaMA-7B's (4096 x 4096, 11008 x 4096).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import torch

from .bench import time_us
from .reference import pack_nibbles
from .triton_lut import lut_matvec

SHAPES = [(1024, 384), (4096, 4096), (11008, 4096)]


def rows(shape: tuple[int, int], k: int, repeats: int) -> list[dict]:
    out, n = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(k, n, device="cuda", generator=g, dtype=torch.bfloat16)
    w = torch.randn(out, n, device="cuda", generator=g, dtype=torch.bfloat16)
    res = [{"kernel": "torch bf16 mm", "bits": 16, "sparse": 0.0, "bytes": 2 * out * n,
            "us": time_us(lambda: x @ w.t(), 10, repeats)}]  # fmt: skip
    for bits in (4, 3):
        codes = torch.randint(0, 2**bits, (out, n), device="cuda", generator=g, dtype=torch.uint8)
        packed, table = pack_nibbles(codes), torch.randn(out, 2**bits, device="cuda", generator=g)
        for share in (0.0, 0.0045):
            nnz = int(share * out * n)
            flat = torch.randperm(out * n, device="cuda", generator=g)[:nnz]
            idx, val = torch.stack([flat // n, flat % n]), torch.randn(nnz, device="cuda", generator=g)
            b = packed.numel() + 4 * table.numel() + 12 * nnz
            us = time_us(lambda: lut_matvec(x, packed, table, n, idx, val), 10, repeats)  # noqa: B023
            res.append({"kernel": "triton LUT", "bits": bits, "sparse": share, "bytes": b, "us": us})
    for r in res:
        r |= {"out": out, "in": n, "k": k, "gbps": r["bytes"] / r["us"] / 1e3}
        r["vs_bf16"] = res[0]["us"] / r["us"]
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    ap.add_argument("--repeats", type=int, default=200)
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("lut_bench times CUDA kernels: no CUDA device here")
    out = [r for s in SHAPES for k in (1, 4) for r in rows(s, k, a.repeats)]
    cols = ["out", "in", "k", "kernel", "bits", "sparse", "bytes", "us", "gbps", "vs_bf16"]
    for r in out:
        print("  ".join(f"{r[c]:.3g}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    if a.csv:
        from bildlib.data import atomic_path

        with atomic_path(Path(a.csv)) as tmp, open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows({c: r[c] for c in cols} for r in out)


if __name__ == "__main__":
    main()
