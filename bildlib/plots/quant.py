"""notebooks/quantized's figure: quality against weight bytes, and the speedups that compound
(bildlib.bench.quantbench)."""

from __future__ import annotations

import pandas as pd

from bildlib.plots import legend, plt
from bildlib.plots.small import labels


def quantized(t: pd.DataFrame, title: str = "") -> plt.Figure:
    """t: quantbench.table. Left: greedy BLEU against megabytes of weights, every quantization
    labelled, bf16's BLEU as a line. Right: per quantization, BiLD's measured speedups over that
    quantized large (filled) and the projected speedups against the bf16 vanilla large (hatched:
    the large alone, and BiLD over it; the weights-read bound)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    for method, g in t.groupby("method", sort=False):
        a.scatter(g["mb"], g["bleu"], label=method)
    near = 0.05 * (t["mb"].max() - t["mb"].min())
    labels(a, t["label"], t["mb"], t["bleu"], near, 0.3, edge=t["mb"].max())
    if (ref := t.loc[t["method"] == "none", "bleu"]).size:
        a.axhline(ref.iloc[0], color="0.6", lw=0.8, ls="--", label="bf16 large")
    a.set_xlabel("weights, MB (codes, tables, sparse part; embeddings and head in bf16)")
    a.set_ylabel("greedy BLEU of the large alone")
    legend(a)
    x = range(len(t))
    bars = [("lossless_speedup", "BiLD lossless, measured", None),
            ("best_speedup", "BiLD best, measured", None),
            ("alone_projected", "large alone, projected", "//"),
            ("best_projected", "BiLD best, projected", "//")]  # fmt: skip
    w = 0.8 / len(bars)
    for i, (col, name, hatch) in enumerate(bars):
        if col in t:
            b.bar([k + (i - 1.5) * w for k in x], t[col], w, label=name, hatch=hatch,
                  fill=hatch is None, edgecolor=f"C{i}", color=f"C{i}")  # fmt: skip
    b.axhline(1.0, color="0.6", lw=0.8)
    b.set_xticks(list(x), t["label"], rotation=45, ha="right", fontsize=8)
    b.set_ylabel("speedup (measured: over that large; projected: over bf16)")
    legend(b)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
