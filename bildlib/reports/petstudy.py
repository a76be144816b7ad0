"""PET's ablations at this project's scale (notebooks/pet.ipynb), with PET's reported figures beside
ours: Jeon, Park, Kim, Kang, *PET: Parameter-efficient Knowledge Distillation on Transformer*,
PLoS ONE 18(7): e0288060, 2023.

Our runs (train.config.PET_ABLATIONS, `make models-candidates`) share PET's four-layer shape at the
shipped small model's width, distil the shipped large model on its greedy outputs, and differ only
in what they share and whether they warm up; the measurements are smallmodels.agreements' and
smallmodels.step_ms'.
"""

from __future__ import annotations

import pandas as pd

# label -> what the run shares (module docstring; models.pet)
ABLATIONS = {
    "none": "no sharing",
    "pairs": "layer pairs (L1, L3), (L2, L4)",
    "pairs-encqk": "layer pairs + encoder Q/K",
    "pairs-decq": "layer pairs + decoder Q_self = Q_cross",
    "full": "layer pairs + encoder Q/K + decoder Q",
    "full-warmup": "all three + PET's warm-up",
}
# BLEU PET reports for its four-layer model's pair ablation (IWSLT'14, its Table 2 and the matrix
# pairs of its Tables 3-4), as this project read them; the paper's full text was not at hand to
# check them here. The abstract's figures for PET as a whole: IWSLT'14 EN->DE, 81.20 % less
# memory, 45.15 % faster inference, 0.27 BLEU below the uncompressed model.
REPORTED = {"none": 34.24, "pairs": 34.57, "pairs-encqk": 34.62, "pairs-decq": 34.51}
RUNS = {k: f"data/checkpoints/multi30k-pet-{k}" for k in ABLATIONS}


def table(profile: pd.DataFrame) -> pd.DataFrame:
    """The ablation rows of a smallmodels profile (labels of ABLATIONS), in ABLATIONS' order, with
    what each shares, our BLEU and parameters and their change against "none", and PET's reported
    BLEU and its change against PET's own "none" where it reports one."""
    p = profile.set_index("label")
    rows = [k for k in ABLATIONS if k in p.index]
    if not rows:
        raise ValueError(f"the profile has none of PET's ablations ({', '.join(ABLATIONS)})")
    t = p.loc[rows].reset_index()
    t.insert(1, "shares", t["label"].map(ABLATIONS))
    base = p.loc["none"] if "none" in p.index else None
    t["bleu_vs_none"] = t["bleu"] - base["bleu"] if base is not None else float("nan")
    t["params_vs_none"] = t["params_m"] / base["params_m"] if base is not None else float("nan")
    t["pet_reported_bleu"] = t["label"].map(REPORTED)
    t["pet_reported_vs_none"] = t["pet_reported_bleu"] - REPORTED["none"]
    t["pet_reported_vs_none"] = t["pet_reported_vs_none"].where(t["pet_reported_bleu"].notna())
    cols = ["label", "shares", "params_m", "params_vs_none", "bleu", "bleu_vs_none", "pet_reported_bleu",
            "pet_reported_vs_none", "agreement", "ece"]  # fmt: skip
    return t[cols + [c for c in t if c.startswith("step_ms_")]]


def checks(t: pd.DataFrame) -> dict:
    """What the ablation table should show whatever the scores: a run that shares weights has
    fewer parameters than the run that shares none, and adding a matrix pair to the layer pairs
    removes more. {} items are only made for the runs present."""
    p = t.set_index("label")["params_m"]
    out = {"runs": list(p.index)}
    if "none" in p:
        out["sharing_has_fewer_parameters"] = bool((p.drop("none") < p["none"]).all())
    if "pairs" in p:
        more = [k for k in ("pairs-encqk", "pairs-decq", "full", "full-warmup") if k in p]
        out["matrix_pairs_remove_more"] = bool((p[more] < p["pairs"]).all()) if more else None
    return out


def block(root, folder: str = "figures/pet") -> str:
    """PET's ablation table for the report (bildlib.reports.readme), from the committed pet.csv and its
    _checks.json: ours beside PET's reported BLEU."""
    from bildlib.analysis.tables import md_table, num, read_csv, read_json, valid

    t, c = read_csv(root, f"{folder}/pet.csv"), read_json(root, f"{folder}/pet_checks.json")
    valid(t, ["label", "shares", "params_m", "bleu", "agreement", "ece"])
    rows = [[f"`{r['label']}`", r["shares"], f"{r['params_m']:.2f} M", f"{r['bleu']:.2f}",
             num(r["bleu_vs_none"], "+.2f"), num(r["pet_reported_bleu"]),
             num(r["pet_reported_vs_none"], "+.2f"), f"{100 * r['agreement']:.1f} %", f"{r['ece']:.3f}",
             num(r.get("step_ms_bfloat16"), ".3f")] for _, r in t.iterrows()]  # fmt: skip
    head = ["run", "shares", "parameters", "BLEU", "Δ vs none", "PET's BLEU", "PET's Δ", "agreement", "ECE",
            "ms / step (bf16)"]  # fmt: skip
    checks = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in c.items() if k != "runs")
    return md_table(head, rows) + f"\n\nChecks: {checks}.\n"
