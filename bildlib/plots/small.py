"""notebooks/small_models' figures: the candidates' frontier (agreement against cost per token;
BiLD's speedup against BLEU) and their reliability diagrams (bildlib.bench.smallmodels)."""

from __future__ import annotations

import pandas as pd

from bildlib.plots.common import legend, plt


def labels(ax, names, xs, ys, dx: float, dy: float, placed: list | None = None, edge=None) -> None:
    """Each point's name beside it; a name whose point is within (dx, dy) of one already named
    goes a line lower, and the names of points near the right edge (`edge`: the largest x on the
    axes, default the largest of xs) go to their left, inside the axes."""
    placed = [] if placed is None else placed
    xs, ys = list(xs), list(ys)
    right_edge = edge if edge is not None else max(xs, default=0.0)
    for k, xi, yi in zip(names, xs, ys, strict=True):
        near = sum(abs(xi - u) < dx and abs(yi - v) < dy for u, v in placed)
        right = xi > 0.9 * right_edge
        ax.annotate(k, (xi, yi), fontsize=7, textcoords="offset points",
                    xytext=(-4 if right else 4, 3 - 9 * near), ha="right" if right else "left")  # fmt: skip
        placed.append((xi, yi))


def frontier(profile: pd.DataFrame, every: pd.DataFrame, head: pd.DataFrame, title: str = "") -> plt.Figure:
    """profile: one row per candidate (agreement, ece, params_m, step_ms_<dtype>, large_step_ms_<dtype>);
    every / head: smallmodels.table. Left: agreement against the step's cost relative to the large
    model's, in each dtype. Right: BiLD speedup against BLEU, Algorithm 1 over α_FB as a line and
    lossless BiLD as open markers, per candidate at the paper's limit of 10 small steps."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
    colors = dict(zip(profile["label"], plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3, strict=False))
    for dtype, marker in (("bfloat16", "o"), ("float32", "s")):
        if f"step_ms_{dtype}" not in profile:
            continue
        x = profile[f"step_ms_{dtype}"] / profile[f"large_step_ms_{dtype}"]
        y = 100 * profile["agreement"]
        size = 20 + 12 * profile["params_m"]
        a.scatter(x, y, marker=marker, c=[colors[k] for k in profile["label"]], s=size, alpha=0.8,
                  label=f"{dtype} (size: parameters)")  # fmt: skip
        if dtype == "bfloat16":
            names = [f"{k} (ECE {e:.3f})" for k, e in zip(profile["label"], profile["ece"], strict=True)]
            labels(a, names, x, y, 0.02, 0.5)
    a.axvline(1 / 8, color="grey", lw=0.8, ls=":", label="1/8 of the large step")
    a.set_xlabel("ms per token / the large model's (lean engine, batch 1)")
    a.set_ylabel("top-1 agreement with the large model (%)")
    a.set_title("agreement against cost", fontsize=9)
    legend(a)
    ten = every[every["max_small_steps"] == 10]
    for k, g in ten.groupby("candidate", sort=False):
        alg1 = g[~g["lossless"]].sort_values("fallback")
        b.plot(alg1["speedup"], alg1["score"], "o-", ms=3, color=colors.get(k), label=k)
        ll = g[g["lossless"]]
        b.scatter(ll["speedup"], ll["score"], facecolors="none", edgecolors=colors.get(k), s=40)
    if not head.empty:
        v = float(head["large_bleu"].iloc[0])
        b.axhline(v, color="black", lw=0.8, label=f"vanilla large ({v:.2f})")
        b.axhline(v - 0.5, color="black", lw=0.8, ls=":", label="0.5 below it")
    b.axvline(1.0, color="grey", lw=0.6)
    b.set_xlabel("speedup against vanilla large (same run)")
    b.set_ylabel("BLEU")
    b.set_title("BiLD per candidate: Algorithm 1 over α_FB (line), lossless (open)", fontsize=9)
    legend(b)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def reliability(bins: pd.DataFrame, title: str = "") -> plt.Figure:
    """Each candidate's reliability diagram: agreement against mean max p_S per bin."""
    fig, ax = plt.subplots(figsize=(5, 4.2))
    ax.plot([0, 1], [0, 1], color="grey", lw=0.8, ls=":", label="calibrated")
    for k, g in bins.groupby("label", sort=False):
        ax.plot(g["confidence"], g["agreement"], "o-", ms=3, label=k)
    ax.set_xlabel("max p_S (mean in its bin)")
    ax.set_ylabel("agreement with the large model")
    ax.set_title(title or "reliability of max p_S", fontsize=9)
    legend(ax)
    fig.tight_layout()
    return fig


def pet(profile: pd.DataFrame, ablations, title: str = "") -> plt.Figure:
    """PET's size-BLEU-speed trade-off (its Fig. 5) at this scale: BLEU against parameters (left)
    and against the bf16 step's cost (right), every run of the profile labelled; `ablations`:
    the labels of PET's runs (the others are drawn as the models they are compared with)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    axis = {"params_m": "parameters (millions; shared tensors once)",
            "step_ms_bfloat16": "ms per token, bf16 (lean engine, batch 1)"}  # fmt: skip
    ours = profile["label"].isin(list(ablations))
    for ax, (x, name) in zip(axes, axis.items(), strict=True):
        if x not in profile:
            continue
        placed: list = []  # both groups' labelled points: a near one goes a line lower
        near = 0.05 * (profile[x].max() - profile[x].min())
        for mask, marker, what in ((ours, "o", "PET's ablations"), (~ours, "s", "other small models")):
            r = profile[mask]
            ax.scatter(r[x], r["bleu"], marker=marker, label=what)
            labels(ax, r["label"], r[x], r["bleu"], near, 0.3, placed, profile[x].max())
        ax.set_xlabel(name)
        ax.set_ylabel("greedy BLEU")
        legend(ax)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
