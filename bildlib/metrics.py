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
