"""Reading a sweep's results: per-configuration summaries with their 95 % intervals
(bildlib.analysis.intervals) against the sweep's own vanilla-large baseline, the run they came
from, the Pareto frontier, and per-example comparisons. Pure pandas over the DataFrame that
experiments.sweep returns; the plots draw from these."""

from __future__ import annotations

import pandas as pd


def vanilla_large(frame: pd.DataFrame) -> pd.DataFrame:
    """The vanilla-large rows of a sweep's rows or of a summarize() table: the baseline (a sweep's
    baselines all decode as its `sampling` says, on the run's engine: a vanilla large with an
    engine of its own, as in the peers notebook, is a configuration like any other). The
    baseline model is frame.attrs["baseline"] when a sweep set one ("ee": early exit's full model)."""
    own = frame["engine"].fillna("").eq("") if "engine" in frame else True
    model = frame.attrs.get("baseline", "large")
    return frame[(frame["method"] == "vanilla") & (frame["model"] == model) & own]


def best_row(rows: pd.DataFrame, by: str) -> pd.Series | None:
    """The row with the largest `by`, or None when there are no rows."""
    return None if rows.empty else rows.loc[rows[by].idxmax()]


def summarize(df: pd.DataFrame, intervals: bool = True) -> pd.DataFrame:
    """One row per configuration: score, mean latency, speedup and normalized latency against
    vanilla large (mean over its repeats), the fallback / rollback / large-token rates, and
    whether it was timed on a busy machine (experiments.busy; False for older results). A sharded
    sweep (experiments.sweeps) normalizes each configuration by its own shard's baseline.
    intervals: 95 % paired-bootstrap intervals of score, speedup and the score's difference to
    the baseline (bildlib.analysis.intervals: score_lo/hi, speedup_lo/hi, delta_lo/hi); the rows need
    their outputs and references."""
    missing = {"verify_end": None, "busy": False, "drafted": 0, "discarded": 0, "engine": None}  # older rows
    missing |= {"small_s": float("nan"), "large_s": float("nan"), "ran_on": "", "shard": 0, "large_calls": 0}
    missing |= {"dtype": "", "small_dtype": "", "device_name": "", "verify_end_below": None}
    df = df.assign(**{c: v for c, v in missing.items() if c not in df})
    base = vanilla_large(df)
    if base.empty:
        raise ValueError("no vanilla-large rows: run the sweep with its baseline")
    per_repeat = base.groupby(["shard", "repeat"])["latency_s"].mean()  # (shard, repeat) -> mean
    refs = per_repeat.groupby("shard").mean()  # shard -> its baseline latency
    spread = per_repeat.groupby("shard").agg(lambda x: 100 * (x.max() - x.min()) / x.mean())
    if orphans := sorted(set(df["shard"]) - set(refs.index)):
        raise ValueError(f"shard(s) {orphans} have no vanilla-large rows: every shard needs its baseline")
    df = df.assign(engine=df["engine"].fillna(""))  # "": the run's engine
    g = df.groupby("label", sort=False)
    s = g.agg(
        method=("method", "first"),
        model=("model", "first"),
        fallback=("fallback", "first"),
        rollback=("rollback", "first"),
        window=("window", "first"),
        threshold=("threshold", "first"),
        repeat=("repeat", "first"),
        score=("score", "first"),
        latency_s=("latency_s", "mean"),
        tokens=("tokens", "sum"),
        fallbacks=("fallbacks", "sum"),
        rollbacks=("rollbacks", "sum"),
        large_tokens=("large_tokens", "sum"),
        large_calls=("large_calls", "sum"),
        n=("id", "count"),
        verify_end=("verify_end", "first"),
        verify_end_below=("verify_end_below", "first"),
        busy=("busy", "any"),
        drafted=("drafted", "sum"),
        discarded=("discarded", "sum"),
        engine_=("engine", "first"),
        small_s=("small_s", "mean"),
        large_s=("large_s", "mean"),
        ran_on=("ran_on", "first"),
        dtype=("dtype", "first"),
        small_dtype=("small_dtype", "first"),
        device_name=("device_name", "first"),
        shard=("shard", "first"),
    ).rename(columns={"engine_": "engine"})  # fmt: skip (agg's own `engine` keyword is numba's)
    s["verify_end"] = s["verify_end"].map(lambda v: v in (True,))  # None (Algorithm 1) -> False
    for c in ("fallback", "rollback", "window", "threshold", "verify_end_below"):  # None where unused -> NaN
        s[c] = pd.to_numeric(s[c], errors="coerce").astype(float)
    ref = s["shard"].map(refs)
    s["norm_latency"] = s["latency_s"] / ref
    s["speedup"] = ref / s["latency_s"]
    s["fallback_pct"] = 100 * s["fallbacks"] / s["tokens"]
    s["rollback_pct"] = 100 * s["rollbacks"] / s["tokens"]
    s["large_pct"] = 100 * s["large_tokens"] / s["tokens"]
    s["large_call_pct"] = (
        100 * s["large_calls"] / s["tokens"]
    )  # the paper's "fallback" of speculative decoding
    s["rejected_pct"] = 100 * s["discarded"] / s["drafted"].where(s["drafted"] > 0)  # of drafted tokens
    # the decoder loop's own cost: wall time minus the model calls' (NaN where calls are not timed:
    # transformers' generate and assisted generation report none)
    calls = s["small_s"] + s["large_s"]
    calls = calls.where(calls > 0)
    s["loop_pct"] = 100 * (s["latency_s"] - calls) / calls
    s["loop_us_per_token"] = 1e6 * (s["latency_s"] - calls) * s["n"] / s["tokens"]
    if intervals and {"output", "reference", "id"} <= set(df):
        s = s.join(_intervals(df, base), on="label")
        first = base.sort_values("repeat").groupby("shard")["label"].first()  # each shard's score baseline
        s["delta"] = s["score"] - s["shard"].map(first.map(s["score"]))
    s.attrs = dict(df.attrs) | {
        "baseline_latency_s": float(refs.mean()),  # the mean over shards of each one's baseline
        "baseline_spread_pct": float(spread.max()),  # the largest spread of one shard's repeats
        "baseline_repeats": int(per_repeat.groupby("shard").size().min()),
        "shard_baselines_s": {int(k): float(v) for k, v in refs.items()},
    }
    return s.reset_index()


def _intervals(df: pd.DataFrame, base: pd.DataFrame) -> pd.DataFrame:
    """bildlib.analysis.intervals per shard, each against its own baseline's repeats."""
    from bildlib.analysis import intervals

    metric = df.attrs.get("metric", "bleu")
    out = []
    for k, rows in df.groupby("shard"):
        b = base[base["shard"] == k].sort_values("repeat")
        out.append(intervals.shard_intervals(rows, list(dict.fromkeys(b["label"])), metric))
    return pd.concat(out)


def run_info(s: pd.DataFrame) -> dict:
    """What a summarize() table was measured with, for a figure's caption and a table's columns:
    n (examples), dtype, engine, device and the baseline model. dtype names the small models'
    own where they ran in another (dtype "mixed": models.small_policy)."""

    def one(col: str) -> str:
        vals = sorted({str(v) for v in s[col].dropna() if str(v)}) if col in s else []
        return "/".join(vals) or "?"

    base = "vanilla " + s.attrs.get("baseline", "large")
    dtype, small = one("dtype"), one("small_dtype")
    if small not in ("?", dtype):  # e.g. "bfloat16/float32, small models float32"
        dtype = f"{dtype}, small models {small}"
    return {"n": int(s["n"].max()), "dtype": dtype, "engine": one("ran_on"),
            "device": one("device_name"), "baseline": base}  # fmt: skip


def run_tag(s: pd.DataFrame) -> str:
    """run_info as one line: "n=100, float32, lean, baseline vanilla large"."""
    i = run_info(s)
    return f"n={i['n']}, {i['dtype']}, {i['engine']} engine, baseline {i['baseline']}"


def pareto(s: pd.DataFrame) -> pd.DataFrame:
    """The configurations no other beats on both normalized latency (lower) and score (higher)."""
    s = s.sort_values(["norm_latency", "score"], ascending=[True, False])
    keep, best = [], float("-inf")
    for i, r in s.iterrows():
        if r["score"] > best:
            keep.append(i)
            best = r["score"]
    return s.loc[keep]


def per_example(df: pd.DataFrame, label: str) -> pd.DataFrame:
    """arXiv v1 Fig. 6: one row per example with vanilla large's latency (mean over its repeats in
    the sweep), `label`'s latency, and whether `label` was slower on it."""
    base, run = vanilla_large(df), df[df["label"] == label]
    if "shard" in df and not run.empty:  # a sharded sweep: the baseline of label's own shard
        base = base[base["shard"] == run["shard"].iloc[0]]
    if base.empty or run.empty:
        raise ValueError(f"per_example needs vanilla-large rows and rows labelled {label!r}")
    out = pd.DataFrame(
        {"vanilla_s": base.groupby("id")["latency_s"].mean(), "bild_s": run.set_index("id")["latency_s"]}
    ).dropna()
    out["slower"] = out["bild_s"] > out["vanilla_s"]
    return out.rename_axis("id").reset_index()


def same_outputs_pct(df: pd.DataFrame, label: str, other: str = "vanilla-large") -> float:
    """The share of examples on which `label` wrote exactly `other`'s tokens (greedy speculative
    decoding against vanilla large: 100 % when lossless)."""
    a, b = (df[df["label"] == x].set_index("id")["output_ids"] for x in (label, other))
    if a.empty or b.empty:
        raise ValueError(f"same_outputs_pct needs rows labelled {label!r} and {other!r}")
    return 100 * float(sum(list(a[i]) == list(b[i]) for i in a.index) / len(a))
