"""Paper Tables 3-5, the sampled comparisons: BiLD against speculative sampling (Tables 3 and 4)
and BiLD under nucleus sampling over seeds (Table 5), from analysis.summarize tables."""

from __future__ import annotations

import pandas as pd

from bildlib.analysis import best_row, intervals, spread_of, vanilla_large


def speculative_tables(s: pd.DataFrame, model: str = "small") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Paper Tables 3 and 4 from a summarize() table holding speculative sampling over windows
    and BiLD (small model `model`) over a grid, on the same examples.
    Table 3: vanilla large; speculative at its best window (highest speedup); BiLD "match
    latency" (the best score at a normalized latency no higher than speculative's) and "match
    score" (the best speedup at a score no lower than speculative's).
    Table 4: speculative at its best window against BiLD at its best no-loss point (score within
    0.2 of vanilla large), with fallback and rollback per output token (%), and the share of
    drafted tokens discarded (%: speculative's rejected drafts; BiLD's fallbacks and rolled-back
    tokens). Fallback % is the paper's: BiLD's fallbacks, and for speculative decoding its
    large-model calls, per output token; large_call_pct gives every row's large calls per token.
    Interval (summarize) and over-seed (over_seeds: score_std, speedup_std) columns are kept."""
    extra = spread_of(s) + [c for c in ("score_std", "speedup_std", "seeds") if c in s]
    cols = [
        "label",
        "score",
        "speedup",
        "fallback_pct",
        "rollback_pct",
        "rejected_pct",
        "large_call_pct",
        *extra,
    ]
    s = s.assign(fallback_pct=s["fallback_pct"].where(s["method"] != "speculative", s["large_call_pct"]))
    van, spec = vanilla_large(s), s[s["method"] == "speculative"]
    b = s[(s["method"] == "bild") & (s["model"] == model)]
    if van.empty or spec.empty or b.empty:
        raise ValueError("speculative_tables needs vanilla-large, speculative and BiLD rows")
    score = float(van["score"].mean())
    sp = best_row(spec, "speedup")

    def row(method: str, r: pd.Series | None) -> dict:
        return {"method": method} | ({} if r is None else r[cols].to_dict())

    speculative = row("Speculative (best window)", sp)
    first = van.sort_values("repeat").iloc[0] if "repeat" in van else van.iloc[0]
    t3 = [row("Vanilla (large)", first) | {"score": score, "speedup": 1.0}, speculative]
    t3.append(row("BiLD (match latency)", best_row(b[b["norm_latency"] <= sp["norm_latency"]], "score")))
    t3.append(row("BiLD (match score)", best_row(b[b["score"] >= sp["score"]], "speedup")))
    t4 = [speculative, row("BiLD (no loss)", best_row(b[b["score"] >= score - 0.2], "speedup"))]
    return pd.DataFrame(t3), pd.DataFrame(t4)


NUCLEUS_REGIMES = (("better score", 0.0), ("about the same", 0.2), ("≈ 1 point lower", 1.0))


Frames = dict  # a sweep's own rows (experiments.sweep), keyed as its summary is


def over_seeds(summaries: dict[int, pd.DataFrame], frames: Frames | None = None) -> pd.DataFrame:
    """One row per configuration of sampled sweeps run once per seed (summarize() tables keyed
    by seed, each against its own seed's vanilla large): mean and sample standard deviation over
    the seeds of score and speedup, mean fallback and rollback per output token (%). With the
    sweeps' own rows (`frames`, keyed by seed like summaries): the 95 % intervals of the means over
    seeds and sentences (intervals.seed_intervals: score_lo/hi, speedup_lo/hi, delta_lo/hi) and
    delta, the mean score minus vanilla large's."""
    if len(summaries) < 2:
        raise ValueError(f"over_seeds needs the sweeps of at least 2 seeds, got {len(summaries)}")
    keys = ["method", "model", "fallback", "rollback", "window"]
    s = pd.concat([t.assign(seed=seed) for seed, t in summaries.items()], ignore_index=True)
    s = s[s["repeat"] == 0]  # vanilla large's first run of each seed: one row per seed
    s["config"] = s["label"].str.replace(r"-s\d+$", "", regex=True)  # the label without its seed
    optional = ("rejected_pct", "large_call_pct", "norm_latency")  # NaN where the summaries lack them
    s = s.assign(**{c: s[c] if c in s else float("nan") for c in optional})
    g = s.groupby(keys + ["config"], dropna=False, sort=False)
    out = g.agg(
        score_mean=("score", "mean"), score_std=("score", "std"), speedup_mean=("speedup", "mean"),
        speedup_std=("speedup", "std"), norm_latency=("norm_latency", "mean"),
        fallback_pct=("fallback_pct", "mean"), rollback_pct=("rollback_pct", "mean"),
        rejected_pct=("rejected_pct", "mean"), large_call_pct=("large_call_pct", "mean"),
        seeds=("seed", "nunique"),
    ).reset_index()  # fmt: skip
    if (out["seeds"] != len(summaries)).any():
        bad = out.loc[out["seeds"] != len(summaries), "config"].tolist()
        raise ValueError(f"configurations missing from some seeds' sweeps: {bad}")
    if frames is None:
        return out
    runs = {}
    for seed, t in summaries.items():
        base = vanilla_large(t).sort_values("repeat")["label"].tolist()
        runs[seed] = (frames[seed], base)
    metric = next(iter(frames.values())).attrs.get("metric", "bleu")
    out = out.merge(intervals.seed_intervals(runs, metric), left_on="config", right_index=True, how="left")
    van = vanilla_large(out)["score_mean"].iloc[0]
    return out.assign(delta=out["score_mean"] - van)


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
    cols += [c for c in ("delta", *intervals.COLUMNS) if c in agg]  # over seeds and sentences, where run
    rows = [{"row": "Vanilla (large)"} | v[cols].to_dict() | {"speedup_mean": 1.0, "speedup_std": 0.0}]
    for name, tol in regimes:
        low = v["score_mean"] - tol - 1e-9  # 1e-9: a mean exactly tol below is within
        ok = b["score_mean"] > v["score_mean"] if tol == 0 else b["score_mean"] >= low
        r = best_row(b[ok], "speedup_mean")
        rows.append({"row": f"BiLD ({name})"} | ({} if r is None else r[cols].to_dict()))
    return pd.DataFrame(rows)


def speculative_report(summaries: dict[tuple[str, int], pd.DataFrame],
                       frames: Frames | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Tables 3 and 4 for every mode of summarize() tables keyed by (mode, seed): a mode run with
    one seed (greedy) keeps its 95 % intervals; one run with several (sampled) is picked on the
    means over seeds and reports mean ± std (over_seeds), with the sweeps' rows (`frames`, keyed
    alike) also the 95 % intervals over seeds and sentences. Columns `mode` and `seeds` say which."""
    t3, t4 = [], []
    for mode in dict.fromkeys(m for m, _ in summaries):
        by_seed = {k: s for (m, k), s in summaries.items() if m == mode}
        s = next(iter(by_seed.values()))
        if len(by_seed) > 1:
            rows = None if frames is None else {k: frames[mode, k] for k in by_seed}
            s = over_seeds(by_seed, rows).rename(columns={"score_mean": "score", "speedup_mean": "speedup"})
            s = s.rename(columns={"config": "label"})
        a, b = speculative_tables(s)
        t3.append(a.assign(mode=mode, seeds=len(by_seed)))
        t4.append(b.assign(mode=mode, seeds=len(by_seed)))
    return pd.concat(t3, ignore_index=True), pd.concat(t4, ignore_index=True)
