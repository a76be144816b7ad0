"""Lean decoder-only models, GPT-2 and Llama-style: the loaded HF model's weights driven by plain
tensor ops and a preallocated KV cache, layer-granular like models.lean_t5 (embed, layer(i, x,
pos), head; positions count from the first prompt token). begin() prefills the prompt but its
last token, which is the decoder's first (models.lm.LM).

Engine "native" (native=True) runs the self-attention as one C++ call (bildlib.kernels.cpu),
each row over exactly its keys, row-invariant by construction; the rest as lean.

Row-invariant, as models.lean_t5 is: every product goes through models.linear and the
self-attention through lean_common.attend_causal, each probed on the machine that runs
(models.rowinv), so a token's logits have the same bits whether its call carries it alone
(vanilla's steps) or among up to 16 tokens (BiLD's check), and lossless BiLD equals vanilla
greedy; the load-time whole-call check (models.wholecall) checks that of the whole call, and
switches an op family (OPS) to one row at a time where it finds otherwise. With torch.addmm and
SDPA instead, a bf16 run on an Intel Xeon with AMX gave a k-token
call other bits than one-token calls for every k, and lossless BiLD differed from vanilla on 2 of
100 val prompts (docs/language-modelling.md). Rounding follows HF's: a biased product rounds
once (torch.addmm's bits, here res + x W^T with the bias as res), the residual add once more.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from bildlib.models.layout import fuse
from bildlib.models.lean_common import Buffers, act_fn, attend_causal, native_pieces, per_row, rms
from bildlib.models.linear import linear
from bildlib.models.wholecall import EachRow, op


class Affine:
    """x W^T (+ b) for W (out, in) through models.linear: y = b + x W^T rounded once, as
    torch.addmm and F.linear round it."""

    __slots__ = ("p", "b", "plain")

    def __init__(self, w: torch.Tensor, b: torch.Tensor | None = None, kind: bool | str = False):
        self.p, self.b = linear(w, kind), b  # kind "int8": the native engine's int8 product (dtype "int8")
        self.plain = self.p  # p on the whole call; p is an EachRow of it where "products" is switched

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # (k, in) -> (k, out)
        if self.b is None:
            return self.p(x)
        return self.p.add(x, self.b.expand(x.shape[0], -1).contiguous())


class _Causal:
    """What both share: prefill, the causal mask as an attention bias, forward as embed / layers /
    head; the op families the whole-call check may switch to one row at a time (set_rows)."""

    # in the order models.wholecall tries them; "call": a k-token call as k one-token calls
    OPS = ("norm", "act", "attention", "products", "call")

    def __init__(self, model, layers: int, heads: int, kv_heads: int, dh: int, native: bool | str = False):
        self.model, self.n_layers, self.off, self.H = model, layers, 0, heads
        # engine "native": self-attention as one C++ call (bildlib.kernels.cpu), on a CPU; native
        # "int8" (dtype "int8"): every product too, in int8 (models.linear.NativeInt8)
        self.cpp = native_pieces(model) if native else None
        self.int8 = native == "int8"
        self.kind = "int8" if self.int8 else False  # the products' kind (models.linear)
        self.engine = "native" if self.cpp is not None else "lean"
        self.rows: frozenset[str] = frozenset()
        self.kv = Buffers(layers, kv_heads, dh, model.dtype, model.device)
        self.scale = dh**-0.5  # scores are q k^T / sqrt(dh); attend takes q scaled
        self.bias = torch.empty(0, 0, 0, dtype=model.dtype)  # (H, T, T): 0 on and below the diagonal

    def begin(self, src: torch.Tensor) -> None:
        """Prefill src (1, P) but its last token; decoder position n is prompt position off + n."""
        self.off = src.shape[1] - 1
        if self.off:
            x = self.embed(src[0, :-1], -self.off)
            for i in range(self.n_layers):
                x = self.layer(i, x, -self.off)

    def set_rows(self, ops) -> None:
        """Run the op families `ops` (of OPS) one row at a time, the rest on the whole call."""
        bad = set(ops) - set(self.OPS)
        if bad:
            raise ValueError(f"set_rows: unknown op families {sorted(bad)}; the {self.arch} engine's "
                             f"are {self.OPS}")
        self.rows = frozenset(ops)
        for a in [self.lm, *(a for w in self.w for a in w.values() if isinstance(a, Affine))]:
            a.p = EachRow(a.plain) if "products" in self.rows else a.plain

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        if "call" in self.rows and tokens.shape[0] > 1:  # the last resort: k one-token calls
            return torch.cat([self.forward(tokens[j : j + 1], pos + j) for j in range(tokens.shape[0])])
        x = self.embed(tokens, pos)
        for i in range(self.n_layers):
            x = self.layer(i, x, pos)
        return self.head(x)

    def crop(self, drop: int) -> None:
        """Nothing to do: the caller's lengths decide what the next call reads and overwrites."""

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, p: int) -> torch.Tensor:
        """Causal self-attention of q (H, k, dh) at prompt positions [p, p + k) over the cached
        keys and values (Hkv, p + k, dh), through attend_causal (row-invariant, probed): (H, k, dh)."""
        kq, n = q.shape[1], p + q.shape[1]
        if self.bias.shape[-1] < n:
            T = 2 * n
            causal = torch.ones(T, T, dtype=torch.bool, device=self.kv.buf.device).tril()
            b = torch.zeros(T, T, dtype=self.bias.dtype, device=causal.device)
            self.bias = b.masked_fill(~causal, torch.finfo(b.dtype).min).expand(self.H, T, T).contiguous()
        if k.shape[0] != self.H:  # grouped-query attention: each key head serves H / Hkv query heads
            k, v = (t.repeat_interleave(self.H // t.shape[0], 0) for t in (k, v))
        causal = per_row if "attention" in self.rows else attend_causal
        return causal(q * self.scale, k, v, self.bias[:, p : p + kq, :n])

    def native(self) -> bool:
        """Whether self-attention runs as one C++ call: the native engine, op family "attention"
        not switched (switched, every call takes the lean path row by row)."""
        return self.cpp is not None and "attention" not in self.rows

    def attend_native(self, i: int, q: torch.Tensor, p: int) -> torch.Tensor:
        """attend() as one C++ call, each row over exactly its keys (row-invariant by construction):
        q (k, H dh) unscaled, layer i's cache holding this call's keys and values: (k, H dh)."""
        return self.cpp.attend_cached(q * self.scale, self.kv.kv[i], self.H, p)


class LeanGPT2(_Causal):
    """GPT2LMHeadModel (learned positions, pre-LayerNorm, Conv1D weights stored (in, out))."""

    arch = "gpt2"

    def __init__(self, model, native: bool | str = False):
        c, t = model.config, model.transformer
        self.dh, self.eps = c.n_embd // c.n_head, c.layer_norm_epsilon
        super().__init__(model, c.n_layer, c.n_head, c.n_head, self.dh, native)
        self.wte, self.wpe = t.wte.weight, t.wpe.weight
        self.ln_f, self.act = t.ln_f, act_fn(c.activation_function)
        self.lm = Affine(model.lm_head.weight, None, self.kind)
        self.blocks = t.h
        self.w = [
            {name: Affine(m.weight.t(), m.bias, self.kind) for name, m in  # Conv1D (in, out): W^T is a view
             (("qkv", b.attn.c_attn), ("o", b.attn.c_proj), ("fc", b.mlp.c_fc), ("proj", b.mlp.c_proj))}
            for b in t.h
        ]  # fmt: skip

    def embed(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        p = self.off + pos
        return F.embedding(tokens, self.wte) + self.wpe[p : p + tokens.shape[0]]  # (k, d)

    def layer(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        b, w, k, H, dh, p = self.blocks[i], self.w[i], x.shape[0], self.H, self.dh, self.off + pos
        h = op(self.rows, "norm", self._ln, x, b.ln_1)
        q2 = w["qkv"](h)  # (k, 3 H dh)
        qkv = q2.view(k, 3, H, dh).permute(1, 2, 0, 3)  # (3, H, k, dh)
        if self.native():
            self.kv.put2(i, qkv[1:], p)
            a = self.attend_native(i, q2[:, : H * dh], p)  # (k, H dh)
        else:
            a = self.attend(qkv[0], *self.kv.put2(i, qkv[1:], p), p).transpose(0, 1).reshape(k, H * dh)
        x = x + w["o"](a)
        h = op(self.rows, "norm", self._ln, x, b.ln_2)
        return x + w["proj"](op(self.rows, "act", self.act, w["fc"](h)))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm(op(self.rows, "norm", self._ln, x, self.ln_f))  # (k, V)

    def _ln(self, x: torch.Tensor, ln: torch.nn.LayerNorm) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], ln.weight, ln.bias, ln.eps)


class LeanLlama(_Causal):
    """LlamaForCausalLM (RMSNorm, rotary positions, grouped-query attention, gated MLP)."""

    arch = "llama"

    def __init__(self, model, native: bool | str = False):
        c, m = model.config, model.model
        self.Hq, self.Hkv = c.num_attention_heads, c.num_key_value_heads
        self.dh = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        super().__init__(model, c.num_hidden_layers, self.Hq, self.Hkv, self.dh, native)
        self.eps, self.act, self.rope = c.rms_norm_eps, act_fn(c.hidden_act), m.rotary_emb
        self.emb, self.norm = m.embed_tokens.weight, m.norm.weight
        self.lm = Affine(model.lm_head.weight, None, self.kind)
        self.w = []
        for b in m.layers:
            a, f = b.self_attn, b.mlp
            qkv, qkv_b = fuse(a.q_proj, a.k_proj, a.v_proj)
            gu = fuse(f.gate_proj, f.up_proj)[0]
            self.w.append({
                "ln0": b.input_layernorm.weight, "qkv": qkv, "qkv_l": Affine(qkv, qkv_b, self.kind),
                "o_l": Affine(a.o_proj.weight, a.o_proj.bias, self.kind),
                "ln1": b.post_attention_layernorm.weight,
                "gu_l": Affine(gu, None, self.kind), "down_l": Affine(f.down_proj.weight, None, self.kind),
            })  # fmt: skip
        self.cos = torch.empty(0)  # (T, dh) rotary tables from HF's own rotary module
        self.sin = torch.empty(0)

    def embed(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        return F.embedding(tokens, self.emb)

    def layer(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        w, k, dh, p = self.w[i], x.shape[0], self.dh, self.off + pos
        qkv = w["qkv_l"](op(self.rows, "norm", rms, x, w["ln0"], self.eps))  # (k, (Hq + 2 Hkv) dh)
        q, kk, v = qkv.split((self.Hq * dh, self.Hkv * dh, self.Hkv * dh), dim=-1)
        q, kk, v = (t.view(k, -1, dh).transpose(0, 1) for t in (q, kk, v))  # (heads, k, dh)
        cos, sin = self._rope(p, k)
        q, kk = apply_rotary_pos_emb(q, kk, cos, sin, unsqueeze_dim=0)
        kv = self.kv.put(i, kk, v, p)
        if self.native():
            a = self.attend_native(i, q.transpose(0, 1).reshape(k, -1), p)  # (k, Hq dh)
        else:
            a = self.attend(q, *kv, p).transpose(0, 1).reshape(k, -1)  # (Hq, k, dh) -> (k, Hq dh)
        x = x + w["o_l"](a)
        g, u = w["gu_l"](op(self.rows, "norm", rms, x, w["ln1"], self.eps)).chunk(2, dim=-1)
        return x + w["down_l"](op(self.rows, "act", lambda a, b: self.act(a) * b, g, u, split=2))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm(op(self.rows, "norm", rms, x, self.norm, self.eps))  # (k, V)

    def _rope(self, p: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cos.shape[0] < p + k:
            T = 2 * (p + k)
            ids = torch.arange(T, device=self.emb.device)[None]
            cos, sin = self.rope(self.emb[:1], ids)  # (1, T, dh) each, in the model's dtype
            self.cos, self.sin = cos[0], sin[0]
        return self.cos[p : p + k], self.sin[p : p + k]
