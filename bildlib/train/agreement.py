"""How well a small model serves BiLD: how often its top-1 token is the large model's, and how well
its max probability says so (what α_FB reads).

Both are measured teacher-forced on the large model's own greedy outputs, which is what BiLD's
small model sees: a prefix the large model accepts. Each target position gives max p_S and
whether the small model's argmax is the large model's token there. The reliability diagram bins
positions by max p_S and sets each bin's mean confidence beside its agreement; the expected
calibration error (ECE; Guo et al. 2017) is the positions-weighted mean gap between the two.

    python -m bildlib.train.agreement data/checkpoints/multi30k-small-aligned   # on val
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pandas as pd
import torch

from bildlib import data
from bildlib.analysis.evaluate import greedy_ids
from bildlib.models import load_model


@torch.inference_mode()
def positions(small, tok, sources: list[str], targets: list[list[int]], batch_size: int = 64) -> pd.DataFrame:
    """One row per target position of each sentence: sentence, position, p_max (max p_S there),
    agree (the small model's argmax is the target token). targets: ids ending in EOS."""
    if len(sources) != len(targets):
        raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
    rows = []
    for b in range(0, len(sources), batch_size):
        idx = list(range(b, min(b + batch_size, len(sources))))
        enc = tok([sources[i] for i in idx], return_tensors="pt", padding=True).to(small.device)
        n = max(len(targets[i]) for i in idx)
        labels = torch.tensor([targets[i] + [-100] * (n - len(targets[i])) for i in idx], device=small.device)
        p = small(**enc, labels=labels).logits.float().softmax(-1)  # (B, n, V)
        p_max, top = p.max(-1)  # (B, n)
        for j, i in enumerate(idx):
            k = len(targets[i])
            rows.append(pd.DataFrame({
                "sentence": i, "position": np.arange(k), "p_max": p_max[j, :k].cpu().numpy(),
                "agree": (top[j, :k] == labels[j, :k]).cpu().numpy(),
            }))  # fmt: skip
    return pd.concat(rows, ignore_index=True)


def reliability(df: pd.DataFrame, bins: int = 10) -> pd.DataFrame:
    """Positions binned by max p_S into `bins` equal widths of [0, 1]: n, mean confidence and
    agreement per non-empty bin (the reliability diagram)."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    b = np.minimum((df["p_max"].to_numpy() * bins).astype(int), bins - 1)
    g = df.assign(bin=b).groupby("bin")
    t = pd.DataFrame({"n": g.size(), "confidence": g["p_max"].mean(), "agreement": g["agree"].mean()})
    t["lo"], t["hi"] = t.index / bins, (t.index + 1) / bins
    return t.reset_index()


def ece(df: pd.DataFrame, bins: int = 10) -> float:
    """Expected calibration error: sum over bins of n_bin / n * |agreement - confidence|."""
    t = reliability(df, bins)
    return float((t["n"] / t["n"].sum() * (t["agreement"] - t["confidence"]).abs()).sum())


def summary(df: pd.DataFrame, bins: int = 10) -> dict:
    """Agreement, ECE and mean confidence over all positions, and the number of positions."""
    return {"positions": len(df), "agreement": float(df["agree"].mean()), "ece": ece(df, bins),
            "confidence": float(df["p_max"].mean())}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.train.agreement", description=__doc__.split("\n")[0])
    ap.add_argument("small", nargs="+", help="small checkpoint folders")
    ap.add_argument("--large", default="data/checkpoints/multi30k-large")
    ap.add_argument("--split", default="val")
    ap.add_argument("--n", type=int, default=None, help="first n sentences (default: all)")
    a = ap.parse_args(argv)
    s = data.load("multi30k", a.split, a.n)
    large, tok = load_model(a.large, dtype="float32")
    targets = greedy_ids(large, tok, s.sources)
    for path in a.small:
        small, _ = load_model(path, dtype="float32")
        df = positions(small, tok, s.sources, targets)
        print(json.dumps({"small": path, "split": a.split, **summary(df)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
