"""Lean T5 / mT5: the loaded Hugging Face model's own weights driven by plain tensor ops, with a
preallocated KV cache, a precomputed relative-position bias table, and cross-attention folded
into two small matrices per source. The logits equal HF's in float32 and stay within bf16's
rounding of them in bfloat16 (tests/test_engine.py); docs/engines-cpu.md, *Anatomy of a step*, has
what each choice below saves.

- Products go through models.linear: oneDNN-prepacked weights on a CPU, residuals added
  inside the product (one rounding, as torch.addmm); each row's result does not depend on the
  number of rows.
- Self-attention runs through lean_common.attend_causal, probed where it runs: the k rows in one
  masked call where this machine's kernels keep each row's bits, else (half precision) the prefix
  path (float32 sums in key order, invariant by construction, at about one call's cost), else
  each row alone; so a token's logits have the same bits whatever the number of tokens its call
  carries, and lossless BiLD equals vanilla greedy (docs/row-invariance.md).
- Cross-attention over a fixed source is a fixed linear map of the normed input: scores are
  h (Wq_h K_h^T) and the output is sum_h p_h (V_h Wo_h^T). begin() computes A = (Wq_h K_h^T)_h
  (d, H P) and B = (V_h Wo_h^T)_h (H P, d) once, with the norm's weight folded into A, so a
  decoder call's cross-attention is two products with these small matrices and a softmax,
  instead of two weight products, two bmm and the casts around them. P is S rounded up to a
  multiple of 4 (the padding masked): rows_mm keeps a row's bits only for such widths.
- Engine "native" is models.native.NativeT5, this engine with the norms, self-attention and
  cross-attention as C++ calls (bildlib.kernels.cpu), and the small model's run as one.

The decoder's op families (OPS) can each run one row at a time (`set_rows`), where the load-time
whole-call check (models.wholecall) finds that a k-token call keeps no one-token call's bits.

Layer-granular: `embed`, `layer(i, x, pos)`, `head` run one piece each, so an early exit can
stop between layers; `forward` is the three in a row. The caller owns the lengths: layer i
writes its keys and values at [pos, pos + k) and attends to [0, pos + k), so a crop is moving
`pos` back (models.lm.LM does that).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bildlib.models.layout import fuse
from bildlib.models.lean_common import Buffers, act_fn, attend_causal, attend_once, per_row, rms
from bildlib.models.linear import linear, once, rows_mm
from bildlib.models.wholecall import EachRow, op


class LeanT5:
    """Decoder of a T5ForConditionalGeneration / MT5ForConditionalGeneration, batch 1."""

    arch = "t5"
    folded_cross = True  # cross-attention as (A, B) per source: it reads no query or output weights
    # the decoder's op families the whole-call check may run one row at a time (models.wholecall),
    # in the order it tries them; "call": a k-token call as k one-token calls
    OPS = ("norm", "cross", "act", "attention", "products", "call")

    def __init__(self, model, cpp=None, native: bool | str | None = None):
        c = model.config
        self.model, self.eps, self.dtype = model, c.layer_norm_epsilon, model.dtype
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
        self.f32 = model.dtype == torch.float32  # half precision rounds where HF's model rounds
        self.eps_d = torch.tensor(self.d * self.eps, dtype=torch.float32, device=model.device)
        # the native engine's products (models.linear): Native in float32, NativeInt8 where "int8"
        native = cpp is not None if native is None else native
        for j, w in enumerate(self.enc + self.dec):  # the encoder's run once per source
            _products(w, self.d if self.f32 else None, j < len(self.enc), native)
        self.lm_l = linear(self.lm, native)  # (d -> V)
        head = self.dec_ln * (self.scale or 1.0)  # tied T5 heads scale by d_model^-0.5
        self.head_ln = head * self.d**0.5 if self.f32 else head
        self.kv = Buffers(self.n_layers, self.H, self.dh, model.dtype, model.device)
        self.bias = torch.empty(0)  # (H, T, T) decoder self-attention bias, causal mask folded in
        self._at, self._bias = (-1, 0), self.bias  # the (pos, k) of the last call and its rows
        self.cross: list[tuple] = []  # per layer A (d, H P), B (H P, d), mask (1, H P) or None
        self.rows: frozenset[str] = frozenset()  # op families run one row at a time (set_rows)
        # each decoder layer's products and the head's as chosen (models.linear), unswitched
        self.plain = [{n: p for n, p in w.items() if n.endswith("_l") and n != "ckv_l"} for w in self.dec]
        self.plain_lm = self.lm_l
        # cpp: bildlib.kernels.cpu's module where models.native.NativeT5 runs the pieces between products
        self.cpp, self.engine = cpp, "lean" if cpp is None else "native"
        self.set_rows(())

    def set_rows(self, ops) -> None:
        """Run the decoder's op families `ops` (of OPS) one row at a time, the rest on the whole
        call: models.wholecall switches them where this machine's kernels need it."""
        bad = set(ops) - set(self.OPS)
        if bad:
            raise ValueError(f"set_rows: unknown op families {sorted(bad)}; the T5 engine's are {self.OPS}")
        self.rows = frozenset(ops)
        wrap = EachRow if "products" in self.rows else (lambda p: p)
        for w, plain in zip(self.dec, self.plain, strict=True):
            w.update({n: wrap(p) for n, p in plain.items()})
        self.lm_l = wrap(self.plain_lm)

    # -- the source ---------------------------------------------------------------------------
    def begin(self, src: torch.Tensor) -> None:
        """Encode src (1, S) and fold every layer's cross-attention over it into (A, B), once."""
        x = F.embedding(src[0], self.emb)  # (S, d)
        S, H, dh, d = x.shape[0], self.H, self.dh, self.d
        bias = self.rel_enc.compute_bias(S, S, device=x.device)[0]  # (H, S, S), bidirectional
        for w in self.enc:
            x = self._block(x, w, bias, None, 0)
        e = rms(x, self.enc_ln, self.eps)  # (S, d)
        # Each head's keys padded to P, a multiple of 4, with zero keys and values that the mask
        # hides: a row of scores (H P floats) then starts at a 16-byte boundary, which keeps
        # rows_mm row-invariant (models.linear.rows_mm).
        P = -(-S // 4) * 4
        mask = None
        if P > S:
            mask = torch.zeros(H, P, device=x.device)
            mask[:, S:] = -torch.inf
            mask = mask.view(1, H * P)  # (1, H P): -inf at the padding
        self.cross = []
        for w in self.dec:
            kv = w["ckv_l"](e).view(S, 2, H, dh).permute(1, 2, 0, 3).float()  # (2, H, S, dh), HF's values
            kv = F.pad(kv, (0, 0, 0, P - S))  # (2, H, P, dh)
            q, o = w["cq32"], w["co32"]  # (H, d, dh) with the norm's weight folded in, (H, dh, d)
            A = torch.bmm(q, kv[0].transpose(1, 2)).permute(1, 0, 2).reshape(d, H * P)  # h -> scores
            B = torch.bmm(kv[1], o).reshape(H * P, d)  # probabilities -> output
            self.cross.append((A, B, mask))

    # -- the decoder, a piece at a time ---------------------------------------------------------
    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return F.embedding(tokens, self.emb)  # (k,) -> (k, d)

    def layer(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        """Decoder layer i on x (k, d) at positions [pos, pos + k): self-attention over the cache
        (written here), cross-attention, feed-forward."""
        self.room(pos, x.shape[0])
        return self._block(x, self.dec[i], self._bias, i, pos)

    def room(self, pos: int, k: int) -> None:
        """The cache and the bias table hold positions [0, pos + k); _bias: the call's rows."""
        if self._at != (pos, k):  # every layer of a call reads the same rows of the bias
            self._grow(pos + k)
            self.kv.room(pos + k)
            self._at, self._bias = (pos, k), self.bias[:, pos : pos + k, : pos + k]

    def head(self, x: torch.Tensor) -> torch.Tensor:
        if self.f32:
            return self.lm_l(op(self.rows, "norm", self._norm, x, self.head_ln))  # (k, V)
        h = op(self.rows, "norm", self._norm, x, self.dec_ln)
        if self.scale is not None:  # tied T5 heads scale by d_model^-0.5 (HF: scale_decoder_outputs)
            h = h * self.scale
        return self.lm_l(h)  # (k, V)

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Logits (k, V) for tokens (k,) at decoder positions [pos, pos + k)."""
        if "call" in self.rows and tokens.shape[0] > 1:  # the last resort: k one-token calls
            return torch.cat([self.forward(tokens[j : j + 1], pos + j) for j in range(tokens.shape[0])])
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
        F.rms_norm runs a dozen (within 1e-6 of it). Half precision: w * round(x * rsqrt(|x|^2 / d
        + eps)) with the rsqrt in float32, rounded where HF's T5LayerNorm rounds."""
        if self.f32:
            n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # (k, 1)
            return torch.mul(x, torch.addcmul(self.eps_d, n, n).rsqrt_()).mul_(w)
        x = x.float()
        n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
        return w * torch.mul(x, torch.addcmul(self.eps_d, n, n).rsqrt_().mul_(self.d**0.5)).to(w.dtype)

    def _block(self, x, w, bias, i: int | None, pos: int) -> torch.Tensor:
        """One T5 block; i None: an encoder block (no cache, no cross-attention). w's "_l" entries
        are its products (models.linear), "_n" its norm weights as _norm takes them."""
        k, H, dh = x.shape[0], self.H, self.dh
        rows = self.rows if i is not None else frozenset()  # the encoder's calls are not checked
        h_qkv = w["qkv_l"](op(rows, "norm", self._norm, x, w["ln0_n"]))  # (k, 3 H dh)
        qkv = h_qkv.view(k, 3, H, dh).permute(1, 2, 0, 3)  # (3, H, k, dh)
        if i is None:  # the encoder, once per source
            a = attend_once(qkv[0], qkv[1], qkv[2], bias).transpose(0, 1).reshape(k, H * dh)
        else:  # write this call's keys and values, attend to the whole prefix
            a = self._attend_self(h_qkv, qkv, bias, i, pos, "attention" in rows)
        x = w["o_l"].add(a, x)  # x + a o
        return self._rest(x, w, rows, i)

    def _attend_self(self, h_qkv, qkv, bias, i: int, pos: int, each_row: bool) -> torch.Tensor:
        """Decoder layer i's self-attention (k, H dh) of the call's qkv (3, H, k, dh) at [pos, pos
        + k), writing its keys and values. The prefix path in half precision only: there one row
        alone is a slow bmm (an addmm per head), in float32 a fast one, cheaper than prefix's ops at
        a one-token step (attend_causal)."""
        k = qkv.shape[2]
        kv = self.kv.put2(i, qkv[1:], pos)  # writes this call's keys and values; (H, pos + k, dh) each
        a = per_row(qkv[0], *kv, bias) if each_row else attend_causal(qkv[0], *kv, bias, prefix=not self.f32)
        return a.transpose(0, 1).reshape(k, self.H * self.dh)  # (H, k, dh) -> (k, H dh)

    def _rest(self, x, w, rows, i: int | None) -> torch.Tensor:
        """A block after its self-attention: cross-attention (decoder), the feed-forward."""
        if i is not None:
            x = op(rows, "cross", self._cross, x, i)
        h = op(rows, "norm", self._norm, x, w["lnf_n"])
        if self.gated:
            h = op(rows, "act", lambda a, b: self.act(a) * b, w["wi0_l"](h), w["wi1_l"](h), split=2)
        elif self.act is F.relu and "act" not in rows:
            h = w["wi_l"].relu(h)
        else:
            h = op(rows, "act", self.act, w["wi_l"](h))
        return w["wo_l"].add(h, x)

    def _cross(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """x + cross-attention of decoder layer i over the source, in float32: the norm without its
        weight (folded into A, with sqrt(d)), scores h A (k, H, S), output p B (module docstring);
        one row at a time (rows_mm), so a row's bits do not depend on the call's length."""
        A, B, mask = self.cross[i]
        k, xf = x.shape[0], x.float()
        n = torch.linalg.vector_norm(xf, dim=-1, keepdim=True)
        h = torch.mul(xf, torch.addcmul(self.eps_d, n, n).rsqrt_())  # (k, d), |h| = 1
        p = torch.softmax(rows_mm(h, A, mask).view(k, self.H, -1), -1)  # (k, H, P), 0 at the padding
        return rows_mm(p.view(k, -1), B, xf).to(x.dtype)

    def _grow(self, n: int) -> None:
        """The bias table covers n positions (doubling, so a long output rebuilds it rarely)."""
        if self.bias.shape[-1] >= n:
            return
        T = max(2 * n, 64)
        b = self.rel_dec.compute_bias(T, T, device=self.emb.device)[0]  # (H, T, T)
        causal = torch.ones(T, T, dtype=torch.bool, device=b.device).tril()
        self.bias = torch.where(causal, b, torch.finfo(b.dtype).min).contiguous()  # as HF's SDPA mask


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
        H = ca.EncDecAttention.n_heads
        with torch.no_grad():  # float32 factors of the folded cross-attention (LeanT5.begin)
            d = w["cq"].shape[1]
            q = w["cq"].float() * (w["ln1"].float() * d**0.5)  # (H dh, d): the norm's weight folded
            w["cq32"] = q.view(H, -1, d).transpose(1, 2).contiguous()  # (H, d, dh)
            w["co32"] = w["co"].float().view(d, H, -1).permute(1, 2, 0).contiguous()  # (H, dh, d)
    return w


def _products(w: dict, d: int | None, encoder: bool, native: bool) -> None:
    """Adds to a block's weights each matrix that a call multiplies by as a models.linear
    ("_l"; linear.once for an encoder's and the cross-attention's keys and values, which run once
    per source), and each norm weight as _norm takes it ("_n": times sqrt(d) for the float32 norm,
    d given; else itself)."""
    for name, t in list(w.items()):
        if name.startswith("ln"):
            w[name + "_n"] = t * d**0.5 if d else t
        elif name in ("qkv", "o", "wi", "wi0", "wi1", "wo", "ckv"):
            w[name + "_l"] = (once if encoder or name == "ckv" else linear)(t, native)
