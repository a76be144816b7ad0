"""Lean T5 / mT5: the loaded Hugging Face model's own weights driven by plain tensor ops, with a
preallocated KV cache, cross-attention K/V computed once per source and a precomputed
relative-position bias table. The logits equal HF's (tests/test_engine.py); the framework cost
per call (cache objects, masks, output dataclasses, module hooks) is gone, and a step is about
half the operators of the same step written with F.linear and F.rms_norm: products as torch.mm
on the weights' transposed views, the residual added inside addmm, attention as bmm, and in
float32 the RMS norm as one vector norm (docs/engines.md, *Anatomy of a step*).

Layer-granular: `embed`, `layer(i, x, pos)`, `head` run one piece each, so an early exit can
stop between layers; `forward` is the three in a row. The caller owns the lengths: layer i
writes its keys and values at [pos, pos + k) and attends to [0, pos + k), so a crop is moving
`pos` back (models.lm.LM does that).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bildlib.models.lean_common import Buffers, act_fn, attend, fuse, rms


class LeanT5:
    """Decoder of a T5ForConditionalGeneration / MT5ForConditionalGeneration, batch 1."""

    arch = "t5"

    def __init__(self, model):
        c = model.config
        self.model, self.eps = model, c.layer_norm_epsilon
        self.H, self.dh, self.d = c.num_heads, c.d_kv, c.d_model
        self.gated, self.act = bool(c.is_gated_act), act_fn(c.dense_act_fn)
        self.scale = c.d_model**-0.5 if getattr(c, "scale_decoder_outputs", False) else None
        self.emb, self.lm = model.shared.weight, model.lm_head.weight  # (V, d) each, maybe one tensor
        self.enc = [_weights(b, fuse_kv=False) for b in model.encoder.block]
        self.dec = [_weights(b, fuse_kv=True) for b in model.decoder.block]
        self.enc_ln, self.dec_ln = (
            model.encoder.final_layer_norm.weight,
            model.decoder.final_layer_norm.weight,
        )
        self.rel_enc = model.encoder.block[0].layer[0].SelfAttention  # its compute_bias: HF's buckets
        self.rel_dec = model.decoder.block[0].layer[0].SelfAttention
        self.n_layers = len(self.dec)
        self.fast_norm = model.dtype == torch.float32  # half precision keeps HF's rounding (rms)
        self.eps_d = torch.tensor(self.d * self.eps, dtype=model.dtype, device=model.device)
        for w in self.enc + self.dec:
            _transposed(w, self.d if self.fast_norm else None)
        self.lm_t = self.lm.t()  # (d, V)
        head = self.dec_ln * (self.scale or 1.0)  # tied T5 heads scale by d_model^-0.5
        self.head_ln = head * self.d**0.5 if self.fast_norm else head
        self.kv = Buffers(self.n_layers, self.H, self.dh, model.dtype, model.device)
        self.bias = torch.empty(0)  # (H, T, T) decoder self-attention bias, causal mask folded in
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer (H, S, dh) K and V

    # -- the source ---------------------------------------------------------------------------
    def begin(self, src: torch.Tensor) -> None:
        """Encode src (1, S) and compute every layer's cross-attention K/V from it, once."""
        x = F.embedding(src[0], self.emb)  # (S, d)
        S = x.shape[0]
        bias = self.rel_enc.compute_bias(S, S, device=x.device)[0]  # (H, S, S), bidirectional
        for w in self.enc:
            x = self._block(x, w, bias, None, 0)
        e = rms(x, self.enc_ln, self.eps)  # (S, d)
        self.cross = []
        for w in self.dec:
            kv = F.linear(e, w["ckv"]).view(S, 2, self.H, self.dh).permute(1, 2, 0, 3)  # (2, H, S, dh)
            self.cross.append((kv[0], kv[1]))

    # -- the decoder, a piece at a time ---------------------------------------------------------
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.emb)  # (k,) -> (k, d)

    def layer(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        """Decoder layer i on x (k, d) at positions [pos, pos + k): self-attention over the cache
        (written here), cross-attention, feed-forward."""
        k = x.shape[0]
        self._grow(pos + k)
        return self._block(x, self.dec[i], self.bias[:, pos : pos + k, : pos + k], i, pos)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        if self.fast_norm:
            return torch.mm(self._norm(x, self.head_ln), self.lm_t)  # (k, V)
        h = rms(x, self.dec_ln, self.eps)
        if self.scale is not None:  # tied T5 heads scale by d_model^-0.5 (HF: scale_decoder_outputs)
            h = h * self.scale
        return torch.mm(h, self.lm_t)  # (k, V)

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Logits (k, V) for tokens (k,) at decoder positions [pos, pos + k)."""
        x = self.embed(tokens)
        for i in range(self.n_layers):
            x = self.layer(i, x, pos)
        return self.head(x)

    def fill(self, i: int, x: torch.Tensor, pos: int) -> None:
        """Layer i's keys and values at [pos, pos + k) projected from x (k, d), the hidden state of
        an earlier exit (CALM's state propagation): later tokens that run layer i attend to them."""
        k, n = x.shape[0], self.H * self.dh
        w = self.dec[i]
        kv = F.linear(rms(x, w["ln0"], self.eps), w["qkv"][n:]).view(k, 2, self.H, self.dh).transpose(0, 2)
        self.kv.put(i, kv[:, 0], kv[:, 1], pos)  # kv: (H, 2, k, dh)

    def crop(self, drop: int) -> None:
        """Nothing to do: the caller's lengths decide what the next call reads and overwrites."""

    # -- internals ------------------------------------------------------------------------------
    def _norm(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """T5's RMS norm. float32: x * rsqrt(|x|^2 + d eps) * (w sqrt(d)), five operators where
        F.rms_norm runs a dozen (within 1e-6 of it); half precision: lean_common.rms, HF's rounding."""
        if not self.fast_norm:
            return rms(x, w, self.eps)
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # (k, 1)
        return torch.mul(x, torch.addcmul(self.eps_d, n, n).rsqrt_()).mul_(w)

    def _block(self, x, w, bias, i: int | None, pos: int) -> torch.Tensor:
        """One T5 block; i None: an encoder block (no cache, no cross-attention). w's "_t" entries
        are (in, out) views of its weights, "_n" its norm weights as _norm takes them."""
        k, H, dh = x.shape[0], self.H, self.dh
        qkv = torch.mm(self._norm(x, w["ln0_n"]), w["qkv_t"]).view(k, 3, H, dh).transpose(0, 2)
        q, kk, v = qkv.unbind(1)  # (H, k, dh) each
        if i is not None:  # write this call's keys and values, attend to the whole prefix
            kk, v = self.kv.put(i, kk, v, pos)
        a = attend(q, kk, v, bias)  # (H, k, dh)
        x = torch.addmm(x, a.transpose(0, 1).reshape(k, H * dh), w["o_t"])  # x + a o
        if i is not None:  # cross-attention over the source, K/V from begin()
            q = torch.mm(self._norm(x, w["ln1_n"]), w["cq_t"]).view(k, H, dh).transpose(0, 1)
            ck, cv = self.cross[i]
            a = attend(q, ck, cv, None)
            x = torch.addmm(x, a.transpose(0, 1).reshape(k, H * dh), w["co_t"])
        h = self._norm(x, w["lnf_n"])
        if self.gated:
            h = self.act(torch.mm(h, w["wi0_t"])) * torch.mm(h, w["wi1_t"])
        else:
            h = self.act(torch.mm(h, w["wi_t"]))
        return torch.addmm(x, h, w["wo_t"])

    def _grow(self, n: int) -> None:
        """The bias table covers n positions (doubling, so a long output rebuilds it rarely)."""
        if self.bias.shape[-1] >= n:
            return
        T = max(2 * n, 64)
        b = self.rel_dec.compute_bias(T, T, device=self.emb.device)[0]  # (H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=b.device).tril()
        self.bias = torch.where(causal, b, torch.finfo(b.dtype).min)  # as HF's SDPA mask


def _weights(block, fuse_kv: bool) -> dict:
    """A T5Block's weights by short name; q/k/v fused into one matrix (the HF linears become views
    of it, so no weight is held twice), and the cross-attention k/v likewise."""
    sa, ff = block.layer[0], block.layer[-1]
    at, dense = sa.SelfAttention, ff.DenseReluDense
    w = {"ln0": sa.layer_norm.weight, "qkv": fuse(at.q, at.k, at.v)[0], "o": at.o.weight}
    w["lnf"] = ff.layer_norm.weight
    if hasattr(dense, "wi_0"):
        w |= {"wi0": dense.wi_0.weight, "wi1": dense.wi_1.weight, "wo": dense.wo.weight}
    else:
        w |= {"wi": dense.wi.weight, "wo": dense.wo.weight}
    if fuse_kv:
        ca = block.layer[1]
        w |= {
            "ln1": ca.layer_norm.weight,
            "cq": ca.EncDecAttention.q.weight,
            "co": ca.EncDecAttention.o.weight,
        }
        w["ckv"] = fuse(ca.EncDecAttention.k, ca.EncDecAttention.v)[0]
    return w


def _transposed(w: dict, d: int | None) -> None:
    """Adds to a block's weights the (in, out) view of each matrix ("_t", no copy) and each norm
    weight as _norm takes it ("_n": times sqrt(d) for the float32 norm, d given; else itself)."""
    for name, t in list(w.items()):
        if name.startswith("ln"):
            w[name + "_n"] = t * d**0.5 if d else t
        else:
            w[name + "_t"] = t.t()
