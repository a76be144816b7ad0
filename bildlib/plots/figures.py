"""The paper's figures drawn from one sweep's summary (bildlib.analysis.summarize): Figs. 2, 4, 5
and 10, the latency scatter, Tables 3 and 5 as plots, and the peers' comparison."""

from __future__ import annotations

import pandas as pd

from bildlib.analysis import TABLE1_MODELS
from bildlib.plots.common import (
    METRIC_NAME,
    _bars,
    _vanilla,
    caption,
    frontier,
    legend,
    plt,  # pyplot, after common set the file-only backend
    reference_lines,
    smalls,
)  # fmt: skip


def fig4(s: pd.DataFrame, title: str = "") -> plt.Figure:
    """Quality vs normalized latency: the Pareto frontier of unaligned and aligned BiLD (and of
    the student's, when the sweep has it) over the threshold grid (all grid points faint),
    vanilla large as ✕, lines at its score and 1 below."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    colors = {"small": "tab:blue", "aligned": "tab:red", "student": "tab:green"}
    for model, name in TABLE1_MODELS.items():  # Table 1's rows, by the same names
        frontier(ax, s[(s["method"] == "bild") & (s["model"] == model)], colors[model], name)
    smalls(ax, s)
    reference_lines(ax, s, s.attrs.get("metric", "bleu"))
    ax.set_title(title, fontsize=9)
    legend(ax)
    caption(fig, s)
    return fig


def fig2(s: pd.DataFrame, title: str = "") -> plt.Figure:
    """Oracle study: quality vs % of tokens from the large model, with small and large alone."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    o = s[s["method"] == "oracle"].sort_values("large_pct")
    ax.plot(o["large_pct"], o["score"], "o-", color="tab:purple", ms=4, label="small + oracle large")
    for model, ls in (("small", ":"), ("large", "--")):
        v = _vanilla(s, model)
        if not v.empty:
            ax.axhline(float(v["score"].mean()), color="gray", ls=ls, label=f"{model} alone")
    ax.set_xlabel("% of tokens from the large model")
    ax.set_ylabel(METRIC_NAME.get(s.attrs.get("metric", "bleu"), "score"))
    ax.set_title(title, fontsize=9)
    legend(ax)
    caption(fig, s, bars=False)
    return fig


def fig5(s: pd.DataFrame, title: str = "") -> plt.Figure:
    """Ablation with the aligned small model: BiLD vs No-RB vs No-FB (window sweep)."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    b = s[(s["method"] == "bild") & (s["model"] == "aligned")]
    groups = [
        ("BiLD", b[b["fallback"].notna() & b["rollback"].notna()], "tab:red"),
        ("No rollback", b[b["fallback"].notna() & b["rollback"].isna()], "tab:green"),
        ("No fallback (window)", b[b["fallback"].isna()], "tab:orange"),
    ]
    for name, g, color in groups:
        frontier(ax, g, color, name)
    reference_lines(ax, s, s.attrs.get("metric", "bleu"))
    ax.set_title(title, fontsize=9)
    legend(ax)
    caption(fig, s, "No-FB: every window x every α_RB of BiLD's grid")
    return fig


def fig10(s: pd.DataFrame, model: str = "aligned", title: str = "") -> plt.Figure:
    """Sensitivity: one curve per α_RB over α_FB, marker size growing with α_FB."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    b = s[(s["method"] == "bild") & (s["model"] == model) & s["fallback"].notna() & s["rollback"].notna()]
    lo, span = b["fallback"].min(), max(b["fallback"].max() - b["fallback"].min(), 1e-9)

    def size(fb):  # marker area grows with α_FB
        return 15 + 120 * (fb - lo) / span

    for rb, g in b.groupby("rollback"):
        g = g.sort_values("fallback")
        (line,) = ax.plot(g["norm_latency"], g["score"], "-", lw=1, label=f"α_RB = {rb:g}")
        ax.scatter(g["norm_latency"], g["score"], s=size(g["fallback"]), color=line.get_color())
        _bars(ax, g, line.get_color())
    for fb in sorted(set(b["fallback"]))[:: max(1, len(set(b["fallback"])) // 3)]:  # the key for marker size
        ax.scatter([], [], s=size(pd.Series([fb])), color="gray", label=f"α_FB = {fb:g}")
    reference_lines(ax, s, s.attrs.get("metric", "bleu"))
    ax.set_title(title or f"{model} small model; marker size grows with α_FB", fontsize=9)
    legend(ax)
    caption(fig, s)
    return fig


def latency_scatter(e: pd.DataFrame, title: str = "") -> plt.Figure:
    """arXiv v1 Fig. 6: per-example latency of vanilla large (x) against BiLD's (y), with the
    diagonal; points above it are examples BiLD made slower. e: analysis.per_example."""
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ms = 1e3 * e[["vanilla_s", "bild_s"]]
    ax.scatter(ms["vanilla_s"], ms["bild_s"], s=10, c=e["slower"].map({True: "C3", False: "C0"}))
    top = float(ms.max().max()) * 1.05
    ax.plot([0, top], [0, top], "k--", lw=0.8, label="equal latency")
    ax.set(xlim=(0, top), ylim=(0, top), xlabel="vanilla large latency (ms)", ylabel="BiLD latency (ms)")
    ax.set_title(title or f"{100 * e['slower'].mean():.1f}% of examples slower with BiLD", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    if "dtype" in e:  # the run (analysis.run_info columns)
        r = e.iloc[0]
        note = f"n={r['n']}, {r['dtype']}, {r['engine']} engine; vanilla large: the mean of its repeats"
        fig.text(0.01, -0.02, note, fontsize=6.5, va="top", color="dimgray")
    return fig


def table3(summaries: dict, title: str = "") -> plt.Figure:
    """Paper Tables 3-4 as points: one panel per decoding mode and seed ({(mode, seed): summarize()}),
    speculative sampling per window (squares, labelled) against unaligned BiLD's grid and Pareto
    frontier; one key, beside the first panel."""
    n = len(summaries)
    cols = min(n, 2)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols + 1.5, 3.8 * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax, (key, s) in zip(axes.flat, summaries.items(), strict=False):
        mode = key if isinstance(key, str) else key[0] + (f", seed {key[1]}" if key[0] == "sampled" else "")
        frontier(ax, s[(s["method"] == "bild") & (s["model"] == "small")], "tab:blue", "BiLD (unaligned)")
        sp = s[s["method"] == "speculative"].sort_values("window")
        ax.plot(sp["norm_latency"], sp["score"], "s--", color="tab:green", ms=4, label="speculative (window)")
        for _, r in sp.iterrows():
            ax.annotate(f"{r['window']:g}", (r["norm_latency"], r["score"]), fontsize=6, xytext=(2, 2),
                        textcoords="offset points")  # fmt: skip
        reference_lines(ax, s, s.attrs.get("metric", "bleu"))
        ax.set_title(mode, fontsize=9)
    legend(axes.flat[cols - 1])
    fig.suptitle(title, fontsize=10)
    caption(fig, s, "one panel per mode and seed")
    fig.tight_layout()
    return fig


def table5(agg: pd.DataFrame, table: pd.DataFrame, title: str = "", metric: str = "bleu") -> plt.Figure:
    """Table 5 as a figure: every BiLD configuration's mean score against mean speedup over the
    seeds, with one-standard-deviation bars; vanilla large's mean and band; the table's rows ringed."""
    fig, ax = plt.subplots(figsize=(6, 4.2))
    van = table.iloc[0]
    m, sd = van["score_mean"], van["score_std"]
    ax.axhspan(m - sd, m + sd, color="gray", alpha=0.15, lw=0)
    ax.axhline(m, color="gray", lw=0.8, ls="--", label=f"vanilla large ({m:.2f} ± {sd:.2f})")
    b = agg[agg["method"] == "bild"]
    ax.errorbar(b["speedup_mean"], b["score_mean"], xerr=b["speedup_std"], yerr=b["score_std"], fmt="o",
                ms=3, color="tab:blue", alpha=0.6, lw=0.7, label="BiLD configurations")  # fmt: skip
    chosen = table.iloc[1:].dropna(subset=["score_mean"])
    ax.scatter(chosen["speedup_mean"], chosen["score_mean"], s=90, facecolors="none", edgecolors="tab:red",
               label="Table 5 rows", zorder=5)  # fmt: skip
    ax.set_xlabel("speedup over vanilla large (mean over seeds)")
    ax.set_ylabel(f"{METRIC_NAME.get(metric, metric)} (mean over seeds)")
    ax.set_title(title, fontsize=8)
    legend(ax)
    return fig


def peers(head: pd.DataFrame, title: str = "", metric: str = "bleu") -> plt.Figure:
    """ms per sentence of each headline decoder (bars), its score written beside it."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(head) + 1.2))
    y = range(len(head))[::-1]
    colors = ["tab:blue" if "BiLD" in d else "tab:gray" for d in head["decoder"]]
    ax.barh(list(y), head["ms"], color=colors)
    for yi, (_, r) in zip(y, head.iterrows(), strict=True):
        note = f" {r['ms']:.1f} ms, {METRIC_NAME.get(metric, metric)} {r['score']:.2f}, "
        ax.text(r["ms"], yi, note + f"{r['speedup_same_engine']:.2f}× same engine", va="center", fontsize=8)
    ax.set_yticks(list(y), head["decoder"], fontsize=8)
    ax.set_xlabel("ms per sentence (batch 1)")
    ax.set_xlim(0, head["ms"].max() * 1.9)
    ax.set_title(title, fontsize=9)
    return fig
