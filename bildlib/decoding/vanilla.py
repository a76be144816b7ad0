"""Vanilla decoding with one model: the baseline every speedup is measured against."""

from __future__ import annotations

import torch

from bildlib.decoding.common import check_count, finished
from bildlib.decoding.policy import Policy, Sampling
from bildlib.decoding.trace import Trace


@torch.inference_mode()
def vanilla(
    model, source_ids, sampling: Sampling | None = None, max_new_tokens: int = 128
) -> tuple[list[int], Trace]:
    """Autoregressive decoding with one model: greedy, or nucleus sampling when `sampling` is set."""
    check_count("max_new_tokens", max_new_tokens)
    tr, pol = Trace(), Policy(sampling, model.device)
    seq = [model.start(source_ids)]
    while not finished(seq, model.eos, max_new_tokens):
        logits = tr.call("S", model, seq)  # (1, V)
        tr.emit(seq, pol.pick(pol.scaled(logits)), "S")
    return seq[1:], tr
