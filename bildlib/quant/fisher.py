"""The Fisher information of the large model's linear weights, SqueezeLLM's sensitivity: the
squared gradients of the loss on a calibration set, summed over batches (the empirical Fisher's
diagonal, batched as SqueezeLLM's own code does).

The calibration set: a seeded sample of Multi30k train sources with the large model's own greedy
outputs as targets (data/calibration/multi30k-large-train.parquet, prediction alignment's file), so
the sensitivities are those of the function the quantized model must keep.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from bildlib import REPO_ROOT, data

CALIBRATION = "data/calibration/multi30k-large-train.parquet"


def calibration_pairs(n: int = 256, seed: int = 0, root: Path = REPO_ROOT) -> list[tuple[str, str]]:
    """n (source, the large model's greedy output) pairs of Multi30k train, a seeded sample."""
    import pandas as pd

    f = root / CALIBRATION
    if not f.exists():
        raise FileNotFoundError(f"calibration file {f} is missing: it ships in data/calibration/")
    outs = pd.read_parquet(f)["output"].tolist()
    sources = [s for s, _ in data.load("multi30k", "train")]
    if len(sources) != len(outs):
        raise ValueError(f"{f}: {len(outs)} outputs for {len(sources)} Multi30k train sources")
    if not 0 < n <= len(outs):
        raise ValueError(f"n (calibration pairs) must be in 1..{len(outs)}, got {n}")
    pick = sorted(random.Random(seed).sample(range(len(outs)), n))
    return [(sources[i], outs[i]) for i in pick]


def fisher(model, tok, pairs: list[tuple[str, str]], names: list[str], batch_size: int = 8) -> dict:
    """{name: sum over batches of grad(loss)^2 (out, in) float32} for the named linear layers of an
    encoder-decoder model (its parameters are used as they are; run it in float32)."""
    mods = dict(model.named_modules())
    params = {n: mods[n].weight for n in names}
    acc = {n: torch.zeros(p.shape, dtype=torch.float32) for n, p in params.items()}
    was = {p: p.requires_grad for p in model.parameters()}
    for p in model.parameters():
        p.requires_grad_(False)
    for p in params.values():
        p.requires_grad_(True)
    model.eval()  # no dropout
    try:
        for b in range(0, len(pairs), batch_size):
            src, tgt = zip(*pairs[b : b + batch_size], strict=True)
            enc = tok(list(src), return_tensors="pt", padding=True).to(model.device)
            lab = tok(text_target=list(tgt), return_tensors="pt", padding=True).input_ids.to(model.device)
            lab[lab == tok.pad_token_id] = -100
            loss = model(**enc, labels=lab).loss
            grads = torch.autograd.grad(loss, list(params.values()))
            for n, g in zip(params, grads, strict=True):
                acc[n] += g.detach().float().cpu() ** 2
    finally:
        for p, r in was.items():
            p.requires_grad_(r)
    return acc
