"""notebooks/quantized's figure: quality against weight bytes, and the speedups that compound
(bildlib.bench.quantbench)."""

from __future__ import annotations

import pandas as pd

from bildlib.plots.common import legend, plt


def quantized(t: pd.DataFrame, title: str = "") -> plt.Figure:
    """t: quantbench.table. Left: greedy BLEU against megabytes of weights, a marker per method and
    a colour per quantization, bf16's BLEU as a line. Right: per quantization, the speedups against
    the bf16 vanilla large: measured (filled: the large alone, lossless BiLD and the best BiLD over
    it) and projected (hatched: the large alone and BiLD over it; the weights-read bound)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    markers = {"none": "o", "int8": "s", "rtn": "^", "squeeze": "D"}
    for i, r in enumerate(t.itertuples()):  # one colour per quantization: the legend names them
        a.scatter(r.mb, r.bleu, marker=markers.get(r.method, "o"), color=f"C{i % 10}", label=r.label, s=36)
    if (ref := t.loc[t["method"] == "none", "bleu"]).size:
        a.axhline(ref.iloc[0], color="0.6", lw=0.8, ls="--")
    a.set_xlabel("weights, MB (codes, tables, sparse part; embeddings and head in bf16)")
    a.set_ylabel("greedy BLEU of the large alone (dashed: bf16)")
    legend(a)
    x = range(len(t))
    bars = [("alone_speedup", "large alone, measured", None),
            ("lossless_speedup", "BiLD lossless, measured", None),
            ("best_speedup", "BiLD best, measured", None),
            ("alone_projected", "large alone, projected", "//"),
            ("best_projected", "BiLD best, projected", "//")]  # fmt: skip
    w = 0.8 / len(bars)
    for i, (col, name, hatch) in enumerate(bars):
        if col in t:
            b.bar([k + (i - (len(bars) - 1) / 2) * w for k in x], t[col], w, label=name, hatch=hatch,
                  fill=hatch is None, edgecolor=f"C{i}", color=f"C{i}")  # fmt: skip
    b.axhline(1.0, color="0.6", lw=0.8)
    b.set_xticks(list(x), t["label"], rotation=45, ha="right", fontsize=8)
    b.set_ylabel("speedup (×)")
    b.set_title("against the bf16 vanilla large (measured in the same run; projected by bytes)", fontsize=8)
    legend(b)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
