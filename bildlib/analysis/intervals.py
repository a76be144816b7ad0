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
