"""bildlib.analysis.intervals: the paired bootstrap behind every interval, and the regimes decided on it."""

import numpy as np
import pandas as pd
import pytest

from bildlib import analysis as A
from bildlib.analysis import intervals, metrics

HYPS = ["a man rides a bike .", "two dogs play in the snow .", "a woman is reading a book .",
        "children run on the beach .", "a cat sleeps on a red sofa ."] * 4  # fmt: skip
REFS = ["a man is riding a bike .", "two dogs are playing in snow .", "a woman reads a book .",
        "kids are running on a beach .", "a cat is sleeping on the red couch ."] * 4  # fmt: skip


def rows(label, outputs, latency, repeat=0, model="small", method="bild", fb=0.5):
    n = len(outputs)
    return pd.DataFrame({
        "label": label, "id": range(n), "output": outputs, "reference": REFS[:n], "latency_s": latency,
        "method": method, "model": model, "fallback": fb, "rollback": 1.0, "window": None, "threshold": None,
        "repeat": repeat, "tokens": 10, "fallbacks": 1, "rollbacks": 1, "large_tokens": 3,
    })  # fmt: skip


def sweep(*configs):
    van = {"method": "vanilla", "model": "large", "fb": None}
    base = [rows("vanilla-large", REFS, 0.010, **van), rows("vanilla-large#1", REFS, 0.011, repeat=1, **van)]
    df = pd.concat(base + list(configs), ignore_index=True)
    df["score"] = df.groupby("label")["output"].transform(
        lambda o: metrics.bleu(list(o), REFS[: len(o)]).value
    )
    df.attrs["metric"] = "bleu"
    return df


def test_bootstrap_recomputes_the_librarys_corpus_score():
    """Summing the sentence statistics of every sentence once gives sacrebleu's corpus BLEU: our
    use of its internals is pinned to its own number."""
    st = intervals.sentence_stats("bleu", HYPS, REFS)
    got = intervals.corpus_scores("bleu", st.sum(0)[None], len(HYPS))[0]
    assert got == pytest.approx(metrics.bleu(HYPS, REFS).value, abs=1e-9)
    st = intervals.sentence_stats("rougeL", HYPS, REFS)
    assert intervals.corpus_scores("rougeL", st.sum(0)[None], len(HYPS))[0] == pytest.approx(
        metrics.rouge_l(HYPS, REFS).value
    )
    w = intervals.draws(7, 50)
    assert w.shape == (50, 7) and (w.sum(1) == 7).all() and (w == intervals.draws(7, 50)).all()  # seeded


def test_intervals_hold_the_point_estimates_and_the_pairing():
    twice = rows("slow-same", REFS, 0.021)  # vanilla's outputs, twice as slow as the baseline's mean
    other = rows("worse", HYPS, np.linspace(0.004, 0.006, 20))
    s = A.summarize(sweep(twice, other)).set_index("label")
    for label, r in s.iterrows():
        assert r["score_lo"] <= r["score"] <= r["score_hi"], label
        assert r["delta_lo"] <= r["delta"] <= r["delta_hi"], label
    # same outputs as the baseline: the paired difference is exactly 0 in every replicate
    assert s.loc["slow-same", ["delta", "delta_lo", "delta_hi"]].tolist() == [0, 0, 0]
    # constant latencies: the speedup's interval is the spread of the baseline's two repeats
    assert s.loc["slow-same", "speedup_lo"] == pytest.approx(0.010 / 0.021)
    assert s.loc["slow-same", "speedup_hi"] == pytest.approx(0.011 / 0.021)
    assert s.loc["worse", "delta_hi"] < 0  # every sentence worse: the whole interval below 0
    assert s.loc["worse", "score_hi"] - s.loc["worse", "score_lo"] > 1


def test_regimes_decided_on_the_interval():
    """A configuration whose measured score is within tol but whose interval reaches below -tol
    qualifies under the paper's point rule and not under the interval rule."""
    mixed = [h if i % 2 else r for i, (h, r) in enumerate(zip(HYPS, REFS, strict=True))]
    noisy = rows("noisy", mixed, 0.002, fb=0.3)
    s = A.summarize(sweep(noisy))
    r = s.set_index("label").loc["noisy"]
    tol = -r["delta"] + 0.01  # just within, measured
    assert r["delta_lo"] < -tol
    assert A.within(s, 0, 0, "point").dtype == bool
    t = A.summary_table(s, regimes=(("tol", tol),)).set_index(["rule", "model", "regime"])
    assert t.loc[("point", "BiLD (unaligned)", "tol"), "speedup"] > 1
    assert pd.isna(t.loc[("interval", "BiLD (unaligned)", "tol"), "speedup"])
    with pytest.raises(ValueError, match="rule must be one of"):
        A.within(s, 0, 0, "vibes")


def test_figures_draw_the_intervals_name_the_run_and_keep_keys_off_the_data():
    import matplotlib.pyplot as plt

    from bildlib import plots

    df = sweep(rows("a", HYPS, 0.004, model="aligned"), rows("b", REFS, 0.006, model="aligned", fb=0.7))
    df = df.assign(dtype="float32", ran_on="lean", device_name="cpu")
    s = A.summarize(df)
    for fig in (plots.fig4(s), plots.fig5(s), plots.fig10(s)):
        fig.canvas.draw()
        ax = fig.axes[0]
        box, key = ax.get_window_extent(), ax.get_legend().get_window_extent()
        assert key.x0 >= box.x1 - 1, "the legend overlaps the axes"
        assert any(len(c.get_segments()) for c in ax.collections if hasattr(c, "get_segments")), "no bars"
        text = " ".join(t.get_text() for t in fig.texts)
        assert "n=20, float32, lean engine" in text and "95 %" in text
        plt.close(fig)


def test_intervals_over_seeds_and_sentences():
    """Sampled sweeps, one per seed: the means over seeds get 95 % intervals from a bootstrap over
    seeds and sentences (intervals.seed_intervals through sampled.over_seeds). Vanilla's outputs in
    every seed: a zero difference in every replicate; outputs that change with the seed: a wider
    score interval than the same outputs in every seed; every interval holds its mean."""
    from bildlib.analysis import sampled as S

    summaries, frames = {}, {}
    for seed in (0, 1, 2):
        van = {"method": "vanilla", "model": "large", "fb": None}
        parts = [rows(f"vanilla-large-s{seed}", REFS, 0.010, **van),
                 rows(f"vanilla-large-s{seed}#1", REFS, 0.011, repeat=1, **van),
                 rows(f"bild-same-s{seed}", REFS, 0.005, model="aligned", fb=0.4),
                 rows(f"bild-fixed-s{seed}", HYPS, 0.005, model="aligned", fb=0.5),
                 rows(f"bild-varies-s{seed}", HYPS if seed else REFS, 0.005, model="aligned", fb=0.6)]
        df = pd.concat(parts, ignore_index=True)
        df["score"] = df.groupby("label")["output"].transform(lambda o: metrics.bleu(list(o), REFS).value)
        df.attrs["metric"] = "bleu"
        frames[seed], summaries[seed] = df, A.summarize(df)
    agg = S.over_seeds(summaries, frames).set_index("config")
    for c, r in agg.iterrows():
        assert r["score_lo"] <= r["score_mean"] + 1e-9 and r["score_mean"] <= r["score_hi"] + 1e-9, c
        assert r["speedup_lo"] <= r["speedup_mean"] <= r["speedup_hi"], c
    assert agg.loc["bild-same", ["delta", "delta_lo", "delta_hi"]].tolist() == [0, 0, 0]
    assert agg.loc["bild-same", ["speedup_lo", "speedup_hi"]].tolist() == pytest.approx([2.0, 2.2])
    width = agg["score_hi"] - agg["score_lo"]
    assert width["bild-varies"] > width["bild-fixed"]  # the seeds' spread is in the interval
    t = S.nucleus_table(agg.reset_index()).set_index("row")
    assert {"delta_lo", "speedup_lo"} <= set(t.columns)
    again = S.over_seeds(summaries, frames).set_index("config")  # seeded: the same intervals
    assert again[intervals.COLUMNS].equals(agg[intervals.COLUMNS])
    with pytest.raises(ValueError, match="same examples"):
        S.over_seeds(summaries, {**frames, 2: frames[2][frames[2]["id"] != 3]})
