"""The paper's figures from experiment summaries (bildlib.analysis.summarize)."""

from __future__ import annotations

import html
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; notebooks display the saved PNG
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bildlib import REPO_ROOT, data  # noqa: E402
from bildlib.analysis import pareto  # noqa: E402

FIGURES = REPO_ROOT / "figures"
METRIC_NAME = {"bleu": "BLEU", "rougeL": "ROUGE-L"}


def save(fig, table: pd.DataFrame | None, name: str, out_dir: Path | str | None = None) -> Path:
    """figures/<name>.png, .pdf and (the plotted numbers) .csv, each written atomically."""
    out = Path(out_dir) if out_dir else FIGURES
    for ext in ("png", "pdf"):
        with data.atomic_path(out / f"{name}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
    if table is not None:
        with data.atomic_path(out / f"{name}.csv") as tmp:
            table.to_csv(tmp, index=False, float_format="%.4f")
    plt.close(fig)
    return out / f"{name}.png"


def save_table(table: pd.DataFrame, name: str, out_dir: Path | str | None = None) -> Path:
    """figures/<name>.csv, written atomically."""
    path = (Path(out_dir) if out_dir else FIGURES) / f"{name}.csv"
    with data.atomic_path(path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.4f")
    return path


def _vanilla(s: pd.DataFrame, model: str) -> pd.DataFrame:
    return s[(s["method"] == "vanilla") & (s["model"] == model)]


def _frontier(ax, g: pd.DataFrame, color: str, name: str) -> None:
    """All configurations faint, their Pareto frontier as a line."""
    if g.empty:
        return
    ax.scatter(g["norm_latency"], g["score"], s=10, color=color, alpha=0.25)
    f = pareto(g)
    ax.plot(f["norm_latency"], f["score"], "o-", color=color, ms=4, label=name)


BASELINE_NAME = {"large": ("vanilla large", "vanilla large"), "ee": ("full model", "full early-exit model")}


def _reference_lines(ax, s: pd.DataFrame, metric: str):
    """The baseline's score (the sweep's baseline model, s.attrs["baseline"]; vanilla large by
    default) as a line and a ✕ at latency 1, and a line one point below."""
    model = s.attrs.get("baseline", "large")
    short, long = BASELINE_NAME[model]
    v = float(_vanilla(s, model)["score"].mean())
    ax.axhline(v, color="gray", lw=0.8, ls="--", label=f"{short} ({v:.2f})")
    ax.axhline(v - 1, color="gray", lw=0.8, ls=":", label="1 point below")
    ax.scatter([1.0], [v], marker="x", s=80, color="black", zorder=5)
    ax.set_xlabel(f"normalized latency ({long} = 1)")
    ax.set_ylabel(METRIC_NAME.get(metric, metric))
    return v


def fig4(s: pd.DataFrame, title: str = "") -> plt.Figure:
    """Quality vs normalized latency: the Pareto frontier of unaligned and aligned BiLD over the
    threshold grid (all grid points faint), vanilla large as ✕, lines at its score and 1 below."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for model, color, name in (
        ("small", "tab:blue", "BiLD (unaligned)"),
        ("aligned", "tab:red", "BiLD (aligned)"),
    ):
        _frontier(ax, s[(s["method"] == "bild") & (s["model"] == model)], color, name)
    _reference_lines(ax, s, s.attrs.get("metric", "bleu"))
    ax.set_title(title)
    ax.legend(fontsize=8)
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
    ax.set_title(title)
    ax.legend(fontsize=8)
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
        _frontier(ax, g, color, name)
    _reference_lines(ax, s, s.attrs.get("metric", "bleu"))
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def fig10(s: pd.DataFrame, model: str = "aligned", title: str = "") -> plt.Figure:
    """Sensitivity: one curve per α_RB over α_FB, marker size growing with α_FB."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    b = s[(s["method"] == "bild") & (s["model"] == model) & s["fallback"].notna() & s["rollback"].notna()]
    for rb, g in b.groupby("rollback"):
        g = g.sort_values("fallback")
        (line,) = ax.plot(g["norm_latency"], g["score"], "-", lw=1, label=f"α_RB = {rb:g}")
        ax.scatter(g["norm_latency"], g["score"], s=15 + 120 * (g["fallback"] - 0.2), color=line.get_color())
    _reference_lines(ax, s, s.attrs.get("metric", "bleu"))
    ax.set_title(title or f"{model} small; marker size grows with α_FB")
    ax.legend(fontsize=7)
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
    ax.set_title(title or f"{100 * e['slower'].mean():.1f}% of examples slower with BiLD")
    ax.legend(fontsize=7, loc="upper left")
    return fig


def table3(summaries: dict[str, pd.DataFrame], title: str = "") -> plt.Figure:
    """Paper Tables 3-4 as points: one panel per decoding mode ({mode: summarize()}), speculative
    sampling per window (squares, labelled) against unaligned BiLD's grid and Pareto frontier."""
    fig, axes = plt.subplots(1, len(summaries), figsize=(5.5 * len(summaries), 4), squeeze=False)
    for ax, (mode, s) in zip(axes[0], summaries.items(), strict=True):
        _frontier(ax, s[(s["method"] == "bild") & (s["model"] == "small")], "tab:blue", "BiLD (unaligned)")
        sp = s[s["method"] == "speculative"].sort_values("window")
        ax.plot(sp["norm_latency"], sp["score"], "s--", color="tab:green", ms=4, label="speculative")
        for _, r in sp.iterrows():
            ax.annotate(f"{r['window']:g}", (r["norm_latency"], r["score"]), fontsize=6, xytext=(2, 2),
                        textcoords="offset points")  # fmt: skip
        _reference_lines(ax, s, s.attrs.get("metric", "bleu"))
        ax.set_title(f"{title} {mode}".strip())
        ax.legend(fontsize=7)
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
    ax.set_title(title)
    ax.legend(fontsize=7)
    return fig


def fig8(totals: pd.DataFrame, proj: pd.DataFrame, measured: float, title: str = "") -> plt.Figure:
    """Fig. 8: BiLD's FLOPs, memory operations and arithmetic intensity relative to vanilla large
    (bildlib.cost.totals, column `pair` per model pair), beside the roofline projection's
    speedups (bildlib.roofline.projection, column `pair`) and the speedup measured here."""
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    b = totals[totals["run"] != "vanilla large"]
    names = {"flops_rel": "FLOPs", "bytes_rel": "memory ops", "intensity_rel": "arithmetic intensity"}
    for j, (pair, g) in enumerate(b.groupby("pair", sort=False)):
        x = [i + 0.38 * j for i in range(len(names))]
        bars = ax.bar(x, [g[c].iloc[0] for c in names], width=0.36, label=pair)
        ax.bar_label(bars, fmt="%.2f×", fontsize=7)
    ax.set_xticks([i + 0.19 for i in range(len(names))], list(names.values()))
    ax.axhline(1.0, color="gray", lw=0.8, ls="--", label="vanilla large = 1")
    ax.set_ylabel("BiLD / vanilla large")
    ax.set_title(f"{title}: counted from the calls".strip(": "))
    ax.legend(fontsize=7)
    cols = list(dict.fromkeys(zip(proj["pair"], proj["layer_overhead_us"], strict=True)))
    gpus = list(dict.fromkeys(proj["gpu"]))
    w = 0.8 / len(cols)
    for j, (pair, us) in enumerate(cols):
        g = proj[(proj["pair"] == pair) & (proj["layer_overhead_us"] == us)].set_index("gpu").loc[gpus]
        bx.bar([i + w * j for i in range(len(gpus))], g["speedup"], width=w, label=f"{pair}, {us:g} µs/layer")
    bx.set_xticks([i + 0.4 - w / 2 for i in range(len(gpus))], gpus)
    bx.axhline(measured, color="black", lw=1, ls="-.", label=f"measured here (CPU): {measured:.2f}×")
    bx.axhline(1.0, color="gray", lw=0.8, ls="--")
    bx.set_ylabel("predicted speedup of BiLD")
    bx.set_title("roofline projection: a model, not a measurement", fontsize=9)
    bx.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
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


def example_html(rows: list[dict]) -> str:
    """Fig 9: reference, large, small and BiLD outputs; BiLD's large-model tokens highlighted.
    rows: dicts with source, reference, large, small, bild_tokens [(text, 'S'|'L')]."""
    parts = []
    for r in rows:
        bild = "".join(
            f'<span style="background:#f4b6b6">{html.escape(t)}</span>' if who == "L" else html.escape(t)
            for t, who in r["bild_tokens"]
        )
        parts.append(
            "<table style='border-collapse:collapse;margin-bottom:1em'>"
            + "".join(
                f"<tr><td style='padding:2px 8px'><b>{k}</b></td><td style='padding:2px 8px'>{v}</td></tr>"
                for k, v in (
                    ("source", html.escape(r["source"])),
                    ("reference", html.escape(r["reference"])),
                    ("large", html.escape(r["large"])),
                    ("small", html.escape(r["small"])),
                    ("BiLD", bild),
                )
            )
            + "</table>"
        )
    return "\n".join(parts)


def fig9(rows: list[dict]) -> plt.Figure:
    """The examples of example_html as a figure: BiLD's large-model tokens in red."""
    fig, ax = plt.subplots(figsize=(9, 1.2 * len(rows) + 0.2))
    ax.axis("off")
    y = 1.0
    step = 1.0 / (6 * len(rows))
    for r in rows:
        for k in ("source", "reference", "large", "small"):
            line = f"{k}: {r[k]}"
            line = line if len(line) <= 150 else line[:149] + "…"  # one line each
            ax.text(0, y, line, fontsize=8, va="top", transform=ax.transAxes)
            y -= step
        x = 0.0
        ax.text(0, y, "BiLD:", fontsize=8, va="top", transform=ax.transAxes)
        x = 0.06
        for t, who in r["bild_tokens"]:
            txt = ax.text(
                x, y, t, fontsize=8, va="top", transform=ax.transAxes,
                color="tab:red" if who == "L" else "black", fontweight="bold" if who == "L" else "normal",
            )  # fmt: skip
            fig.canvas.draw()
            bb = txt.get_window_extent().transformed(ax.transAxes.inverted())
            x = bb.x1
        y -= 2 * step
    return fig
