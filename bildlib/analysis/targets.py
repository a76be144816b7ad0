"""The speed benchmarks' numbers (docs/results.md), read from `make bench`'s two committed peers runs (all
of Multi30k val, one per dtype): which dtype is the default, and whether BiLD reaches its three targets.

- dtype: the default is "auto" (bf16 where the CPU computes it natively) if vanilla large keeps
  its BLEU within DTYPE_TOL of float32 and decodes faster (models.resolve_dtype).
- targets, per dtype, every speedup against vanilla large on the same engine in the same run:
  aligned BiLD within TOL BLEU of vanilla large at >= 2.0x; lossless BiLD at <= 0.8x the latency
  of HF assisted generation (its fastest tuned setting); verify_end_below within TOL faster than
  verify_end within TOL by >= 15 %, and also against the fastest verify_end row whose BLEU is at
  least its own (at equal BLEU).
- the student's bars, where the run has its rows (docs/data-and-models.md, Students): its BiLD
  within TOL BLEU at >= 2.0x, and lossless at >= 1.8x.
- breakdown: the per-call cost at the α_FB of the best verify_end_below row, for each end rule.
"""

from __future__ import annotations

import pandas as pd

from bildlib.analysis.tables import read_csv, read_json, valid

RUNS = {"bfloat16": "figures/peers/val", "float32": "figures/peers/val-float32"}  # make bench
TOL, DTYPE_TOL = 0.5, 0.1
GOALS = {"speedup": 2.0, "lossless_vs_assisted": 0.8, "end_rule_gain": 1.15, "student_speedup": 2.0,
         "student_lossless": 1.8}  # fmt: skip
AT_MOST = {"lossless_vs_assisted"}  # goals a value meets from below; the others from above
MARK = {True: "reached", False: "**not reached**"}


LEAN = ("lean", "native")  # the lean engines: Python ops, or with its C++ pieces (models.engine)


def goal_text(key: str) -> str:
    return ("≤ " if key in AT_MOST else "≥ ") + f"{GOALS[key]:g}×"


def _bild(every: pd.DataFrame, model: str = "aligned") -> tuple[pd.DataFrame, float]:
    """(the run's lean BiLD rows with small model `model` and their end rule, vanilla large's
    score); the values the blocks show are checked present and finite (report._valid names the
    file and column)."""
    valid(every, ["label", "method", "model", "ran_on", "score", "ms"])
    lean = (every["method"] == "bild") & every["ran_on"].isin(LEAN) & (every["model"] == model)
    valid(every, ["fallback", "rollback", "speedup_same_engine", "speedup_lo", "speedup_hi"], lean)
    b = every[lean]
    rule = b.apply(end_rule, axis=1) if not b.empty else pd.Series(dtype=str)  # apply gives a frame on none
    return b.assign(rule=rule), vanilla_score(every)


def _within(rows: pd.DataFrame, v: float, tol: float = TOL) -> pd.DataFrame:
    return rows[rows["score"] >= v - tol - 1e-9]


def fastest(bild: pd.DataFrame, lossless: pd.Series, v: float, tol: float = TOL) -> dict[str, pd.Series]:
    """{"lossless": the fastest lossless row, "best": the fastest other row within tol BLEU of v},
    each only where one exists (the small models' and the quantized larges' tables)."""
    picks = {"lossless": bild[lossless], "best": _within(bild[~lossless], v, tol)}
    return {k: p.loc[p["speedup"].idxmax()] for k, p in picks.items() if not p.empty}


def end_rule(r: pd.Series) -> str:
    """The end rule of a BiLD row of peers_all.csv."""
    if "-exact" in r["label"]:
        return "exact"
    if pd.notna(r.get("verify_end_below")):
        return f"verify_end_below {r['verify_end_below']:g}"
    return "verify_end" if r["verify_end"] in (True, "True") else "Algorithm 1"


def vanilla_score(every: pd.DataFrame) -> float:
    lean = every[(every["method"] == "vanilla") & (every["model"] == "large") & every["ran_on"].isin(LEAN)]
    return float(lean["score"].iloc[0])


def targets(every: pd.DataFrame, tol: float = TOL) -> dict:
    """The three benchmarks of one run (its peers_all.csv); each with its measured value, its goal
    and the row(s) it came from."""
    b, v = _bild(every)
    ok = _within(b, v, tol)
    best = ok[ok["rule"] != "exact"].nsmallest(1, "ms")
    exact = ok[ok["rule"] == "exact"].nsmallest(1, "ms")
    tuned = every[(every["method"] == "assisted") & every["label"].str.contains("-n\\d", regex=True)]
    below = ok[ok["rule"].str.startswith("verify_end_below")].nsmallest(1, "ms")
    verify = ok[ok["rule"] == "verify_end"].nsmallest(1, "ms")
    out = {"vanilla_score": v, "tol": tol}
    if not best.empty:
        r = best.iloc[0]
        out["speedup"] = {"value": r["speedup_same_engine"], "lo": r["speedup_lo"], "hi": r["speedup_hi"],
                          "row": r["label"], "rule": r["rule"], "delta": r["score"] - v}  # fmt: skip
    if not exact.empty and not tuned.empty:
        e, a = exact.iloc[0], tuned.nsmallest(1, "ms").iloc[0]
        out["lossless_vs_assisted"] = {"value": e["ms"] / a["ms"], "row": e["label"], "against": a["label"]}
    if not below.empty and not verify.empty:
        n, w = below.iloc[0], verify.iloc[0]
        out["end_rule_gain"] = {"value": w["ms"] / n["ms"], "row": n["label"], "against": w["label"],
                                "delta": n["score"] - v, "against_delta": w["score"] - v}  # fmt: skip
        equal = b[(b["rule"] == "verify_end") & (b["score"] >= n["score"] - 1e-9)].nsmallest(1, "ms")
        if not equal.empty:
            q = equal.iloc[0]
            out["end_rule_gain_equal_bleu"] = {"value": q["ms"] / n["ms"], "against": q["label"],
                                               "against_delta": q["score"] - v}  # fmt: skip
    s, _ = _bild(every, "student")  # the student's bars, where the run has its rows
    for key, rows in (("student_speedup", _within(s[s["rule"] != "exact"], v, tol)),
                      ("student_lossless", s[s["rule"] == "exact"])):  # fmt: skip
        if not rows.empty:
            r = rows.loc[rows["speedup_same_engine"].idxmax()]
            out[key] = {"value": r["speedup_same_engine"], "lo": r["speedup_lo"], "hi": r["speedup_hi"],
                        "row": r["label"], "rule": r["rule"], "delta": r["score"] - v}  # fmt: skip
    for k, goal in GOALS.items():
        if k in out:
            x = out[k]["value"]
            met = x <= goal if k in AT_MOST else x >= goal
            out[k]["goal"], out[k]["met"] = goal, bool(met)
    return out


def breakdown(every: pd.DataFrame) -> pd.DataFrame:
    """Per-call cost of each end rule at the α_FB and α_RB of the fastest verify_end_below row
    within TOL (else the fastest one): where a sentence's time goes."""
    b, v = _bild(every)
    below = b[b["rule"].str.startswith("verify_end_below")]
    if below.empty:
        return pd.DataFrame()
    ok = _within(below, v)
    pick = (ok if not ok.empty else below).nsmallest(1, "ms").iloc[0]
    at = b[(b["fallback"] == pick["fallback"]) & (b["rollback"] == pick["rollback"])]
    cols = ["rule", "score", "ms", "speedup_same_engine", "large_calls_per_sentence",
            "small_calls_per_sentence", "loop_pct", "fallback_pct", "rollback_pct"]  # fmt: skip
    return at[cols].assign(delta=at["score"] - v, fallback=pick["fallback"], rollback=pick["rollback"])


def dtype_choice(bf16: pd.DataFrame, fp32: pd.DataFrame, bf16_ms: float, fp32_ms: float) -> dict:
    """Vanilla large in both dtypes (lean engine, all of val, each against its own run), and
    whether "auto" qualifies as the default: BLEU within DTYPE_TOL of float32 and faster."""
    b, f = vanilla_score(bf16), vanilla_score(fp32)
    return {"bf16_score": b, "fp32_score": f, "delta": b - f, "bf16_ms": bf16_ms, "fp32_ms": fp32_ms,
            "auto_is_default": bool(abs(b - f) <= DTYPE_TOL and bf16_ms < fp32_ms)}  # fmt: skip


def committed_choice(root) -> tuple[dict, dict[str, dict]]:
    """(dtype_choice's verdict, {dtype: its run's checks}), from make bench's two committed runs."""
    runs = {k: (read_csv(root, f"{f}/peers_all.csv"), read_json(root, f"{f}/peers_checks.json"))
            for k, f in RUNS.items()}  # fmt: skip
    (b, cb), (f, cf) = runs["bfloat16"], runs["float32"]
    return dtype_choice(b, f, cb["baseline ms"], cf["baseline ms"]), {"bfloat16": cb, "float32": cf}


def default_dtype(root) -> str:
    """The dtype make bench's committed runs make the default: "bfloat16" where `auto` won."""
    return "bfloat16" if committed_choice(root)[0]["auto_is_default"] else "float32"


def why_not(bd: pd.DataFrame, vanilla_ms: float, goal: float = GOALS["speedup"]) -> str | None:
    """The budget arithmetic behind the speedup target, from a breakdown: what one added large
    call costs at the end, and how many the target leaves over Algorithm 1."""
    by = {r["rule"]: r for _, r in bd.iterrows()}
    alg, ver = by.get("Algorithm 1"), by.get("verify_end")
    below = next((r for k, r in by.items() if k.startswith("verify_end_below")), None)
    if alg is None or ver is None or below is None:
        return None
    added = ver["large_calls_per_sentence"] - alg["large_calls_per_sentence"]
    per_call = (ver["ms"] - alg["ms"]) / added
    room = (vanilla_ms / goal - alg["ms"]) / per_call
    return (f"Checking the end costs {per_call:.1f} ms per added large call (the call, and the small "
            f"model's redrafting after its rollbacks; `verify_end` adds {added:.2f} calls per sentence). "
            f"{goal:.1f}× means {vanilla_ms / goal:.1f} ms per sentence, which leaves room for "
            f"{room:.2f} added calls over Algorithm 1 at this α_FB; `{below['rule']}` adds "
            f"{below['large_calls_per_sentence'] - alg['large_calls_per_sentence']:.2f} and stays "
            f"{below['delta']:+.2f} BLEU from vanilla large, Algorithm 1 itself {alg['delta']:+.2f}.")
