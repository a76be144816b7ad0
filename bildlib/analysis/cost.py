"""What one model call costs: FLOPs, bytes moved and arithmetic intensity of a T5 / mT5 call,
from the model's config alone (paper Fig. 8).

A decoder call runs k new tokens over a KV cache that holds `past` tokens, cross-attending to a
source of S tokens; the first call of a sentence also runs the encoder and the cross-attention
K/V projections (bildlib.models.LM encodes at the first forward). With d = d_model, i = heads ×
d_kv, f = d_ff, V = vocabulary, L_e / L_d = encoder / decoder layers:

  FLOPs (multiply-adds × 2 of every matmul, as torch.utils.flop_counter counts them with eager
  attention; the same products run inside scaled_dot_product_attention)
    per decoder layer: 2k·(4di + 2di + m·df)  self q,k,v,o; cross q,o; FFN (m = 2, gated: 3)
                     + 4k·(past + k)·i        self-attention scores and values
                     + 4k·S·i                 cross-attention scores and values
                     + first · 2S·2di         cross-attention K and V, once per source
    head: 2k·dV;  encoder (first call): L_e · (2S·(4di + m·df) + 4S²·i)

  Bytes (elements × bytes per element)
    weights: every matrix the call multiplies, read once (the decoder's layers and norms, the
      head; the cross K/V and the encoder only on the first call; embedding rows k·d when the
      head is untied, else the head's read covers them)
    KV cache: self K,V of past + k positions read and k written, cross K,V of S positions read
      (written on the first call), per decoder layer
    activations: the input and output of every matmul (norms, softmax and residual passes
      are not counted: a few × k·d per layer, small beside the weights at batch 1)

  Intensity = FLOPs / bytes.

  Layers: the layers the call runs, plus one for the final norm and head (plus the encoder's on
  the first call): what a per-layer launch overhead scales with (bildlib.analysis.roofline).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Arch:
    """The shape of a T5-family encoder-decoder: all the cost model needs."""

    d: int  # d_model
    heads: int
    d_kv: int
    ff: int  # d_ff
    enc_layers: int
    dec_layers: int
    vocab: int
    gated: bool  # gated-GELU FFN (T5 v1.1, mT5): three FFN matrices instead of two
    tied: bool  # the head is the shared embedding matrix
    buckets: int = 32  # relative-attention buckets (one bias table in each stack's first layer)

    @property
    def inner(self) -> int:
        return self.heads * self.d_kv

    @property
    def ffn_mats(self) -> int:
        """Matrices of one FFN: wi, wo; gated: wi_0, wi_1, wo."""
        return 3 if self.gated else 2

    @property
    def ffn(self) -> int:
        """Parameters of one FFN."""
        return self.ffn_mats * self.d * self.ff

    @classmethod
    def of(cls, config) -> Arch:
        """From a transformers T5Config / MT5Config."""
        if getattr(config, "model_type", None) not in ("t5", "mt5"):
            raise ValueError(f"the cost model covers T5 and mT5, got model_type {config.model_type!r}")
        return cls(
            d=config.d_model, heads=config.num_heads, d_kv=config.d_kv, ff=config.d_ff,
            enc_layers=config.num_layers, dec_layers=config.num_decoder_layers, vocab=config.vocab_size,
            gated=bool(config.is_gated_act), tied=bool(config.tie_word_embeddings),
            buckets=config.relative_attention_num_buckets,
        )  # fmt: skip

    def params(self) -> dict[str, int]:
        """Parameters by part; their sum is the model's parameter count."""
        a = self
        bias = a.buckets * a.heads
        return {
            "embedding": a.vocab * a.d,
            "head": 0 if a.tied else a.vocab * a.d,
            "encoder": a.enc_layers * (4 * a.d * a.inner + a.ffn + 2 * a.d) + a.d + bias,
            "decoder": a.dec_layers * (8 * a.d * a.inner + a.ffn + 3 * a.d) + a.d + bias,
        }


# Published configs (config.json of google/mt5-small and google/mt5-large on the Hugging Face
# Hub): the paper's translation pair, for projections without weights.
MT5 = {
    "mt5-small": Arch(
        d=512, heads=6, d_kv=64, ff=1024, enc_layers=8, dec_layers=8, vocab=250112, gated=True, tied=False
    ),  # fmt: skip
    "mt5-large": Arch(
        d=1024, heads=16, d_kv=64, ff=2816, enc_layers=24, dec_layers=24, vocab=250112, gated=True, tied=False
    ),  # fmt: skip
}


# config.json of google-t5/t5-small and google-t5/t5-large (T5 v1.0: ReLU FFN, tied head,
# 32,128 entries): the paper's CNN/DM summarization pair (paper Fig. 8's setting).
T5 = {
    "t5-small": Arch(d=512, heads=8, d_kv=64, ff=2048, enc_layers=6, dec_layers=6, vocab=32128, gated=False,
                     tied=True),
    "t5-large": Arch(d=1024, heads=16, d_kv=64, ff=4096, enc_layers=24, dec_layers=24, vocab=32128,
                     gated=False, tied=True),
}  # fmt: skip


def _stack(a: Arch, n: int, keys: int, cross: int) -> tuple[int, int]:
    """(FLOPs, activation elements) of n tokens through one layer that self-attends over `keys`
    positions and cross-attends over `cross` (0: an encoder layer); K/V of the cross-attention
    excluded."""
    mats = 4 * a.d * a.inner + a.ffn + (2 * a.d * a.inner if cross else 0)
    flops = 2 * n * mats + 4 * n * (keys + cross) * a.inner
    acts = 4 * (a.d + a.inner) + a.ffn_mats * (a.d + a.ff) + (2 * (a.d + a.inner) if cross else 0)
    acts += 2 * a.heads * (keys + cross)  # attention probabilities written, then read
    return flops, n * acts


def call(a: Arch, k: int, past: int, source: int, first: bool, bytes_per: int = 4) -> dict:
    """FLOPs, bytes (weights, KV cache, activations) and intensity of one decoder call of k
    tokens after `past` cached ones, with a source of `source` tokens; first: the sentence's
    first call of this model (encoder and cross K/V run too)."""
    if k < 1 or past < 0 or source < 1:
        raise ValueError(f"a call needs k >= 1, past >= 0, source >= 1; got {k}, {past}, {source}")
    p, L, S = a.params(), a.dec_layers, source
    f, acts = _stack(a, k, past + k, S)
    flops, acts = L * f + 2 * k * a.d * a.vocab, L * acts + k * (a.d + a.vocab)
    weights = p["decoder"] + a.vocab * a.d + (0 if a.tied else k * a.d)
    kv = L * 2 * a.inner * ((past + k) + k + S)
    if first:
        flops += L * 2 * S * 2 * a.d * a.inner
        fe, ae = _stack(a, S, S, 0)
        flops, acts = flops + a.enc_layers * fe, acts + a.enc_layers * ae
        weights += p["encoder"] + (0 if a.tied else S * a.d)  # tied: the embedding is read as the head
        kv += L * 2 * a.inner * S  # cross K,V written
    else:
        weights -= L * 2 * a.d * a.inner  # cross K/V projections: not multiplied again
    b = {"weight_bytes": weights * bytes_per, "kv_bytes": kv * bytes_per, "act_bytes": acts * bytes_per}
    total = sum(b.values())
    layers = L + 1 + (a.enc_layers + 1 if first else 0)  # stacks of kernels launched (+1: norm and head)
    return {"flops": flops} | b | {"bytes": total, "intensity": flops / total, "layers": layers}


def costs(archs: dict[str, Arch], calls: pd.DataFrame, bytes_per: int = 4) -> pd.DataFrame:
    """call() for each row of `calls` (columns model, k, past, source, first; as
    experiments.calls_of gives them), with archs[model], as columns beside them."""
    missing = set(calls["model"]) - set(archs)
    if missing:
        raise ValueError(f"no Arch for the model(s) {sorted(missing)} of these calls")
    rows = [call(archs[r.model], r.k, r.past, r.source, bool(r.first), bytes_per) for r in calls.itertuples()]
    return pd.concat([calls.reset_index(drop=True), pd.DataFrame(rows)], axis=1)


QUANTITIES = ("flops", "bytes", "weight_bytes", "kv_bytes", "act_bytes")


def totals(runs: dict[str, pd.DataFrame], baseline: str) -> pd.DataFrame:
    """One row per run (name -> costs() rows over the same examples): calls, the sums of
    QUANTITIES, intensity (total FLOPs / total bytes), and each relative to `baseline`'s."""
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {sorted(runs)}")
    t = pd.DataFrame(
        {name: {"calls": len(c)} | {q: float(c[q].sum()) for q in QUANTITIES} for name, c in runs.items()}
    ).T
    t["intensity"] = t["flops"] / t["bytes"]
    for q in ("flops", "bytes", "intensity"):
        t[f"{q}_rel"] = t[q] / t.loc[baseline, q]
    return t.rename_axis("run").reset_index()
