"""Static T5 / mT5: the decoder step at fixed shapes, for a GPU at batch 1 (engine="static").

At batch 1 on a GPU a decoder step is bound by kernel launches, not by reading the weights
(docs/engines-gpu.md, *On a GPU*). This engine removes them as gpt-fast does (`generate.py`): every
tensor a call touches has a fixed shape and address, so one call length is one CUDA graph,
captured once and replayed at any position.

- The KV cache holds `max_len` positions, (L, H, T, dh) for keys and values; a call writes rows
  [pos, pos + k) with index_copy_ at positions that are a device tensor (`self.pos`).
- begin() runs the encoder with the same kernels over the source padded to n rows (a power of
  two, at least 16; the padding's keys masked), then writes every decoder layer's cross keys and
  values into buffers of `max_src` rows: one graph per n. Attention reads the source's length
  on the device (`self.n_src`), so a new source of the same bucket needs no new graph.
- The decoder self-attention bias is T5's relative-position table for max_len positions, read
  at [h, pos + row, t]; the causal mask is applied by position inside the attention kernel.
- Products (each with the RMS norm before it fused in: mm(..., norm=)) and attention are
  bildlib.kernels.triton_rowinv's on a CUDA device, 9 launches a decoder layer: a token's
  logits have the same bits alone (vanilla's steps) and inside a verifying call of up to 16
  tokens, so lossless BiLD equals vanilla greedy by construction. Elsewhere the same step runs
  their torch references (the tests trace it whole with torch.compile(fullgraph=True)).
- forward(tokens, pos) copies the tokens and the position into the static inputs, replays the
  graph for k = len(tokens) (captured at its first use) and returns a copy of its logits (the
  graph rewrites one buffer at every call of that length); no host synchronisation. A call
  past max_len, or a source past max_src, doubles the buffers (copying the cache) and drops the
  graphs: they are captured again at the new addresses.

The interface is models.engine's: begin(src), forward(tokens, pos) -> (k, V), crop(n) (a no-op:
the caller's lengths decide what a call overwrites).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bildlib import kernels as K
from bildlib.models.layout import fuse
from bildlib.models.lean_common import UnsupportedArchitectureError

ROWS = 16  # the most tokens one call takes (BiLD's calls are at most max_small_steps + 1)
ACTS = {"relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}


class StaticT5:
    """Decoder of a T5ForConditionalGeneration / MT5ForConditionalGeneration at fixed shapes."""

    arch = "t5"
    engine = "static"
    folded_cross = False

    def __init__(self, model, max_len: int = 64, max_src: int = 64, graphs: bool | None = None):
        c = model.config
        if c.dense_act_fn not in ACTS:
            raise UnsupportedArchitectureError(
                f"engine='static' runs T5 with {', '.join(ACTS)}; got {c.dense_act_fn!r}"
            )
        self.model, self.eps, self.dtype, self.device = model, c.layer_norm_epsilon, model.dtype, model.device
        self.H, self.dh, self.d, self.act = c.num_heads, c.d_kv, c.d_model, ACTS[c.dense_act_fn]
        self.scale = c.d_model**-0.5 if getattr(c, "scale_decoder_outputs", False) else None
        self.emb, self.lm, self.ln = (
            model.shared.weight,
            model.lm_head.weight,
            model.decoder.final_layer_norm.weight,
        )
        self.layers = [_weights(b) for b in model.decoder.block]
        self.enc = [_weights(b, cross=False) for b in model.encoder.block]
        self.enc_ln = model.encoder.final_layer_norm.weight
        self.rel = model.decoder.block[0].layer[0].SelfAttention  # compute_bias: HF's buckets
        self.rel_enc = model.encoder.block[0].layer[0].SelfAttention
        self.graphs = self.device.type == "cuda" if graphs is None else graphs
        if self.graphs and self.device.type != "cuda":
            raise ValueError(
                f"engine='static': graphs=True needs a CUDA device, the model is on {self.device}"
            )
        self.captured: dict[int, tuple] = {}  # k -> (a CUDA graph's replay, its logits buffer (k, V))
        self.encoders: dict[int, tuple] = {}  # source bucket n -> (the encoder graph's replay, None)
        self.enc_bias: dict[int, torch.Tensor] = {}  # n -> (H, n, n) the encoder's relative positions
        dev = self.device
        self.pos = torch.zeros(1, dtype=torch.long, device=dev)  # the call's first position
        self.n_src = torch.ones(1, dtype=torch.long, device=dev)  # the source's length
        self.tokens = torch.zeros(ROWS, dtype=torch.long, device=dev)  # the call's tokens, static
        self.kv = torch.zeros(0)
        self._grow(max_len)
        self.ckv = torch.zeros(len(self.layers), 2, self.H, max_src, self.dh, dtype=self.dtype, device=dev)
        self.src = torch.zeros(max_src, dtype=torch.long, device=dev)  # the source, padded
        self.starts = torch.arange(0, 4096, ROWS, device=dev)  # the encoder's row chunks' first rows

    # -- the interface ----------------------------------------------------------------------------
    @torch.inference_mode()
    def begin(self, src: torch.Tensor) -> None:
        """Encode src (1, S), padded to n = max(16, the power of two >= S) rows whose keys are
        masked, and write every decoder layer's cross keys and values; one graph per n."""
        S = src.shape[1]
        if S > self.starts.shape[0] * ROWS:
            raise ValueError(
                f"engine='static' encodes sources of up to {self.starts.shape[0] * ROWS} tokens, got {S}"
            )
        n = max(ROWS, _pow2(S))
        if n > self.ckv.shape[3]:  # a longer source: larger buffers, new graphs
            L, _, H, _, dh = self.ckv.shape
            self.ckv = torch.zeros(L, 2, H, n, dh, dtype=self.dtype, device=self.device)
            self.src = torch.zeros(n, dtype=torch.long, device=self.device)
            self.captured.clear()
            self.encoders.clear()
        self.src.zero_()
        self.src[:S].copy_(src[0])
        self.n_src.fill_(S)
        if n not in self.enc_bias:
            self.enc_bias[n] = self.rel_enc.compute_bias(n, n, device=self.device)[
                0
            ].contiguous()  # (H, n, n)
        if not self.graphs:
            return self.encode(n)
        if n not in self.encoders:
            self.encoders[n] = self._capture(lambda: self.encode(n))
        self.encoders[n][0]()

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Logits (k, V) for tokens (k,), k <= 16, at decoder positions [pos, pos + k)."""
        k = tokens.shape[0]
        if not 1 <= k <= ROWS:
            raise ValueError(f"engine='static' takes 1 to {ROWS} tokens a call, got {k}")
        if pos + k > self.kv.shape[3]:
            self._grow(_pow2(pos + k))
        self.tokens[:k].copy_(tokens)
        self.pos.fill_(pos)
        if not self.graphs:
            return self.step(self.tokens[:k])
        if k not in self.captured:
            self.captured[k] = self._capture(lambda: self.step(self.tokens[:k]))
        replay, out = self.captured[k]
        replay()
        return out.clone()  # the graph writes every call of this length into the same buffer

    def crop(self, drop: int) -> None:
        """Nothing to do: the next call overwrites from the caller's length on."""

    # -- the step: fixed shapes, positions on the device ------------------------------------------
    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits (k, V) of tokens (k,) at positions self.pos + [0, k); writes the cache there."""
        k, H, dh = tokens.shape[0], self.H, self.dh
        rows = self.pos + torch.arange(k, device=tokens.device)  # (k,) positions, on the device
        x = F.embedding(tokens, self.emb)  # (k, d)
        for i, w in enumerate(self.layers):  # 9 launches a layer (10 gated): each norm in its product
            qkv = K.mm(x, w["qkv"], norm=w["ln0"], eps=self.eps).view(k, 3, H, dh).permute(1, 2, 0, 3)
            self.kv[i].index_copy_(2, rows, qkv[1:])  # keys and values (2, H, T, dh) at this call's rows
            a = K.attention(qkv[0], self.kv[i, 0], self.kv[i, 1], self.pos, bias=self.bias)  # (H, k, dh)
            x = K.mm(a.transpose(0, 1).reshape(k, H * dh), w["o"], "add", x)
            q = K.mm(x, w["cq"], norm=w["ln1"], eps=self.eps).view(k, H, dh).transpose(0, 1)
            a = K.attention(q, self.ckv[i, 0], self.ckv[i, 1], self.pos, n_keys=self.n_src)
            x = K.mm(a.transpose(0, 1).reshape(k, H * dh), w["co"], "add", x)
            x = self._ff(x, w)
        # tied T5 heads scale by d_model^-0.5 (HF: scale_decoder_outputs), here in the head's product
        return K.mm(x, self.lm, norm=self.ln, eps=self.eps, scale=self.scale or 1.0)  # (k, V)

    def encode(self, n: int) -> None:
        """The encoder over the padded source self.src[:n] (keys past n_src masked), then each
        decoder layer's cross keys and values into self.ckv[..., :n, :]."""
        H, dh = self.H, self.dh
        x = F.embedding(self.src[:n], self.emb)  # (n, d)
        for w in self.enc:
            qkv = K.mm(x, w["qkv"], norm=w["ln0"], eps=self.eps).view(n, 3, H, dh).permute(1, 2, 0, 3)
            a = torch.cat(
                [
                    K.attention(
                        qkv[0, :, r : r + ROWS],
                        qkv[1],
                        qkv[2],
                        self.starts[r // ROWS : r // ROWS + 1],
                        n_keys=self.n_src,
                        bias=self.enc_bias[n],
                    )
                    for r in range(0, n, ROWS)
                ],
                1,
            )
            x = self._ff(K.mm(a.transpose(0, 1).reshape(n, H * dh), w["o"], "add", x), w)
        for i, w in enumerate(self.layers):  # the encoder's final norm, in each layer's product
            e = K.mm(x, w["ckv"], norm=self.enc_ln, eps=self.eps)  # (n, 2 H dh)
            self.ckv[i, :, :, :n] = e.view(n, 2, H, dh).permute(1, 2, 0, 3)

    # -- internals --------------------------------------------------------------------------------
    def _ff(self, x: torch.Tensor, w: dict) -> torch.Tensor:
        """x + T5's feed-forward of its norm: relu, or gated (T5 v1.1, mT5: act(h wi0) * (h wi1))."""
        ln = dict(norm=w["lnf"], eps=self.eps)  # the norm, in each product
        if "wi0" in w:
            u = K.mm(x, w["wi1"], "mul", K.mm(x, w["wi0"], self.act, **ln), **ln)
        else:
            u = K.mm(x, w["wi"], self.act, **ln)
        return K.mm(u, w["wo"], "add", x)

    def _capture(self, fn) -> tuple:
        """(replay, output) of fn captured in a CUDA graph. The warm-up runs (which compile the
        kernels) and the capture compute this very call: they write what the replay rewrites."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        return graph.replay, out

    def _grow(self, T: int) -> None:
        """KV cache and bias table for T positions, the cache's rows kept; graphs dropped."""
        L, n = len(self.layers), (self.kv.shape[3] if self.kv.dim() == 5 else 0)
        kv = torch.zeros(L, 2, self.H, T, self.dh, dtype=self.dtype, device=self.device)  # (L, 2, H, T, dh)
        if n:
            kv[..., :n, :] = self.kv
        self.kv = kv
        # (H, T, T), relative positions; contiguous (compute_bias returns a permuted view)
        self.bias = self.rel.compute_bias(T, T, device=self.device)[0].contiguous()
        self.captured.clear()


def _weights(block, cross: bool = True) -> dict:
    """A T5Block's weights by short name; q/k/v, and a decoder block's cross k/v, each fused into one
    matrix as the lean engine fuses them (layout.fuse: the HF linears become its views, so no
    weight is held twice)."""
    sa, ff = block.layer[0], block.layer[-1]
    at, dense = sa.SelfAttention, ff.DenseReluDense
    w = {"ln0": sa.layer_norm.weight, "qkv": fuse(at.q, at.k, at.v)[0], "o": at.o.weight,
         "lnf": ff.layer_norm.weight, "wo": dense.wo.weight}  # fmt: skip
    if hasattr(dense, "wi_0"):
        w |= {"wi0": dense.wi_0.weight, "wi1": dense.wi_1.weight}
    else:
        w["wi"] = dense.wi.weight
    if cross:
        ca = block.layer[1]
        x = ca.EncDecAttention
        w |= {"ln1": ca.layer_norm.weight, "cq": x.q.weight, "co": x.o.weight, "ckv": fuse(x.k, x.v)[0]}
    return w


def _pow2(n: int) -> int:
    return 1 << max(n - 1, 1).bit_length()
