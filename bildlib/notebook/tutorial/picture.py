"""The tutorial's pictures: one BiLD decode told token by token (record.Story) above its model
calls on a time line, and the α_FB sweep (BLEU against fallback rate and latency)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # files only; the notebook displays the saved PNG
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from bildlib.notebook.tutorial.record import Story  # noqa: E402

COLOR = {"S": "#4C72B0", "L": "#DD8452", "dropped": "#9a9a9a", "discarded": "#c44e52"}
NAME = {"S": "small model", "L": "large model"}


def _box(ax, x: float, y: float, text: str, face: str, edge: str = "none", style: str = "-") -> None:
    ax.add_patch(Rectangle((x + 0.05, y), 0.9, 0.9, facecolor=face, edgecolor=edge, linestyle=style, lw=1.5))
    ax.text(x + 0.5, y + 0.45, text, ha="center", va="center", rotation=90, fontsize=9,
            color="white" if edge == "none" else "black")  # fmt: skip


def _rows(items: list[tuple[float, float]]) -> list[int]:
    """A row (1, 2, ...) for each x interval [a, b), so that no two in one row overlap."""
    ends: list[float] = []  # per row: where its last interval ends
    rows = []
    for a, b in items:
        r = next((i for i, e in enumerate(ends) if e <= a), len(ends))
        ends[r:r + 1] = [b]
        rows.append(r + 1)
    return rows


def trace_figure(st: Story, piece, title: str = "") -> plt.Figure:
    """Top: the output, one box per token coloured by the model that wrote it; above it, greyed,
    the small tokens a fallback dropped (dashed, with p_S) and those a rollback discarded (red
    edge), at the positions they held. Bottom: every model call on a time line, each large call
    labelled with the tokens it ran. piece(id) -> the token's text."""
    out, writer = st.seq[1:], st.writer
    extra = [("dropped", pos, [tok], p) for pos, tok, p in st.dropped]
    extra += [("discarded", m, toks, None) for m, toks in st.discarded if toks]
    extra.sort(key=lambda e: e[1])
    label = {"dropped": "fallback, p_S={:.2f}", "discarded": "rollback at {}"}
    text = [label[k].format(p if k == "dropped" else pos) for k, pos, _, p in extra]
    spans = [(pos, pos + max(len(toks), 0.14 * len(t)))
             for (_, pos, toks, _), t in zip(extra, text, strict=True)]
    rows = _rows(spans)  # a label is about 0.14 token widths a character
    height = 1 + max(rows, default=0)
    n = max([len(out)] + [pos + len(toks) for _, pos, toks, _ in extra])
    fig, (top, low) = plt.subplots(2, 1, figsize=(max(7.0, 0.42 * n + 2), 2.2 + 1.2 * height),
                                   gridspec_kw={"height_ratios": [1.3 * height + 0.6, 1.6]})  # fmt: skip
    for i, (t, w) in enumerate(zip(out, writer, strict=True)):
        _box(top, i, 0, piece(t), COLOR[w])
    for (kind, pos, toks, _), r, t in zip(extra, rows, text, strict=True):
        for j, tok in enumerate(toks):
            edge, style = (COLOR["dropped"], "--") if kind == "dropped" else (COLOR["discarded"], "-")
            _box(top, pos + j, 1.3 * r, piece(tok), "#eeeeee", edge, style)
        top.text(pos + 0.05, 1.3 * r + 0.93, t, fontsize=7.5, va="bottom", color=COLOR[kind])
    top.set_xlim(-0.1, n + 0.1)
    top.set_ylim(-0.1, 1.3 * height + 0.1)
    top.set_yticks([0.45], ["output"])
    top.set_xticks([i + 0.5 for i in range(n)], [str(i) for i in range(n)], fontsize=7)
    top.set_xlabel("output position")
    for s in ("top", "right", "left"):
        top.spines[s].set_visible(False)
    handles = [Rectangle((0, 0), 1, 1, color=COLOR[w]) for w in ("S", "L")]
    handles += [Rectangle((0, 0), 1, 1, facecolor="#eeeeee", edgecolor=COLOR["dropped"], ls="--"),
                Rectangle((0, 0), 1, 1, facecolor="#eeeeee", edgecolor=COLOR["discarded"])]  # fmt: skip
    top.legend(handles, ["written by the small model", "written by the large model",
                         "dropped by a fallback", "discarded by a rollback"],
               loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)  # fmt: skip
    if title:
        top.set_title(title, fontsize=10, loc="left")
    for who, t0, t1, k in st.calls:
        y = 1 if who == "L" else 0
        low.barh(y, 1e3 * (t1 - t0), left=1e3 * t0, height=0.6, color=COLOR[who])
        if who == "L":
            low.text(1e3 * (t0 + t1) / 2, y + 0.4, f"{k}", ha="center", va="bottom", fontsize=7)
    low.set_yticks([0, 1], [NAME["S"], NAME["L"] + "\n(tokens per call)"], fontsize=8)
    low.set_ylim(-0.5, 1.9)
    low.set_xlabel("time (ms)")
    small = sum(w == "S" for w, *_ in st.calls)
    large = sum(w == "L" for w, *_ in st.calls)
    calls = f"{small} small-model call{'s' * (small != 1)}, {large} large-model call{'s' * (large != 1)}"
    low.set_title(f"{calls} (each model's first call also encodes the source)", fontsize=9, loc="left")
    fig.tight_layout()
    return fig


def sweep_figure(rows, large_bleu: float, title: str = "") -> plt.Figure:
    """BLEU against fallbacks per 100 tokens and against latency (normalized by vanilla large),
    one point per α_FB. rows: a DataFrame with alpha_fb, bleu, fallback_pct, norm_latency."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    names = ("fallbacks per 100 output tokens", "latency / vanilla large")
    for ax, x, name in zip(axes, ("fallback_pct", "norm_latency"), names, strict=True):
        ax.plot(rows[x], rows["bleu"], "o-", color=COLOR["S"])
        for _, r in rows.iterrows():
            ax.annotate(f"{r['alpha_fb']:g}", (r[x], r["bleu"]), textcoords="offset points",
                        xytext=(4, -10), fontsize=8)  # fmt: skip
        ax.axhline(large_bleu, color=COLOR["L"], ls="--", lw=1, label="vanilla large")
        ax.set_xlabel(name)
    axes[1].axvline(1.0, color="#999999", lw=0.8)
    axes[0].set_ylabel("BLEU")
    axes[1].legend(fontsize=8, frameon=False, loc="lower right")
    fig.suptitle(title or "BiLD over α_FB (labels: α_FB)", fontsize=10, x=0.01, ha="left")
    fig.tight_layout()
    return fig
