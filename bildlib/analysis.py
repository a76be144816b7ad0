"""Reading a sweep's results: per-configuration summaries, the Pareto frontier, Table 1, and
the examples of Fig. 9. Pure pandas over the DataFrame that experiments.sweep returns; bildlib.plots
draws from these."""

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


def _best(rows: pd.DataFrame, by: str) -> pd.Series | None:
    """The row with the largest `by`, or None when there are no rows."""
    return None if rows.empty else rows.loc[rows[by].idxmax()]


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: score, mean latency, speedup and normalized latency against
    vanilla large (mean over its repeats), the fallback / rollback / large-token rates, and
    whether it was timed on a busy machine (experiments.busy; False for older results). A sharded
    sweep (experiments.sweeps) normalizes each configuration by its own shard's baseline."""
    missing = {"verify_end": None, "busy": False, "drafted": 0, "discarded": 0, "engine": None}  # older rows
    missing |= {"small_s": float("nan"), "large_s": float("nan"), "ran_on": "", "shard": 0}
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
        n=("id", "count"),
        verify_end=("verify_end", "first"),
        busy=("busy", "any"),
        drafted=("drafted", "sum"),
        discarded=("discarded", "sum"),
        engine_=("engine", "first"),
        small_s=("small_s", "mean"),
        large_s=("large_s", "mean"),
        ran_on=("ran_on", "first"),
        shard=("shard", "first"),
    ).rename(columns={"engine_": "engine"})  # fmt: skip (agg's own `engine` keyword is numba's)
    s["verify_end"] = s["verify_end"].map(lambda v: v in (True,))  # None (Algorithm 1) -> False
    for c in ("fallback", "rollback", "window", "threshold"):  # None where unused -> NaN
        s[c] = pd.to_numeric(s[c], errors="coerce").astype(float)
    ref = s["shard"].map(refs)
    s["norm_latency"] = s["latency_s"] / ref
    s["speedup"] = ref / s["latency_s"]
    s["fallback_pct"] = 100 * s["fallbacks"] / s["tokens"]
    s["rollback_pct"] = 100 * s["rollbacks"] / s["tokens"]
    s["large_pct"] = 100 * s["large_tokens"] / s["tokens"]
    s["rejected_pct"] = 100 * s["discarded"] / s["drafted"].where(s["drafted"] > 0)  # of drafted tokens
    # the decoder loop's own cost: wall time minus the model calls' (NaN where calls are not timed:
    # transformers' generate and assisted generation report none)
    calls = s["small_s"] + s["large_s"]
    calls = calls.where(calls > 0)
    s["loop_pct"] = 100 * (s["latency_s"] - calls) / calls
    s["loop_us_per_token"] = 1e6 * (s["latency_s"] - calls) * s["n"] / s["tokens"]
    s.attrs = dict(df.attrs) | {
        "baseline_latency_s": float(refs.mean()),  # the mean over shards of each one's baseline
        "baseline_spread_pct": float(spread.max()),  # the largest spread of one shard's repeats
        "baseline_repeats": int(per_repeat.groupby("shard").size().min()),
        "shard_baselines_s": {int(k): float(v) for k, v in refs.items()},
    }
    return s.reset_index()


def pareto(s: pd.DataFrame) -> pd.DataFrame:
    """The configurations no other beats on both normalized latency (lower) and score (higher)."""
    s = s.sort_values(["norm_latency", "score"], ascending=[True, False])
    keep, best = [], float("-inf")
    for i, r in s.iterrows():
        if r["score"] > best:
            keep.append(i)
            best = r["score"]
    return s.loc[keep]


REGIMES = (("no loss", 0.2), ("≤ 0.5 point", 0.5), ("≤ 1 point", 1.0))


def summary_table(s: pd.DataFrame, regimes=REGIMES) -> pd.DataFrame:
    """Paper Table 1 from summarize(): vanilla large's score, and for unaligned and aligned BiLD
    the best speedup whose score stays within 0.2 of vanilla ("no loss") and within 1 point (the
    paper's two regimes), and within 0.5 (this project's benchmark bar)."""
    vanilla_score = float(vanilla_large(s)["score"].mean())
    rows = [{"model": "Vanilla (large)", "regime": "", "score": vanilla_score, "speedup": 1.0}]
    for m, name in (("small", "BiLD (unaligned)"), ("aligned", "BiLD (aligned)")):
        b = s[(s["method"] == "bild") & (s["model"] == m) & s["fallback"].notna() & s["rollback"].notna()]
        for regime, tol in regimes:
            r = _best(b[b["score"] >= vanilla_score - tol], "speedup")
            if r is None:
                rows.append({"model": name, "regime": regime})
                continue
            rows.append(
                {"model": name, "regime": regime, "score": r["score"], "speedup": r["speedup"]}
                | {"fallback": r["fallback"], "rollback": r["rollback"], "verify_end": r["verify_end"]}
                | {"fallback_pct": r["fallback_pct"], "rollback_pct": r["rollback_pct"]}
            )
    return pd.DataFrame(rows)


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
            | {"small": small.loc[i, "output"], "bild": r["output"], "ids": list(r["output_ids"])}
            | {"trace": r["trace"]}
        )
    return out


def token_pieces(tokenizer, ids: list[int], trace: str) -> list[tuple[str, str]]:
    """(text, "S" | "L") per output token, spaces restored from sentencepiece's "▁"."""
    pieces = tokenizer.convert_ids_to_tokens(list(ids))
    special = set(tokenizer.all_special_tokens)
    return [(p.replace("▁", " "), who) for p, who in zip(pieces, trace, strict=True) if p not in special]


def thresholds_of(table: pd.DataFrame, model: str, regime: str) -> tuple[float, float]:
    """(α_FB, α_RB) of a summary_table row, e.g. ("BiLD (aligned)", "≤ 1 point")."""
    row = table.set_index(["model", "regime"]).loc[(model, regime)]
    if pd.isna(row.get("fallback")):
        raise ValueError(f"no {model} configuration reaches the {regime!r} regime in this sweep")
    return float(row["fallback"]), float(row["rollback"])


def best_quality(s: pd.DataFrame, model: str) -> str:
    """The label of the highest-scoring BiLD configuration with small model `model` in a
    summarize() table (the faster one on a tie)."""
    b = s[(s["method"] == "bild") & (s["model"] == model)]
    if b.empty:
        raise ValueError(f"no BiLD configuration with the {model} small model in this sweep")
    return str(b.sort_values(["score", "speedup"], ascending=False)["label"].iloc[0])


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


def speculative_tables(s: pd.DataFrame, model: str = "small") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Paper Tables 3 and 4 from a summarize() table holding speculative sampling over windows
    and BiLD (small model `model`) over a grid, on the same examples.
    Table 3: vanilla large; speculative at its best window (highest speedup); BiLD "match
    latency" (the best score at a normalized latency no higher than speculative's) and "match
    score" (the best speedup at a score no lower than speculative's).
    Table 4: speculative at its best window against BiLD at its best no-loss point (score within
    0.2 of vanilla large), with fallback and rollback per output token (%), and the share of
    drafted tokens discarded (%: speculative's rejected drafts; BiLD's fallbacks and rolled-back
    tokens)."""
    cols = ["label", "score", "speedup", "fallback_pct", "rollback_pct", "rejected_pct"]
    van, spec = vanilla_large(s), s[s["method"] == "speculative"]
    b = s[(s["method"] == "bild") & (s["model"] == model)]
    if van.empty or spec.empty or b.empty:
        raise ValueError("speculative_tables needs vanilla-large, speculative and BiLD rows")
    score = float(van["score"].mean())
    sp = _best(spec, "speedup")

    def row(method: str, r: pd.Series | None) -> dict:
        return {"method": method} | ({} if r is None else r[cols].to_dict())

    speculative = row("Speculative (best window)", sp)
    t3 = [
        {"method": "Vanilla (large)", "label": "vanilla-large", "score": score, "speedup": 1.0},
        speculative,
    ]
    t3.append(row("BiLD (match latency)", _best(b[b["norm_latency"] <= sp["norm_latency"]], "score")))
    t3.append(row("BiLD (match score)", _best(b[b["score"] >= sp["score"]], "speedup")))
    t4 = [speculative, row("BiLD (no loss)", _best(b[b["score"] >= score - 0.2], "speedup"))]
    return pd.DataFrame(t3), pd.DataFrame(t4)


NUCLEUS_REGIMES = (("better score", 0.0), ("about the same", 0.2), ("≈ 1 point lower", 1.0))


def over_seeds(summaries: dict[int, pd.DataFrame]) -> pd.DataFrame:
    """One row per configuration of sampled sweeps run once per seed (summarize() tables keyed
    by seed, each against its own seed's vanilla large): mean and sample standard deviation over
    the seeds of score and speedup, mean fallback and rollback per output token (%)."""
    if len(summaries) < 2:
        raise ValueError(f"over_seeds needs the sweeps of at least 2 seeds, got {len(summaries)}")
    keys = ["method", "model", "fallback", "rollback", "window"]
    s = pd.concat([t.assign(seed=seed) for seed, t in summaries.items()], ignore_index=True)
    s = s[s["repeat"] == 0]  # vanilla large's first run of each seed: one row per seed
    s["config"] = s["label"].str.replace(r"-s\d+$", "", regex=True)  # the label without its seed
    g = s.groupby(keys + ["config"], dropna=False, sort=False)
    out = g.agg(
        score_mean=("score", "mean"), score_std=("score", "std"), speedup_mean=("speedup", "mean"),
        speedup_std=("speedup", "std"), fallback_pct=("fallback_pct", "mean"),
        rollback_pct=("rollback_pct", "mean"), seeds=("seed", "nunique"),
    ).reset_index()  # fmt: skip
    if (out["seeds"] != len(summaries)).any():
        bad = out.loc[out["seeds"] != len(summaries), "config"].tolist()
        raise ValueError(f"configurations missing from some seeds' sweeps: {bad}")
    return out


def nucleus_table(agg: pd.DataFrame, model: str = "aligned", regimes=NUCLEUS_REGIMES) -> pd.DataFrame:
    """Paper Table 5 from over_seeds(): vanilla large, and BiLD (small model `model`) at the
    paper's three points, each the highest mean speedup whose mean score is above vanilla's
    ("better score"), within 0.2 below it ("about the same") or within 1 point below it."""
    van = vanilla_large(agg)
    b = agg[(agg["method"] == "bild") & (agg["model"] == model)]
    if van.empty or b.empty:
        raise ValueError(f"nucleus_table needs vanilla-large rows and BiLD rows with the {model} model")
    v = van.iloc[0]
    cols = ["config", "fallback", "rollback", "score_mean", "score_std", "speedup_mean", "speedup_std"]
    cols += ["fallback_pct", "rollback_pct", "seeds"]
    rows = [{"row": "Vanilla (large)"} | v[cols].to_dict() | {"speedup_mean": 1.0, "speedup_std": 0.0}]
    for name, tol in regimes:
        low = v["score_mean"] - tol - 1e-9  # 1e-9: a mean exactly tol below is within
        ok = b["score_mean"] > v["score_mean"] if tol == 0 else b["score_mean"] >= low
        r = _best(b[ok], "speedup_mean")
        rows.append({"row": f"BiLD ({name})"} | ({} if r is None else r[cols].to_dict()))
    return pd.DataFrame(rows)
