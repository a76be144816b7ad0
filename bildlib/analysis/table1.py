"""Table 1 from a sweep's summary: the fastest configuration of each model within each quality
regime, under both rules (the point estimate, the interval), the thresholds it chose, and Fig.
5's picks among the ablations."""

from __future__ import annotations

import pandas as pd

from bildlib.analysis.summary import best_row, vanilla_large

REGIMES = (("no loss", 0.2), ("≤ 0.5 point", 0.5), ("≤ 1 point", 1.0))
# How a configuration qualifies for a regime "within tol of vanilla large":
RULES = {
    # the headline: the 95 % paired-bootstrap interval of its score minus vanilla large's lies
    # above -tol, i.e. at 95 % confidence it loses at most tol (bildlib.analysis.intervals)
    "interval": "lower end of the 95 % interval of (score - vanilla large's) >= -tol",
    # the paper's: its measured score is at least vanilla large's minus tol
    "point": "score >= vanilla large's score - tol",
}
SPREAD = ["score_lo", "score_hi", "speedup_lo", "speedup_hi", "delta", "delta_lo", "delta_hi"]  # summarize's


def spread_of(s: pd.DataFrame) -> list[str]:
    """The SPREAD columns a summarize() table has (none when it was made without intervals)."""
    return [c for c in SPREAD if c in s]


def rules_of(s: pd.DataFrame) -> tuple[str, ...]:
    """The RULES a summarize() table can decide on: both with intervals, else only "point"."""
    return ("interval", "point") if "delta_lo" in s else ("point",)


def within(b: pd.DataFrame, vanilla_score: float, tol: float, rule: str = "interval") -> pd.Series:
    """Which configurations of summarize() table b qualify for "within tol" under rule (RULES)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {', '.join(RULES)}, got {rule!r}")
    if rule == "interval":
        if "delta_lo" not in b:
            raise ValueError("rule 'interval' needs summarize(..., intervals=True)")
        return b["delta_lo"] >= -tol - 1e-9
    return b["score"] >= vanilla_score - tol - 1e-9


TABLE1_MODELS = {"small": "BiLD (unaligned)", "aligned": "BiLD (aligned)", "student": "BiLD (student)"}


def summary_table(s: pd.DataFrame, regimes=REGIMES, rules: tuple | None = None) -> pd.DataFrame:
    """Paper Table 1 from summarize(): vanilla large's score, and for unaligned and aligned BiLD
    (and BiLD with the student where the sweep has it: docs/data-and-models.md, Students)
    the best speedup that stays within 0.2 of vanilla ("no loss") and within 1 point (the
    paper's two regimes), and within 0.5 (this project's benchmark bar), under each rule of
    RULES (column `rule`; None: both where summarize computed intervals, else "point"); with the
    95 % intervals where summarize computed them."""
    van = vanilla_large(s)
    vanilla_score = float(van["score"].mean())
    first, spread = van.sort_values("repeat").iloc[0], spread_of(s)
    rows = []
    for rule in rules or rules_of(s):
        rows.append({"rule": rule, "model": "Vanilla (large)", "regime": "", "score": vanilla_score,
                     "speedup": 1.0} | first[spread].to_dict())  # fmt: skip
        for m, name in TABLE1_MODELS.items():
            b = s[(s["method"] == "bild") & (s["model"] == m) & s["fallback"].notna() & s["rollback"].notna()]
            if m == "student" and b.empty:
                continue  # the student is built, not shipped: a row only where it ran
            for regime, tol in regimes:
                r = best_row(b[within(b, vanilla_score, tol, rule)], "speedup") if not b.empty else None
                row = {"rule": rule, "model": name, "regime": regime}
                if r is not None:
                    row |= {"score": r["score"], "speedup": r["speedup"]} | r[spread].to_dict()
                    row |= {
                        "fallback": r["fallback"],
                        "rollback": r["rollback"],
                        "verify_end": r["verify_end"],
                    }
                    row |= {"fallback_pct": r["fallback_pct"], "rollback_pct": r["rollback_pct"]}
                rows.append(row)
    return pd.DataFrame(rows)


def thresholds_of(table: pd.DataFrame, model: str, regime: str, rule: str = "point") -> tuple[float, float]:
    """(α_FB, α_RB) of a summary_table row, e.g. ("BiLD (aligned)", "≤ 1 point"), under rule
    (RULES; "point", the paper's, by default: a figure that shows one configuration shows the
    paper's pick)."""
    t = table[table["rule"] == rule] if "rule" in table else table
    row = t.set_index(["model", "regime"]).loc[(model, regime)]
    if pd.isna(row.get("fallback")):
        raise ValueError(
            f"no {model} configuration reaches the {regime!r} regime ({rule} rule) in this sweep"
        )
    return float(row["fallback"]), float(row["rollback"])


def best_quality(s: pd.DataFrame, model: str) -> str:
    """The label of the highest-scoring BiLD configuration with small model `model` in a
    summarize() table (the faster one on a tie)."""
    b = s[(s["method"] == "bild") & (s["model"] == model)]
    if b.empty:
        raise ValueError(f"no BiLD configuration with the {model} small model in this sweep")
    return str(b.sort_values(["score", "speedup"], ascending=False)["label"].iloc[0])


ABLATIONS = {  # Fig. 5's variants of aligned BiLD: name -> which rows of a summarize() table
    "BiLD": lambda b: b[b["fallback"].notna() & b["rollback"].notna()],
    "No rollback": lambda b: b[b["fallback"].notna() & b["rollback"].isna()],
    "No fallback (window)": lambda b: b[b["fallback"].isna()],
}


def ablation_best(s: pd.DataFrame, model: str = "aligned", tolerances=(0.5, 1.0)) -> pd.DataFrame:
    """Fig. 5's numbers: for each variant (ABLATIONS) its best-scoring configuration, and its
    fastest within each tolerance of vanilla large under each rule (RULES), with the intervals."""
    b = s[(s["method"] == "bild") & (s["model"] == model)]
    v = float(vanilla_large(s)["score"].mean())
    keep = ["label", "score", "speedup", "fallback", "rollback", "window", *spread_of(s)]
    rows = []
    for name, pick in ABLATIONS.items():
        g = pick(b)
        top = best_row(g, "score")
        rows.append({"variant": name, "pick": "best score"} | ({} if top is None else top[keep].to_dict()))
        for rule in rules_of(s):
            for tol in tolerances:
                r = best_row(g[within(g, v, tol, rule)], "speedup") if not g.empty else None
                pick_name = f"fastest within {tol:g} ({rule} rule)"
                rows.append({"variant": name, "pick": pick_name} | ({} if r is None else r[keep].to_dict()))
    return pd.DataFrame(rows)
