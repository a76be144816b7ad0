"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), the paper's Tables 3-4 rival."""

from __future__ import annotations

import torch

from bildlib import kernels
from bildlib.decoding.common import check_count, finished
from bildlib.decoding.policy import Policy, Sampling
from bildlib.decoding.trace import Trace
from bildlib.models.lm import check_pair


@torch.inference_mode()
def speculative_sampling(
    small, large, source_ids, window: int = 4, sampling: Sampling | None = None, max_new_tokens: int = 128
) -> tuple[list[int], Trace]:
    """The small model drafts `window` tokens, the large model scores them in one call; draft i is
    accepted with probability min(1, p_L/p_S), at the first rejection a token is drawn from
    norm(max(0, p_L - p_S)), and with all accepted a bonus token from p_L. The output follows the
    large model's distribution; greedy (sampling None or temperature 0) is the degenerate case:
    the large model's greedy output.
    """
    check_count("max_new_tokens", max_new_tokens)
    check_count("window", window)
    check_pair(small, large)  # one vocabulary (checked once per pair, remembered on small)
    tr, pol = Trace(), Policy(sampling, large.device)
    seq = [small.start(source_ids)]
    large.start(source_ids)
    while not finished(seq, small.eos, max_new_tokens):
        q = []  # the small model's filtered logits rows, one per draft
        while len(q) < window and not finished(seq, small.eos, max_new_tokens):
            row = pol.filtered(pol.scaled(tr.call("S", small, seq)[-1:]))  # (1, V)
            q.append(row)
            tr.emit(seq, kernels.sample(row, pol.uniforms(1, row.device)), "S")
            tr.drafted += 1
        k = len(q)
        p = pol.filtered(pol.scaled(tr.call("L", large, seq)))[-(k + 1) :]  # (k+1, V)
        draft = torch.tensor(seq[-k:], device=p.device)
        n, y = kernels.speculative_accept(p, torch.cat(q), draft, pol.uniforms(k + 1, p.device))
        n, y = torch.stack((n, y)).tolist()  # one host sync per large call
        tr.rollbacks += n < k
        tr.rewind(seq, len(seq) - k + n, small, large)  # keep the accepted drafts
        if n < k or not finished(seq, small.eos, max_new_tokens):  # no bonus token after EOS
            tr.emit(seq, y, "L")
    return seq[1:], tr
