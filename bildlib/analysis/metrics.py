"""Corpus metrics: BLEU with sacrebleu (with its signature), ROUGE with rouge-score."""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU


@dataclass(frozen=True)
class Score:
    value: float
    signature: str  # how it was computed, e.g. sacrebleu's "nrefs:1|case:mixed|...|version:2.6.0"


def bleu(hypotheses: list[str], references: list[str]) -> Score:
    """Corpus BLEU, sacrebleu defaults (13a tokenization, mixed case), one reference per line."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("hypotheses is empty")
    metric = BLEU()
    return Score(metric.corpus_score(hypotheses, [references]).score, str(metric.get_signature()))


def rouge_l(hypotheses: list[str], references: list[str]) -> Score:
    """Mean ROUGE-L F1 (x100) with Google's rouge-score, Porter stemming, as in the paper's tables."""
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    if not hypotheses:
        raise ValueError("hypotheses is empty")
    from importlib.metadata import version

    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    f = [scorer.score(r, h)["rougeL"].fmeasure for h, r in zip(hypotheses, references, strict=True)]
    sig = f"rouge-score:{version('rouge-score')}|rougeL|fmeasure|stemmer:porter|mean-over-{len(f)}"
    return Score(100 * sum(f) / len(f), sig)


def score(metric: str, hypotheses: list[str], references: list[str]) -> Score:
    """metric: "bleu" or "rougeL"."""
    if metric == "bleu":
        return bleu(hypotheses, references)
    if metric == "rougeL":
        return rouge_l(hypotheses, references)
    raise ValueError(f"metric must be 'bleu' or 'rougeL', got {metric!r}")
