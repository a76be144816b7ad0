"""notebooks/table2_lm's figure: perplexity under fallback-only BiLD against the normalized
latency of generating under the same policy (left), and generation quality against normalized
latency for BiLD with rollback, fallback-only BiLD and speculative decoding (right)."""

from __future__ import annotations

import pandas as pd

from bildlib.plots.common import METRIC_NAME, caption, frontier, legend, plt, reference_lines, smalls


def table2(t: pd.DataFrame, s: pd.DataFrame, title: str = "") -> plt.Figure:
    """t: table2.table(...); s: analysis.summarize of the generation sweep."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    bild = t[t["row"] == "BiLD"]
    a.plot(bild["gen_norm_latency"], bild["perplexity"], "o-", color="tab:blue", ms=4,
           label="BiLD, fallback only")  # fmt: skip
    for fb, x, y in zip(bild["fallback"], bild["gen_norm_latency"], bild["perplexity"], strict=True):
        a.annotate(f"α_FB {fb:g}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
    for name, marker in (("vanilla small", "v"), ("vanilla large", "x")):
        r = t[t["row"] == name]
        a.scatter(r["gen_norm_latency"], r["perplexity"], marker=marker, s=60, color="black", zorder=5,
                  label=f"{name} ({float(r['perplexity'].iloc[0]):.2f})")  # fmt: skip
    a.set_xlabel("normalized latency of generating (vanilla large = 1)")
    a.set_ylabel(f"perplexity ({t.attrs.get('n_tokens', '?')} tokens, teacher-forced)")
    a.set_title("Table 2: perplexity under the fallback policy", fontsize=9)
    legend(a)
    g = s[s["method"] == "bild"]
    with_rb = g["rollback"].notna() & ~g["label"].str.contains("exact")  # exact: a check, not a point
    frontier(b, g[with_rb], "tab:red", "BiLD (fallback + rollback)")
    frontier(b, g[g["rollback"].isna() & (g["fallback"] > 0)], "tab:blue", "BiLD (fallback only)")
    frontier(b, s[s["method"] == "speculative"], "tab:green", "speculative decoding")
    smalls(b, s)
    reference_lines(b, s, s.attrs.get("metric", "bleu"))
    b.set_ylabel(METRIC_NAME.get(s.attrs.get("metric", "bleu"), "score") + " of generating")
    b.set_title("generation", fontsize=9)
    legend(b)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    caption(fig, s)
    return fig
