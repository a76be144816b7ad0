"""Fig. 8: BiLD's FLOPs, memory operations and arithmetic intensity against vanilla large
(analysis.cost), the roofline projection (analysis.roofline), and the speedup measured here."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from bildlib import plots  # noqa: F401  (sets matplotlib's file-only backend first)


def fig8(totals: pd.DataFrame, proj: pd.DataFrame, measured: dict, title: str = "", paper=None) -> plt.Figure:
    """Fig. 8, one column per model pair (column `pair` of bildlib.analysis.cost.totals and
    bildlib.analysis.roofline.projection; the paper's T5 setting first): top, BiLD's FLOPs, memory
    operations and arithmetic intensity relative to vanilla large, counted from the calls;
    bottom, the roofline projection's speedups per GPU and overhead, with the paper's measured
    speedup (roofline.PAPER) as a line. The last column is this machine's measurement alone:
    measured = {"speedup", "lo", "hi", "what"} (95 % interval)."""
    pairs = list(dict.fromkeys(totals["pair"]))
    fig, axes = plt.subplots(2, len(pairs) + 1, figsize=(4.2 * (len(pairs) + 1), 7), squeeze=False)
    names = {"flops_rel": "FLOPs", "bytes_rel": "memory ops", "intensity_rel": "intensity"}
    for col, pair in enumerate(pairs):
        ax, bx = axes[0, col], axes[1, col]
        g = totals[(totals["pair"] == pair) & (totals["run"] != "vanilla large")]
        bars = ax.bar(list(names.values()), [g[c].iloc[0] for c in names], color="tab:blue")
        ax.bar_label(bars, fmt="%.2f×", fontsize=7)
        ax.axhline(1.0, color="gray", lw=0.8, ls="--")
        ax.set_title(f"{pair}\ncounted from the calls", fontsize=8)
        ax.set_ylabel("BiLD / vanilla large") if col == 0 else None
        p = proj[proj["pair"] == pair]
        gpus, overheads = list(dict.fromkeys(p["gpu"])), list(dict.fromkeys(p["layer_overhead_us"]))
        w = 0.8 / len(overheads)
        for j, us in enumerate(overheads):
            q = p[p["layer_overhead_us"] == us].set_index("gpu").loc[gpus]
            bx.bar([i + w * j for i in range(len(gpus))], q["speedup"], width=w, label=f"{us:g} µs / layer")
        bx.set_xticks([i + 0.4 - w / 2 for i in range(len(gpus))], gpus)
        if paper and pair == pairs[0]:
            bx.axhline(
                paper["speedup"], color="black", lw=1, ls="-.", label=f"paper: {paper['speedup']:.2f}×"
            )
        bx.axhline(1.0, color="gray", lw=0.8, ls="--")
        bx.set_title(f"{pair}\nroofline projection (a model, not a measurement)", fontsize=8)
        bx.set_ylabel("predicted speedup of BiLD") if col == 0 else None
    cx, dx = axes[0, -1], axes[1, -1]
    cx.axis("off")  # the key of the projection panels, off their bars
    handles, labels = axes[1, 0].get_legend_handles_labels()
    cx.legend(handles, labels, title="projection: launch overhead", fontsize=7, title_fontsize=7,
              loc="upper left")  # fmt: skip
    what = "Bottom right: measured on this machine\n(CPU), the shipped pair; its counted\n"
    cx.text(0, 0.35, what + "ratios are in the third column\n(the same calls).", fontsize=7.5, va="top",
            transform=cx.transAxes)  # fmt: skip
    err = [[measured["speedup"] - measured["lo"]], [measured["hi"] - measured["speedup"]]]
    dx.bar([measured["what"]], [measured["speedup"]], yerr=err, color="tab:gray", capsize=4, width=0.5)
    note = f"{measured['speedup']:.2f}×\n[{measured['lo']:.2f}, {measured['hi']:.2f}]"
    dx.text(0.3, measured["speedup"], note, fontsize=8, va="center", ha="left")
    dx.set_xlim(-0.6, 1.0)
    dx.axhline(1.0, color="gray", lw=0.8, ls="--")
    dx.set_title("measured speedup, 95 % interval", fontsize=9)
    dx.tick_params(axis="x", labelsize=7)
    fig.suptitle(title, fontsize=10)
    if paper:
        fig.text(0.01, -0.01, f"paper line: {paper['what']}", fontsize=6.5, color="dimgray", va="top")
    fig.tight_layout()
    return fig
