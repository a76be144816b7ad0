"""The paper's own numbers beside a run of one of its presets (data/paper/reported.csv: Kim et al.,
NeurIPS 2023 Tables 1, 3-5, and arXiv 2302.07863v1 Table 2; its README cites both).

`table1(ours, preset)` puts each of the paper's Table 1 rows for the preset's dataset and model next
to this run's row of the same model and regime, under both rules (analysis.RULES): the paper's
(`point`: the measured score within tol of vanilla) and this project's (`interval`). The paper's
"minimal loss" is matched with this project's "no loss" (within 0.2) and "within 1 point" with
"≤ 1 point". Each row says `matched`, `none qualifies` (the regime has no configuration in this run)
or `not run` (this run has no such model), so no paper row is dropped. Nothing is typed: every
paper number is read from the file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT

REPORTED = "data/paper/reported.csv"
# preset -> the paper's (dataset, model) in reported.csv
PRESETS = {
    "iwslt2017-mt5": ("iwslt2017-de-en", "mt5"),
    "wmt2014-mt5": ("wmt2014-de-en", "mt5"),
    "xsum-t5": ("xsum", "t5"),
    "cnndm-t5": ("cnn_dailymail", "t5"),
    "wikitext2-gpt2": ("wikitext-2", "gpt2"),
}
MODELS = {
    "vanilla": "Vanilla (large)",
    "bild-unaligned": "BiLD (unaligned)",
    "bild-aligned": "BiLD (aligned)",
}
REGIMES = {"minimal loss": "no loss", "within 1 point": "≤ 1 point"}
TOLERANCE = 1.0  # points: a score within this of the paper's is "within the paper's tolerance"


def covers(preset: str, table: str, root: Path = REPO_ROOT) -> bool:
    """The paper reports this table for the preset's dataset and model."""
    return preset in PRESETS and not rows(preset, table, root).empty


def rows(preset: str, table: str, root: Path = REPO_ROOT) -> pd.DataFrame:
    """The paper's rows of one table for a preset's dataset and model."""
    if preset not in PRESETS:
        raise ValueError(f"preset {preset!r} is not one of the paper's: {sorted(PRESETS)}")
    f = root / REPORTED
    if not f.is_file():
        raise FileNotFoundError(f"{REPORTED}: the paper's numbers, missing from this checkout")
    p = pd.read_csv(f)
    missing = {"source", "table", "dataset", "model", "row", "regime", "score", "speedup"} - set(p.columns)
    if missing:
        raise ValueError(f"{REPORTED} lacks the columns {sorted(missing)}")
    dataset, model = PRESETS[preset]
    return p[(p["table"] == table) & (p["dataset"] == dataset) & (p["model"] == model)].reset_index(drop=True)


def _ours(t: pd.DataFrame, rule: str, model: str, regime: str | None):
    m = (t["rule"] == rule) & (t["model"] == model)
    m &= t["regime"].isna() | (t["regime"] == "") if regime is None else t["regime"] == regime
    return t[m]


def table1(ours: pd.DataFrame, preset: str, root: Path = REPO_ROOT) -> pd.DataFrame:
    """The paper's Table 1 rows for preset beside this run's (ours: analysis.summary_table's)."""
    need = {"rule", "model", "regime", "score", "speedup", "score_lo", "score_hi", "speedup_lo", "speedup_hi"}
    if need - set(ours.columns):
        raise ValueError(
            f"ours lacks the columns {sorted(need - set(ours.columns))} (a summary_table with intervals)"
        )
    out = []
    for rule in ("point", "interval"):
        for _, r in rows(preset, "Table 1", root).iterrows():
            regime = REGIMES.get(r["regime"]) if isinstance(r["regime"], str) else None
            model = MODELS.get(r["row"], r["row"])
            mine = _ours(ours, rule, model, regime)
            row = {
                "rule": rule,
                "paper_row": r["row"],
                "paper_regime": r["regime"] if regime else "",
                "regime": regime or "",
                "paper_score": r["score"],
                "paper_speedup": r["speedup"],
            }
            if mine.empty:
                out.append(row | {"match": "not run"})
                continue
            m = mine.iloc[0]
            if pd.isna(m["score"]):
                out.append(row | {"match": "none qualifies"})
                continue
            delta = m["score"] - r["score"]
            in_ci = (
                bool(m["speedup_lo"] <= r["speedup"] <= m["speedup_hi"]) if pd.notna(r["speedup"]) else None
            )
            out.append(
                row
                | {
                    "match": "matched",
                    "score": m["score"],
                    "score_lo": m["score_lo"],
                    "score_hi": m["score_hi"],
                    "delta_vs_paper": delta,
                    "within_tolerance": bool(abs(delta) <= TOLERANCE),
                    "speedup": m["speedup"],
                    "speedup_lo": m["speedup_lo"],
                    "speedup_hi": m["speedup_hi"],
                    "paper_speedup_in_interval": in_ci,
                }
            )
    return pd.DataFrame(out)


def markdown(side: pd.DataFrame) -> str:
    """The table as the notebook shows it: paper, ours [95 %], Δ; paper speedup, ours [95 %]."""
    head = [
        "rule",
        "paper row",
        "regime",
        "paper score",
        "ours [95 %]",
        "Δ vs paper",
        f"within {TOLERANCE:g}",
        "paper speedup",
        "ours [95 %]",
        "paper's in ours",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in side.iterrows():
        ps = "–" if pd.isna(r["paper_speedup"]) else f"{r['paper_speedup']:.2f}×"
        if r["match"] != "matched":
            cells = [r["match"], "", "", ps, "", ""]
        else:
            yes = {True: "yes", False: "no"}
            cells = [
                f"{r['score']:.2f} [{r['score_lo']:.2f}, {r['score_hi']:.2f}]",
                f"{r['delta_vs_paper']:+.2f}",
                yes[r["within_tolerance"]],
                ps,
                f"{r['speedup']:.2f}× [{r['speedup_lo']:.2f}, {r['speedup_hi']:.2f}]",
                yes.get(r["paper_speedup_in_interval"], "–"),
            ]
        what = f"{r['paper_row']} ({r['paper_regime']})" if r["paper_regime"] else r["paper_row"]
        lines.append(
            "| " + " | ".join([r["rule"], what, r["regime"], f"{r['paper_score']:.2f}", *cells]) + " |"
        )
    return "\n".join(lines)
