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


TEXT = ("rule", "mode", "paper_row", "paper_regime", "regime", "ours", "match")


def read(path: Path) -> pd.DataFrame:
    """A table1_paper.csv (or table3-5's) as table1() / beside() returned it: text columns that
    were empty read back as "", not NaN."""
    t = pd.read_csv(path)
    return t.fillna({c: "" for c in TEXT if c in t})


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


# Tables 3-5: (table, the paper's row, its regime) -> this run's row, named in the column KEY[table]
KEY = {"Table 3": "method", "Table 4": "method", "Table 5": "row"}
SPEC = {
    ("Table 3", "vanilla", ""): "Vanilla (large)",
    ("Table 3", "speculative-sampling", ""): "Speculative (best window)",
    ("Table 3", "bild-unaligned", "match latency"): "BiLD (match latency)",
    ("Table 3", "bild-unaligned", "match score"): "BiLD (match score)",
    ("Table 4", "speculative-sampling", ""): "Speculative (best window)",
    ("Table 4", "bild-unaligned", "better score"): "BiLD (no loss)",
    ("Table 5", "vanilla-nucleus", ""): "Vanilla (large)",
    ("Table 5", "bild-aligned-nucleus", "better score"): "BiLD (better score)",
    ("Table 5", "bild-aligned-nucleus", "about the same"): "BiLD (about the same)",
    ("Table 5", "bild-aligned-nucleus", "within 1 point"): "BiLD (≈ 1 point lower)",
}


def _col(t: pd.DataFrame, name: str) -> str:
    return name if name in t else f"{name}_mean"  # Table 5's rows are means over seeds


def beside(ours: pd.DataFrame, preset: str, table: str, root: Path = REPO_ROOT) -> pd.DataFrame:
    """The paper's rows of Table 3, 4 or 5 for preset beside this run's (the notebook's table), per
    decoding mode where the table has several (Tables 3 and 4: greedy and sampled)."""
    if table not in KEY:
        raise ValueError(f"table must be one of {sorted(KEY)}, got {table!r}")
    key = KEY[table]
    if key not in ours:
        raise ValueError(f"ours lacks the column {key!r} that names {table}'s rows")
    score, speedup = _col(ours, "score"), _col(ours, "speedup")
    modes = list(dict.fromkeys(ours["mode"])) if "mode" in ours else [""]
    out = []
    for mode in modes:
        mine = ours[ours["mode"] == mode] if mode else ours
        for _, r in rows(preset, table, root).iterrows():
            regime = r["regime"] if isinstance(r["regime"], str) else ""
            name = SPEC.get((table, r["row"], regime))
            row = {"mode": mode, "paper_row": r["row"], "paper_regime": regime, "ours": name or "",
                   "paper_score": r["score"], "paper_speedup": r["speedup"]}  # fmt: skip
            if table == "Table 4":
                row |= {"paper_fallback_pct": r["fallback_pct"], "paper_rollback_pct": r["rollback_pct"]}
            m = mine[mine[key] == name] if name else mine.iloc[:0]
            if m.empty or pd.isna(m.iloc[0][score]):
                out.append(row | {"match": "not run" if m.empty else "none qualifies"})
                continue
            m = m.iloc[0]
            delta = m[score] - r["score"]
            row |= {"match": "matched", "score": m[score], "delta_vs_paper": delta,
                    "within_tolerance": bool(abs(delta) <= TOLERANCE), "speedup": m[speedup]}  # fmt: skip
            for c in ("score_lo", "score_hi", "speedup_lo", "speedup_hi", "score_std", "speedup_std"):
                row[c] = m.get(c)
            if table == "Table 4":
                row |= {"fallback_pct": m["fallback_pct"], "rollback_pct": m["rollback_pct"]}
            out.append(row)
    return pd.DataFrame(out)


def _spread(r, c: str, unit: str = "") -> str:
    if pd.notna(r.get(f"{c}_lo")):
        return f"{r[c]:.2f}{unit} [{r[f'{c}_lo']:.2f}, {r[f'{c}_hi']:.2f}]"
    if pd.notna(r.get(f"{c}_std")):
        return f"{r[c]:.2f}{unit} ± {r[f'{c}_std']:.2f}"
    return f"{r[c]:.2f}{unit}"


def beside_markdown(side: pd.DataFrame) -> str:
    """beside()'s table: ours with its 95 % interval (greedy) or ± std over seeds (sampled)."""
    head = ["mode", "paper row", "ours", "paper score", "ours", "Δ vs paper", f"within {TOLERANCE:g}",
            "paper speedup", "ours"]  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in side.iterrows():
        ps = "–" if pd.isna(r["paper_speedup"]) else f"{r['paper_speedup']:.2f}×"
        what = f"{r['paper_row']} ({r['paper_regime']})" if r["paper_regime"] else r["paper_row"]
        if r["match"] == "matched":
            yes = "yes" if r["within_tolerance"] else "no"
            cells = [_spread(r, "score"), f"{r['delta_vs_paper']:+.2f}", yes, ps, _spread(r, "speedup", "×")]
        else:
            cells = [r["match"], "", "", ps, ""]
        lines.append(
            "| " + " | ".join([r["mode"], what, r["ours"], f"{r['paper_score']:.2f}", *cells]) + " |"
        )
    return "\n".join(lines)


# arXiv v1 Table 2 (GPT-2, perplexity: lower is better): the paper's groups, as the fastest BiLD row
# whose perplexity is at most vanilla large's plus this many points
TABLE2_GROUPS = {"group 1 (minimal loss)": 0.2, "group 2 (about 1 point)": 1.0}


def table2(ours: pd.DataFrame, preset: str, root: Path = REPO_ROOT) -> pd.DataFrame:
    """The paper's Table 2 rows for preset beside table2_lm's table (ours): vanilla large, and for
    each of the paper's groups the fastest BiLD row (generation speedup) within its perplexity bar."""
    need = {"row", "perplexity", "gen_speedup", "gen_speedup_lo", "gen_speedup_hi"}
    if need - set(ours.columns):
        raise ValueError(f"ours lacks the columns {sorted(need - set(ours.columns))} (table2_lm's table)")
    van = ours[ours["row"] == "vanilla large"]
    bild = ours[ours["row"] == "BiLD"]
    out = []
    for _, r in rows(preset, "Table 2", root).iterrows():
        regime = r["regime"] if isinstance(r["regime"], str) else ""
        row = {"mode": "", "paper_row": r["row"], "paper_regime": regime, "paper_score": r["score"],
               "paper_speedup": r["speedup"]}  # fmt: skip
        if van.empty:
            out.append(row | {"ours": "", "match": "not run"})
            continue
        if not regime:
            m, name = van.iloc[0], "vanilla large"
        else:
            ok = bild[bild["perplexity"] <= van.iloc[0]["perplexity"] + TABLE2_GROUPS[regime]]
            if ok.empty:
                out.append(row | {"ours": "", "match": "none qualifies"})
                continue
            m = ok.loc[ok["gen_speedup"].idxmax()]
            name = f"BiLD α_FB {m['fallback']:g}"
        delta = m["perplexity"] - r["score"]
        out.append(row | {"ours": name, "match": "matched", "score": m["perplexity"], "delta_vs_paper": delta,
                          "within_tolerance": bool(abs(delta) <= TOLERANCE), "speedup": m["gen_speedup"],
                          "speedup_lo": m["gen_speedup_lo"], "speedup_hi": m["gen_speedup_hi"]})  # fmt: skip
    return pd.DataFrame(out)
