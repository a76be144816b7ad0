"""The oracle study of Fig. 2: how much of the large model a small model needs."""

from __future__ import annotations

import torch

from bildlib import kernels
from bildlib.decoding.common import check_count, check_threshold, finished
from bildlib.decoding.trace import Trace
from bildlib.models.lm import check_pair


@torch.inference_mode()
def oracle(small, large, source_ids, threshold: float, max_new_tokens: int = 128) -> tuple[list[int], Trace]:
    """Both models run every step; where the large model gives the small model's greedy token
    probability below `threshold`, the large model's token replaces it. The trace's large-token
    fraction is the large model's engagement."""
    check_count("max_new_tokens", max_new_tokens)
    check_threshold("threshold", threshold, 0, 1)
    check_pair(small, large)  # one vocabulary (checked once per pair, remembered on small)
    tr = Trace()
    seq = [small.start(source_ids)]
    large.start(source_ids)
    while not finished(seq, small.eos, max_new_tokens):
        y = kernels.max_prob(tr.call("S", small, seq))[1]  # (1,)
        d, y_l = kernels.rollback_distance(tr.call("L", large, seq), y)  # -log p_L(y)
        take_large = bool(torch.exp(-d) < threshold)
        tr.emit(seq, y_l if take_large else y, "L" if take_large else "S")
    return seq[1:], tr
