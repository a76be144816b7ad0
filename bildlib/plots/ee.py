"""Early exit's figures (paper Figs. 6 and 7) and their numbers, from summaries of a sweep with
baseline "ee" (analysis.summarize): normalized latency and speedup are against vanilla decoding
of the full early-exit model."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from bildlib.analysis import best_row, pareto, spread_of, vanilla_large
from bildlib.plots.common import caption, frontier, legend, reference_lines


def _own_large(s: pd.DataFrame) -> pd.DataFrame:
    """The two-model BiLD rows, normalized by vanilla large of the same sweep (its own large
    model) instead of the early-exit baseline; none when the sweep has no vanilla large. Their
    intervals are dropped: they were taken against the other baseline."""
    rows = s[(s["method"] == "bild") & (s["model"] == "aligned")]
    large = s[(s["method"] == "vanilla") & (s["model"] == "large")]
    if rows.empty or large.empty:
        return rows.iloc[0:0]
    ref = float(large["latency_s"].mean())
    rows = rows.drop(columns=spread_of(rows))
    return rows.assign(norm_latency=rows["latency_s"] / ref, speedup=ref / rows["latency_s"])


CURVES = {  # name: (rows of a summary, color)
    "early-exit BiLD": (lambda s: s[(s["method"] == "bild") & (s["model"] == "ee")], "tab:red"),
    "CALM": (lambda s: s[s["method"] == "calm"], "tab:green"),
    "two-model BiLD (aligned) vs its own vanilla large; reference": (_own_large, "tab:blue"),
}


def baseline_score(s: pd.DataFrame) -> float:
    """Vanilla decoding of the full early-exit model: the figures' ✕."""
    v = vanilla_large(s)  # the sweep's baseline rows
    if s.attrs.get("baseline") != "ee" or v.empty:
        raise ValueError("no vanilla-ee baseline: summarize a sweep run with baseline='ee'")
    return float(v["score"].mean())


def best_within(s: pd.DataFrame, *curves: str, tolerances=(0.5, 1.0)) -> pd.DataFrame:
    """The fastest configuration of each curve within each tolerance of the full model's score, by
    README's rule (analysis.verdicts.pick): the lower end of its 95 % interval of the score difference
    to the full model clears -tolerance. A summary without intervals (n too small to bootstrap) picks
    on the measured score, and its rows say so (picked_on)."""
    ref, out = baseline_score(s), []
    keep = ["label", "score", "speedup", "fallback", "rollback", "threshold", *spread_of(s)]
    on_interval = "delta_lo" in s.columns and s["delta_lo"].notna().any()
    for curve in curves:
        rows = CURVES[curve][0](s)
        for tol in tolerances:
            ok = rows["delta_lo"] >= -tol if on_interval else rows["score"] >= ref - tol
            r = best_row(rows[ok], "speedup")
            out.append({"curve": curve, "within": tol, "picked_on": "interval" if on_interval else "point"}
                       | ({} if r is None else {k: r[k] for k in keep}))  # fmt: skip
    return pd.DataFrame(out)


def at_latency(s: pd.DataFrame, curve: str, latencies) -> list[float]:
    """The best score of `curve` at or below each normalized latency (its Pareto frontier read as a
    step function); NaN where it has no configuration that fast."""
    f = pareto(CURVES[curve][0](s))
    return [float(f.loc[f["norm_latency"] <= x, "score"].max()) for x in latencies]


def matched(s: pd.DataFrame, latencies=(0.5, 0.6, 2 / 3, 0.8, 0.9)) -> pd.DataFrame:
    """Early-exit BiLD against CALM at matched normalized latency (2/3: the paper's 1.5×)."""
    bild, calm = (at_latency(s, c, latencies) for c in ("early-exit BiLD", "CALM"))
    diff = [b - c for b, c in zip(bild, calm, strict=True)]
    return pd.DataFrame({"norm_latency": latencies, "speedup": [1 / x for x in latencies],
                         "bild": bild, "calm": calm, "bild_minus_calm": diff})  # fmt: skip


def _axes(fig, ax, s: pd.DataFrame, title: str) -> None:
    baseline_score(s)  # an early-exit sweep's summary, or a clear error
    reference_lines(ax, s, s.attrs.get("metric", "bleu"))
    ax.set_title(title, fontsize=9)
    legend(ax)
    caption(fig, s)


def fig6(s: pd.DataFrame, title: str = "") -> plt.Figure:
    """Early-exit BiLD's quality–latency frontier against vanilla decoding of the full model."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    rows, color = CURVES["early-exit BiLD"]
    frontier(ax, rows(s), color, "early-exit BiLD")
    _axes(fig, ax, s, title)
    return fig


def fig7(s: pd.DataFrame, title: str = "") -> plt.Figure:
    """Early-exit BiLD against CALM (and the two-model BiLD for reference), one sweep."""
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for name, (rows, color) in CURVES.items():
        frontier(ax, rows(s), color, name)
    _axes(fig, ax, s, title)
    return fig
