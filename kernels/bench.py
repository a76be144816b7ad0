"""Torch eager vs Triton for the policy kernels, on a CUDA GPU.

python -m bildlib.kernels.bench                      # markdown table on stdout
python -m bildlib.kernels.bench --csv bench.csv --repeats 500

Each cell is the median over `repeats` timed calls after `warmup` untimed ones, timed with
CUDA events around each call. GB/s counts the logits bytes the operation must read once;
the fraction of peak uses the GPU's HBM bandwidth from PEAK_GBPS (or --peak-gbps).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys

import torch

from . import reference as R

PEAK_GBPS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 PCIe": 2000.0, "H100": 3350.0, "A100": 2039.0}


def peak_gbps(name: str) -> float | None:
    for key, v in PEAK_GBPS.items():  # most specific names first
        if key in name:
            return v
    return None


def time_us(fn, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3)
    return statistics.median(times)


def cases(V: int, k: int, dtype: torch.dtype, dev: str):
    """(name, bytes read, torch eager fn, triton fn) for each kernel at this shape."""
    from . import triton_policy as T

    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.randn(k, V, device=dev, generator=g).to(dtype)
    xl = torch.randn(k + 1, V, device=dev, generator=g).to(dtype)
    tok = torch.randint(0, V, (k,), device=dev, generator=g)
    u = torch.rand(k + 1, device=dev, generator=g)
    b = x.element_size()
    return [
        ("max_prob", k * V * b, lambda: R.max_prob_ref(x), lambda: T.max_prob(x)),
        (
            "rollback_distance",
            k * V * b,
            lambda: R.rollback_distance_ref(x, tok),
            lambda: T.rollback_distance(x, tok),
        ),
        ("sample", k * V * b, lambda: R.sample_ref(x, u[:k]), lambda: T.sample(x, u[:k])),
        (
            "speculative_accept",
            (2 * k + 1) * V * b,
            lambda: R.speculative_accept_ref(xl, x, tok, u),
            lambda: T.speculative_accept(xl, x, tok, u),
        ),
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, nargs="+", default=[32128, 250112])
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 4, 10, 16])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--peak-gbps", type=float, help="HBM bandwidth of this GPU (default: by name)")
    ap.add_argument("--csv", help="also write the rows to this CSV file")
    a = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bildlib.kernels.bench needs a CUDA GPU (the kernels' CPU tests are in tests/)")
    from . import HAS_TRITON

    if not HAS_TRITON:
        sys.exit("Triton is not installed: pip install -e '.[cuda]'")
    name = torch.cuda.get_device_name()
    peak = a.peak_gbps or peak_gbps(name)
    rows = []
    for dt in a.dtypes:
        dtype = getattr(torch, dt)
        for V in a.vocab:
            for k in a.rows:
                for op, nbytes, eager, fused in cases(V, k, dtype, "cuda"):
                    te, tt = time_us(eager, a.warmup, a.repeats), time_us(fused, a.warmup, a.repeats)
                    gbps = nbytes / tt / 1e3
                    pct = round(100 * gbps / peak, 1) if peak else None
                    rows.append(
                        {"op": op, "dtype": dt, "V": V, "k": k, "torch_us": round(te, 1)}
                        | {"triton_us": round(tt, 1), "speedup": round(te / tt, 2)}
                        | {"triton_GBps": round(gbps), "pct_peak": pct}
                    )
    print(f"{name}, torch {torch.__version__}, peak {peak} GB/s; medians of {a.repeats} calls, CUDA events\n")
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(str(r[c]) for c in cols) + " |")
    if a.csv:
        from pathlib import Path

        from bildlib.data import atomic_path

        with atomic_path(Path(a.csv)) as tmp, open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=cols)
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
