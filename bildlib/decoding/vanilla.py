"""Vanilla decoding with one model: the baseline every speedup is measured against."""

from __future__ import annotations

import torch

from bildlib.decoding.common import check_count, finished
from bildlib.decoding.draft import native_run
from bildlib.decoding.policy import Policy, Sampling
from bildlib.decoding.trace import Trace


@torch.inference_mode()
def vanilla(
    model, source_ids, sampling: Sampling | None = None, max_new_tokens: int = 128
) -> tuple[list[int], Trace]:
    """Autoregressive decoding with one model: greedy, or nucleus sampling when `sampling` is set.
    On the native engine the whole decode is one C++ loop (decoding.draft.native_run), the same
    tokens as the Python loop below (tests/test_draft.py)."""
    check_count("max_new_tokens", max_new_tokens)
    tr, pol = Trace(), Policy(sampling, model.device)
    seq = [model.start(source_ids)]
    while not finished(seq, model.eos, max_new_tokens):
        if native_run(tr, pol, model, seq, max_new_tokens, None, max_new_tokens, confidence=False):
            continue  # to EOS or max_new_tokens in one C++ call, where the engine has one (models.native)
        logits = tr.call("S", model, seq)  # (1, V)
        tr.emit(seq, pol.pick(pol.scaled(logits)), "S")
    return seq[1:], tr
