"""Lean decoder-only models, GPT-2 and Llama-style: the loaded HF model's weights driven by plain
tensor ops and a preallocated KV cache, layer-granular like models.lean_t5 (embed, layer(i, x,
pos), head; positions count from the first prompt token). begin() prefills the prompt but its
last token, which is the decoder's first (models.lm.LM)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from bildlib.models.lean_common import Buffers, act_fn, fuse, rms


class _Causal:
    """What both share: prefill, the causal mask table, forward as embed / layers / head."""

    def __init__(self, model, layers: int, kv_heads: int, dh: int):
        self.model, self.n_layers, self.off = model, layers, 0
        self.kv = Buffers(layers, kv_heads, dh, model.dtype, model.device)
        self.causal = torch.empty(0, 0, dtype=torch.bool)  # (T, T) lower triangle

    def begin(self, src: torch.Tensor) -> None:
        """Prefill src (1, P) but its last token; decoder position n is prompt position off + n."""
        self.off = src.shape[1] - 1
        if self.off:
            x = self.embed(src[0, :-1], -self.off)
            for i in range(self.n_layers):
                x = self.layer(i, x, -self.off)

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        x = self.embed(tokens, pos)
        for i in range(self.n_layers):
            x = self.layer(i, x, pos)
        return self.head(x)

    def crop(self, drop: int) -> None:
        """Nothing to do: the caller's lengths decide what the next call reads and overwrites."""

    def mask(self, p: int, k: int) -> torch.Tensor | None:
        """Rows [p, p + k) of the causal mask over keys [0, p + k); None for one query (it sees all)."""
        if k == 1:
            return None
        if self.causal.shape[0] < p + k:
            T = 2 * (p + k)
            self.causal = torch.ones(T, T, dtype=torch.bool, device=self.kv.buf.device).tril()
        return self.causal[p : p + k, : p + k]


class LeanGPT2(_Causal):
    """GPT2LMHeadModel (learned positions, pre-LayerNorm, Conv1D weights stored (in, out))."""

    arch = "gpt2"

    def __init__(self, model):
        c, t = model.config, model.transformer
        self.H, self.dh, self.eps = c.n_head, c.n_embd // c.n_head, c.layer_norm_epsilon
        super().__init__(model, c.n_layer, self.H, self.dh)
        self.wte, self.wpe, self.lm = t.wte.weight, t.wpe.weight, model.lm_head.weight
        self.ln_f, self.act = t.ln_f, act_fn(c.activation_function)
        self.blocks = t.h

    def embed(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        p = self.off + pos
        return F.embedding(tokens, self.wte) + self.wpe[p : p + tokens.shape[0]]  # (k, d)

    def layer(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        b, k, H, dh, p = self.blocks[i], x.shape[0], self.H, self.dh, self.off + pos
        h = F.layer_norm(x, x.shape[-1:], b.ln_1.weight, b.ln_1.bias, self.eps)
        qkv = torch.addmm(b.attn.c_attn.bias, h, b.attn.c_attn.weight).view(k, 3, H, dh).transpose(0, 2)
        kk, v = self.kv.put(i, qkv[:, 1], qkv[:, 2], p)  # (H, p + k, dh) each
        a = F.scaled_dot_product_attention(qkv[:, 0], kk, v, attn_mask=self.mask(p, k))
        x = x + torch.addmm(b.attn.c_proj.bias, a.transpose(0, 1).reshape(k, H * dh), b.attn.c_proj.weight)
        h = F.layer_norm(x, x.shape[-1:], b.ln_2.weight, b.ln_2.bias, self.eps)
        h = self.act(torch.addmm(b.mlp.c_fc.bias, h, b.mlp.c_fc.weight))
        return x + torch.addmm(b.mlp.c_proj.bias, h, b.mlp.c_proj.weight)

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.ln_f(x), self.lm)  # (k, V)


class LeanLlama(_Causal):
    """LlamaForCausalLM (RMSNorm, rotary positions, grouped-query attention, gated MLP)."""

    arch = "llama"

    def __init__(self, model):
        c, m = model.config, model.model
        self.Hq, self.Hkv = c.num_attention_heads, c.num_key_value_heads
        self.dh = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
        super().__init__(model, c.num_hidden_layers, self.Hkv, self.dh)
        self.eps, self.act, self.rope = c.rms_norm_eps, act_fn(c.hidden_act), m.rotary_emb
        self.emb, self.norm, self.lm = m.embed_tokens.weight, m.norm.weight, model.lm_head.weight
        self.w = []
        for b in m.layers:
            a, f = b.self_attn, b.mlp
            qkv, qkv_b = fuse(a.q_proj, a.k_proj, a.v_proj)
            gu = fuse(f.gate_proj, f.up_proj)[0]
            self.w.append(
                {
                    "ln0": b.input_layernorm.weight,
                    "qkv": qkv,
                    "qkv_b": qkv_b,
                    "o": a.o_proj,
                    "ln1": b.post_attention_layernorm.weight,
                    "gu": gu,
                    "down": f.down_proj.weight,
                }
            )
        self.cos = torch.empty(0)  # (T, dh) rotary tables from HF's own rotary module
        self.sin = torch.empty(0)

    def embed(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        return F.embedding(tokens, self.emb)

    def layer(self, i: int, x: torch.Tensor, pos: int) -> torch.Tensor:
        w, k, dh, p = self.w[i], x.shape[0], self.dh, self.off + pos
        qkv = F.linear(rms(x, w["ln0"], self.eps), w["qkv"], w["qkv_b"])  # (k, (Hq + 2 Hkv) dh)
        q, kk, v = qkv.split((self.Hq * dh, self.Hkv * dh, self.Hkv * dh), dim=-1)
        q, kk, v = (t.view(k, -1, dh).transpose(0, 1) for t in (q, kk, v))  # (heads, k, dh)
        cos, sin = self._rope(p, k)
        q, kk = apply_rotary_pos_emb(q, kk, cos, sin, unsqueeze_dim=0)
        kk, v = self.kv.put(i, kk, v, p)
        a = F.scaled_dot_product_attention(
            q, kk, v, attn_mask=self.mask(p, k), enable_gqa=self.Hq != self.Hkv
        )
        x = x + w["o"](a.transpose(0, 1).reshape(k, -1))
        g, u = F.linear(rms(x, w["ln1"], self.eps), w["gu"]).chunk(2, dim=-1)
        return x + F.linear(self.act(g) * u, w["down"])

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(rms(x, self.norm, self.eps), self.lm)  # (k, V)

    def _rope(self, p: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cos.shape[0] < p + k:
            T = 2 * (p + k)
            ids = torch.arange(T, device=self.emb.device)[None]
            cos, sin = self.rope(self.emb[:1], ids)  # (1, T, dh) each, in the model's dtype
            self.cos, self.sin = cos[0], sin[0]
        return self.cos[p : p + k], self.sin[p : p + k]
