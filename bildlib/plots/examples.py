"""Fig. 9: the examples BiLD repairs (picked from a sweep's rows), as HTML for the notebook and as
a figure, BiLD's tokens from the large model highlighted."""

from __future__ import annotations

import html

import matplotlib.pyplot as plt
import pandas as pd

from bildlib import plots  # noqa: F401  (sets matplotlib's file-only backend first)


def repair_examples(df: pd.DataFrame, label: str, k: int = 3) -> list[dict]:
    """Fig 9: the k examples where `label` (a BiLD run) gains most sentence BLEU over vanilla
    small while taking some tokens from the large model; each with the outputs of reference,
    large, small and BiLD, BiLD's as (token text, "S" | "L") pieces."""
    from sacrebleu.metrics import BLEU

    sb = BLEU(effective_order=True)
    by = {lab: g.set_index("id") for lab, g in df.groupby("label")}
    bild_rows, small, large = by[label], by["vanilla-" + by[label]["model"].iloc[0]], by["vanilla-large"]
    gain = []
    for i, r in bild_rows.iterrows():
        if "L" not in r["trace"] or r["output"] == small.loc[i, "output"]:
            continue
        g = sb.sentence_score(r["output"], [r["reference"]]).score
        g -= sb.sentence_score(small.loc[i, "output"], [r["reference"]]).score
        gain.append((g, i))
    out = []
    for _, i in sorted(gain, reverse=True)[:k]:
        r = bild_rows.loc[i]
        out.append(
            {
                "id": int(i),
                "source": r["source"],
                "reference": r["reference"],
                "large": large.loc[i, "output"],
            }
            | {"small": small.loc[i, "output"], "small_model": r["model"], "bild": r["output"]}
            | {"ids": list(r["output_ids"])}
            | {"trace": r["trace"]}
        )
    return out


def token_pieces(tokenizer, ids: list[int], trace: str) -> list[tuple[str, str]]:
    """(text, "S" | "L") per output token, spaces restored from sentencepiece's "▁"."""
    pieces = tokenizer.convert_ids_to_tokens(list(ids))
    special = set(tokenizer.all_special_tokens)
    return [(p.replace("▁", " "), who) for p, who in zip(pieces, trace, strict=True) if p not in special]


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
                    (_row_name(r, "small"), html.escape(r["small"])),
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
            line = f"{_row_name(r, k)}: {r[k]}"
            line = line if len(line) <= 150 else line[:149] + "…"  # one line each
            ax.text(0, y, line, fontsize=8, va="top", transform=ax.transAxes)
            y -= step
        ax.text(0, y, "BiLD:", fontsize=8, va="top", transform=ax.transAxes)
        x = 0.06
        for t, who in runs(r["bild_tokens"]):  # one text per run of one model's tokens: words stay whole
            txt = ax.text(
                x, y, t, fontsize=8, va="top", transform=ax.transAxes,
                color="tab:red" if who == "L" else "black", fontweight="bold" if who == "L" else "normal",
            )  # fmt: skip
            fig.canvas.draw()
            bb = txt.get_window_extent().transformed(ax.transAxes.inverted())
            x = bb.x1
        y -= 2 * step
    ax.text(0, y, "BiLD's tokens from the large model in red", fontsize=7, va="top", color="dimgray",
            transform=ax.transAxes)  # fmt: skip
    return fig


def runs(tokens: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Consecutive (text, who) pieces of one model joined: [("Japane", "S"), ("se", "S")] ->
    [("Japanese", "S")]."""
    out: list[tuple[str, str]] = []
    for t, who in tokens:
        if out and out[-1][1] == who:
            out[-1] = (out[-1][0] + t, who)
        else:
            out.append((t, who))
    return out


def _row_name(r: dict, k: str) -> str:
    """A fig9 row's name: the small model's says which small model it is ("small (aligned)")."""
    return f"small ({r['small_model']})" if k == "small" and r.get("small_model") else k
