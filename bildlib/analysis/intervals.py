"""95 % intervals of a sweep's scores and speedups: a paired bootstrap over sentences.

Every configuration of a shard decoded the same sentences, so one set of resamples serves all of
them (paired): replicate b draws n sentences with replacement (multinomial counts W[b], (B, n)),
and every configuration's corpus score and mean latency are recomputed on that draw.

- score: the corpus metric from the resampled sentence statistics, with the metric's own code
  (sacrebleu's sentence statistics and `_compute_score_from_stats`, as sacrebleu's
  significance module does; ROUGE-L: the mean of the sentence F-measures).
- speedup: the baseline's mean latency over this configuration's, both on the draw. The baseline
  is one of its repeats, picked at random per replicate, so the interval also holds the spread
  of the vanilla repeats (a point estimate averages them).
- delta: score minus the baseline's score on the same draw (paired); regimes are decided on it
  (analysis.summary_table).

The resamples are seeded (SEED): the same rows give the same intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

B = 1000  # bootstrap replicates
LEVEL = 0.95
SEED = 12345  # sacrebleu's default bootstrap seed
COLUMNS = ["score_lo", "score_hi", "speedup_lo", "speedup_hi", "delta_lo", "delta_hi"]


def sentence_stats(metric: str, hyps: list[str], refs: list[str]) -> np.ndarray:
    """Per-sentence sufficient statistics of the corpus metric: (n, k)."""
    if metric == "bleu":
        from sacrebleu.metrics import BLEU

        return np.array(BLEU()._extract_corpus_statistics(hyps, [refs]), dtype=np.float64)
    if metric == "rougeL":
        from rouge_score import rouge_scorer

        sc = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
        return np.array([[100 * sc.score(r, h)["rougeL"].fmeasure] for h, r in zip(hyps, refs, strict=True)])
    raise ValueError(f"metric must be 'bleu' or 'rougeL', got {metric!r}")


def corpus_scores(metric: str, sums: np.ndarray, n: int) -> np.ndarray:
    """The corpus score of each row of summed statistics (R, k) over n sentences: (R,)."""
    if metric == "rougeL":
        return sums[:, 0] / n
    from sacrebleu.metrics import BLEU

    m = BLEU()
    return np.array([m._compute_score_from_stats(list(row)).score for row in sums.round().astype(int)])


def draws(n: int, b: int = B, seed: int = SEED) -> np.ndarray:
    """(b, n) multinomial counts: how often each of n sentences is drawn in each replicate."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n, np.full(n, 1 / n), size=b).astype(np.float64)


def _tails(x: np.ndarray) -> tuple[float, float]:
    a = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(x, [a, 100 - a])
    return float(lo), float(hi)


def shard_intervals(rows: pd.DataFrame, base_labels: list[str], metric: str, b: int = B) -> pd.DataFrame:
    """COLUMNS per label of one shard's rows (id, label, output, reference, latency_s), against
    the baseline repeats base_labels (the first is the score baseline)."""
    wide = rows.pivot(index="id", columns="label", values="latency_s")
    if wide.isna().any().any():
        missing = wide.columns[wide.isna().any()].tolist()
        raise ValueError(f"intervals need every configuration on the same examples; {missing} miss some")
    n = len(wide)
    w = draws(n, b)  # (b, n)
    rng = np.random.default_rng(SEED + 1)
    base = w @ wide[base_labels].to_numpy() / n  # (b, repeats): each repeat's mean latency per draw
    base = base[np.arange(b), rng.integers(0, len(base_labels), b)]  # (b,) one random repeat each
    refs = rows[rows["label"] == base_labels[0]].set_index("id").loc[wide.index, "reference"].tolist()

    def scores(label: str) -> np.ndarray:
        hyps = rows[rows["label"] == label].set_index("id").loc[wide.index, "output"].tolist()
        return corpus_scores(metric, w @ sentence_stats(metric, hyps, refs), n)

    ref_scores = scores(base_labels[0])
    out = {}
    for label in wide.columns:
        sc = ref_scores if label == base_labels[0] else scores(label)
        speed = base / (w @ wide[label].to_numpy() / n)
        out[label] = [*_tails(sc), *_tails(speed), *_tails(sc - ref_scores)]
    return pd.DataFrame.from_dict(out, orient="index", columns=COLUMNS).rename_axis("label")


def seed_intervals(runs: dict[int, tuple[pd.DataFrame, list[str]]], metric: str, b: int = B) -> pd.DataFrame:
    """COLUMNS per configuration of sampled sweeps run once per seed, for the mean over seeds: each
    replicate draws the seeds with replacement and the sentences with replacement (one draw of
    sentences for every seed: paired), and recomputes each configuration's mean over the drawn seeds
    of its corpus score, its speedup against its own seed's baseline (one of the repeats at
    random), and its score minus the baseline's. runs: seed -> (that seed's rows, its baseline
    repeats' labels, the score baseline first). A configuration is its label without the seed
    (the "-s<seed>" suffix, as sampled.over_seeds keys them)."""
    seeds = list(runs)
    if len(seeds) < 2:
        raise ValueError(f"seed_intervals needs the sweeps of at least 2 seeds, got {len(seeds)}")
    ids = sorted(runs[seeds[0]][0]["id"].unique())
    w, rng = draws(len(ids), b), np.random.default_rng(SEED + 2)
    pick = rng.integers(0, len(seeds), size=(b, len(seeds)))  # (b, S): the seeds of each replicate
    score, speed, configs = {}, {}, None
    for j, seed in enumerate(seeds):
        rows, base = runs[seed]
        config = rows["label"].str.replace(r"-s\d+(#\d+)?$", r"\1", regex=True)
        wide = rows.assign(config=config).pivot(index="id", columns="config", values="latency_s")
        if sorted(wide.index) != ids or wide.isna().any().any():
            raise ValueError(f"seed {seed}: every configuration of every seed must decode the same examples")
        configs = list(wide.columns) if configs is None else configs
        if set(wide.columns) != set(configs):
            raise ValueError(f"seed {seed}: its configurations differ from seed {seeds[0]}'s")
        wide = wide.loc[ids]
        bases = [config[rows["label"] == lb].iloc[0] for lb in base]
        mean = w @ wide[bases].to_numpy() / len(ids)  # (b, repeats)
        ref_lat = mean[np.arange(b), rng.integers(0, len(bases), b)]
        refs = rows[rows["label"] == base[0]].set_index("id").loc[ids, "reference"].tolist()
        for c in configs:
            hyps = rows[config == c].set_index("id").loc[ids, "output"].tolist()
            score.setdefault(c, np.empty((len(seeds), b)))[j] = corpus_scores(
                metric, w @ sentence_stats(metric, hyps, refs), len(ids))  # fmt: skip
            speed.setdefault(c, np.empty((len(seeds), b)))[j] = ref_lat / (w @ wide[c].to_numpy() / len(ids))
    ref = score[bases[0]]  # (S, b): each seed's score baseline (the same configuration in every seed)
    cols = np.arange(b)
    out = {}
    for c in configs:
        sc, sp = score[c][pick, cols[:, None]].mean(1), speed[c][pick, cols[:, None]].mean(1)  # (b,)
        d = sc - ref[pick, cols[:, None]].mean(1)
        out[c] = [*_tails(sc), *_tails(sp), *_tails(d)]
    return pd.DataFrame.from_dict(out, orient="index", columns=COLUMNS).rename_axis("config")
