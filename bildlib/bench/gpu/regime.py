"""The paper's regime on a device: one decoder step of each engine against the time it takes to read
the step's weights (regime.csv; docs/engines-gpu.md, *On a GPU*).

At batch 1 a decoder step reads every decoder weight and the head once; at the device's memory
bandwidth that read is the step's floor ("limit"). BiLD pays when a small model's step costs a
small fraction of the large one's, which holds near that floor and not when launches dominate.

For the shipped pair and for the paper's architectures at their real size (random weights drawn on
the device: a call's cost does not depend on them), bfloat16, batch 1, one step at position 20 over
a 32-token source, medians of CUDA-synchronised calls:

- `hf`: the model's own forward (models.engine.HF), cropped back after each call;
- `lean`: models.lean_t5, eager; `lean_graphed`: the same call captured once in a CUDA graph;
- `static_eager` / `static`: models.static_t5 without and with its CUDA graphs; `static_call10`: a
  10-token call of it (BiLD's verifying call at the default max_small_steps);
- `limit`: the bytes of the decoder's weights a step reads (cross-attention keys and values are
  per source) over the bandwidth of a device-to-device copy measured here;
- `static_exact`: whether each of 10 tokens has the same logits (bits) from one 10-token call as
  from ten one-token calls: the row invariance lossless BiLD needs.
"""

from __future__ import annotations

import statistics
import time

import pandas as pd
import torch

from bildlib.bench.gpu.lossless import sync

PAIR = {
    "multi30k-small-aligned": "data/checkpoints/multi30k-small-aligned",
    "multi30k-large": "data/checkpoints/multi30k-large",
}
PAPER = ("t5-small", "t5-large", "mt5-small", "mt5-large")
POS, SRC = 20, 32


def step_bytes(model) -> int:
    """Bytes of the weights one decoder step reads: the decoder's blocks but the cross-attention's
    key and value projections (applied once per source), its final norm, and the head."""
    n = 0
    for name, p in model.decoder.named_parameters():
        if "EncDecAttention.k." in name or "EncDecAttention.v." in name or "embed_tokens" in name:
            continue
        n += p.numel() * p.element_size()
    return n + model.lm_head.weight.numel() * model.lm_head.weight.element_size()


def bandwidth(device, mib: int = 1024) -> float:
    """Bytes per second of a device-to-device copy of `mib` MiB (read plus write), the best of 5."""
    x = torch.empty(mib << 20, dtype=torch.uint8, device=device)
    y = torch.empty_like(x)
    best = float("inf")
    for _ in range(6):
        sync(device)
        t = time.perf_counter()
        y.copy_(x)
        sync(device)
        best = min(best, time.perf_counter() - t)
    return 2 * x.numel() / best


def median_ms(fn, device, n: int = 30, warmup: int = 5) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(n):
        sync(device)
        t = time.perf_counter()
        fn()
        sync(device)
        ts.append(1e3 * (time.perf_counter() - t))
    return statistics.median(ts)


@torch.inference_mode()  # as models.lm.LM runs the engines
def measure(name: str, model, device, bw: float) -> dict:
    """regime.csv's row for one model (see the module's docstring); a failing engine is a note."""
    from bildlib.models.engine import HF
    from bildlib.models.lean_t5 import LeanT5
    from bildlib.models.static_t5 import StaticT5

    V, read = model.config.vocab_size, step_bytes(model)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, V, (1, SRC), generator=g).to(device)
    prefix = torch.randint(3, V, (POS,), generator=g).to(device)
    one = torch.randint(3, V, (1,), generator=g).to(device)
    ten = torch.randint(3, V, (10,), generator=g).to(device)
    row = {"model": name, "params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
           "read_MB": round(read / 1e6, 1), "limit_ms": round(1e3 * read / bw, 4)}  # fmt: skip
    notes = []

    def engine(key, make, fn):
        try:
            e = make()
            e.begin(src)
            e.forward(prefix[:10], 0)  # two calls: the static engine takes at most 16 tokens
            e.forward(prefix[10:], 10)
            row[key] = round(median_ms(lambda: fn(e), device), 4)
            return e
        except Exception as ex:  # noqa: BLE001 -- one engine failing must not hide the others
            notes.append(f"{key}: {type(ex).__name__}: {ex}"[:200])

    def hf_step(e):
        e.forward(one, POS)
        e.crop(1)

    engine("hf_ms", lambda: HF(model), hf_step)
    lean = engine("lean_ms", lambda: LeanT5(model), lambda e: e.forward(one, POS))
    if lean is not None and device.type == "cuda":
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                lean.forward(one, POS)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                lean.forward(one, POS)
            row["lean_graphed_ms"] = round(median_ms(graph.replay, device), 4)
        except Exception as ex:  # noqa: BLE001
            notes.append(f"lean_graphed: {type(ex).__name__}: {ex}"[:200])
    engine("static_eager_ms", lambda: StaticT5(model, graphs=False), lambda e: e.forward(one, POS))
    st = engine("static_ms", lambda: StaticT5(model), lambda e: e.forward(one, POS))
    if st is not None:
        row["static_call10_ms"] = round(median_ms(lambda: st.forward(ten, POS), device), 4)
        whole = st.forward(ten, POS).clone()
        alone = torch.stack([st.forward(ten[j : j + 1], POS + j)[0].clone() for j in range(10)])
        row["static_exact"] = bool(torch.equal(whole, alone))
        row["static_over_limit"] = round(row["static_ms"] / row["limit_ms"], 2)
    row["notes"] = "; ".join(notes)
    return row


def regime(device, dtype=torch.bfloat16, paper: tuple | None = None) -> pd.DataFrame:
    """regime.csv's rows: the shipped pair, then the paper's shapes (all four by default)."""
    from bildlib.experiments.paper.shapes import model_for
    from bildlib.models import load_model

    bw = bandwidth(device)
    rows = []
    for name, path in PAIR.items():
        model, _ = load_model(path, device, dtype)
        rows.append(measure(name, model, device, bw))
        print(rows[-1], flush=True)
    for shape in PAPER if paper is None else paper:
        model = model_for(shape, dtype=dtype, device=device)
        rows.append(measure(shape, model, device, bw))
        print(rows[-1], flush=True)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return pd.DataFrame(rows).assign(dtype=str(dtype).removeprefix("torch."), copy_GBps=round(bw / 1e9, 1))
