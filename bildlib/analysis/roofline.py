"""A roofline projection of decoding time onto GPUs: a model, never a measurement.

Each call's predicted time is max(FLOPs / peak, bytes / bandwidth) plus its launch overhead,
summed over a decode's calls (bildlib.analysis.cost). The overhead of a call is an overhead per layer
times the layers it runs (+1 for the head; bildlib.analysis.cost.call's `layers`): a call launches a
fixed set of kernels per layer, and a framework runs Python per layer, so a one-layer small
model's call costs less of it than a 24-layer large model's. (On this project's CPU, Hugging
Face's forward costs 0.77 ms more than a minimal step for the 1-layer small model and 1.9 ms
more for the 6-layer large one: 0.27-0.39 ms per layer.) The peaks are the vendors' published
dense 16-bit tensor-core throughput and memory bandwidth; real kernels reach a fraction of
both, and small calls are dominated by the overhead, so the projection brackets the overhead
instead of guessing one.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class GPU:
    name: str
    tflops: float  # dense 16-bit tensor-core peak, 10^12 FLOP/s
    bandwidth: float  # memory bandwidth, 10^9 bytes/s
    source: str


GPUS = {
    "T4": GPU("T4", 65.0, 320.0,
              "NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/tesla-t4): "
              "65 TFLOPS mixed-precision FP16, 320 GB/s GDDR6"),
    "A100": GPU("A100", 312.0, 2039.0,
                "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100), 80GB SXM: "
                "312 TFLOPS BF16 (dense; 624 with sparsity), 2,039 GB/s HBM2e"),
    "H100": GPU("H100", 989.0, 3350.0,
                "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100), SXM: "
                "989 TFLOPS BF16 (dense; 1,979 with sparsity), 3.35 TB/s HBM3"),
}  # fmt: skip


def predict(costs: pd.DataFrame, gpu: GPU, layer_overhead_s: float) -> float:
    """Predicted seconds of all the calls in `costs` (bildlib.analysis.cost.costs rows) on `gpu`, each
    call paying layer_overhead_s per layer it runs."""
    compute = costs["flops"] / (gpu.tflops * 1e12)
    memory = costs["bytes"] / (gpu.bandwidth * 1e9)
    roof = pd.concat([compute, memory], axis=1).max(axis=1)
    return float((roof + costs["layers"] * layer_overhead_s).sum())


def projection(runs: dict[str, pd.DataFrame], baseline: str, overheads_us, gpus=GPUS) -> pd.DataFrame:
    """Predicted speedup of each run over `baseline` on each GPU and each overhead per layer
    (µs). runs: name -> cost rows of every call that run made (the same examples for all)."""
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {sorted(runs)}")
    rows = []
    for g in gpus.values():
        for us in overheads_us:
            t = {name: predict(c, g, us * 1e-6) for name, c in runs.items()}
            for name in runs:
                if name != baseline:
                    times = {"baseline_s": t[baseline], "run_s": t[name], "speedup": t[baseline] / t[name]}
                    rows.append({"gpu": g.name, "layer_overhead_us": us, "run": name} | times)
    return pd.DataFrame(rows)


# The paper's measured speedup drawn beside the projection. Only the abstract's figure could be
# checked offline: its best speedup over all tasks, on an NVIDIA T4 (NeurIPS 2023 abstract: "a
# speedup of up to 2.12x"); the CNN/DM row of its Table 1 is not quoted here.
PAPER = {
    "speedup": 2.12,
    "what": "the paper's best measured speedup over all its tasks (NVIDIA T4, its abstract), "
    "not a CNN/DM figure",
}
