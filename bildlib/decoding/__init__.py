"""BiLD (Algorithm 1 of Kim et al. 2023) and the decoders it is compared with, at batch 1, and
`batch`: BiLD, vanilla and greedy speculative decoding over many sources at once.

One module per decoder: `bild` (Algorithm 1, its ablations, the authors' rules), `vanilla`,
`speculative`, `oracle`, `calm` (confident adaptive early exit), and `hf` (transformers' generate
and assisted generation, the peers a user would pick instead); `trace` records what a decoder did
and `policy` picks tokens (greedy or nucleus sampling). Every decoder drives `bildlib.models.LM`
adapters and keeps one list, seq = [bos] + output; a model whose cache holds seq[:n] runs seq[n:]
in one call (Trace.call), and row i of the returned logits predicts seq[n + 1 + i]. Policy
arithmetic (max probability, -log p, sampling, acceptance, saturation) goes through
bildlib.kernels. Each decoder returns (ids, Trace).

    from bildlib import decoding as D
    out, trace = D.bild(small, large, src, fallback=0.5, rollback=3.0)
"""

from bildlib.decoding.batch import BatchTrace, bild_batch, speculative_batch, vanilla_batch
from bildlib.decoding.bild import RULES, BildSettings, bild, first_rollback
from bildlib.decoding.calm import MEASURES, calm, calm_threshold
from bildlib.decoding.hf import hf_assisted, hf_generate
from bildlib.decoding.oracle import oracle
from bildlib.decoding.policy import Policy, Sampling
from bildlib.decoding.speculative import speculative_sampling
from bildlib.decoding.trace import Trace
from bildlib.decoding.vanilla import vanilla

__all__ = [
    "MEASURES", "RULES", "BatchTrace", "BildSettings", "Policy", "Sampling", "Trace", "bild", "bild_batch",
    "calm", "calm_threshold", "first_rollback", "hf_assisted", "hf_generate", "oracle", "speculative_batch",
    "speculative_sampling", "vanilla", "vanilla_batch",
]  # fmt: skip
