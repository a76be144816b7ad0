"""BiLD's speedup on a GPU projected for the paper's pairs (marked projected wherever shown).

Measured: each engine's step and 10-token call on the GPU at the paper's shapes (regime.csv) and
the calls per sentence that each configuration of Table 1 makes on the shipped pair (figures/fig4.csv,
the configurations figures/table1.csv picks by the interval rule). Projected, per sentence:

    vanilla = (tokens / n) * step(large)
    BiLD    = (drafted / n) * step(small) + (large calls / n) * call10(large)

Decoder calls only (each model's encoder runs once a sentence and is left out), and each large call
costed as a 10-token call (BiLD's verifying calls carry at most max_small_steps + 1 = 11 tokens and
usually fewer): an estimate of the decoder's share, not a measurement of BiLD on those checkpoints.
"""

from __future__ import annotations

import pandas as pd

PAIRS = {"T5": ("t5-small", "t5-large"), "mT5": ("mt5-small", "mt5-large")}  # the small one's shape
SMALL = {"BiLD (unaligned)": "small", "BiLD (aligned)": "aligned", "BiLD (student)": "student"}


def project(regime: pd.DataFrame, fig4: pd.DataFrame, table1: pd.DataFrame, engine: str = "static"):
    """One row per (pair, Table 1 configuration): the calls it makes on the shipped pair, as if a
    small model of the pair's small shape made them, and the projected speedup (a DataFrame)."""
    cost = regime.set_index("model")
    runs = fig4[fig4["repeat"] == 0]
    vanilla = runs[(runs["method"] == "vanilla") & (runs["model"] == "large")].iloc[0]
    picked = table1[(table1["rule"] == "interval") & table1["model"].isin(SMALL) & table1["fallback"].notna()]
    rows = []
    for _, t in picked.iterrows():
        run = runs[(runs["method"] == "bild") & (runs["model"] == SMALL[t["model"]])
                   & (runs["fallback"] == t["fallback"]) & (runs["rollback"] == t["rollback"])]  # fmt: skip
        if len(run) != 1:
            raise ValueError(f"figures/fig4.csv: no single run of {t['model']} at α_FB {t['fallback']}, "
                             f"α_RB {t['rollback']} (Table 1's pick); rerun make figures")  # fmt: skip
        r = run.iloc[0]
        for pair, (s, lg) in PAIRS.items():
            if not {s, lg} <= set(cost.index):
                continue
            v = vanilla["tokens"] / vanilla["n"] * cost.loc[lg, f"{engine}_ms"]
            b = (r["drafted"] / r["n"] * cost.loc[s, f"{engine}_ms"]
                 + r["large_calls"] / r["n"] * cost.loc[lg, f"{engine}_call10_ms"])  # fmt: skip
            rows.append({"pair": pair, "model": t["model"], "regime": t["regime"], "fallback": t["fallback"],
                         "rollback": t["rollback"], "small_calls": r["drafted"] / r["n"],
                         "large_calls": r["large_calls"] / r["n"],
                         "vanilla_calls": vanilla["tokens"] / vanilla["n"], "projected_speedup": v / b,
                         "measured_cpu_speedup": t["speedup"]})  # fmt: skip
    return pd.DataFrame(rows)
