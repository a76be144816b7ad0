"""Many sentences at once (docs/batching.md): a ragged batch of decoder rows, each with its own length.

A batch model has B rows; row r holds its own source and its own decoder tokens `ids[r]`.
forward(rows, tokens) runs tokens[j] (k_j of them) for row rows[j], each at that row's own
position, in one call, and returns one logits tensor (k_j, V) per row; crop(r, n) rolls row r
alone back. Rows that are done simply leave `rows`: nothing of theirs runs.

`LeanT5Batch` pads the call to K = max k_j tokens: row r writes its keys and values at
[pos_r, pos_r + K) of its own cache row and its queries see keys [0, pos_r + i] through the
causal relative-position bias table, so the padding past a row's k_j is never read before a
later call overwrites it (the lean engines' rule: lengths live with the caller). Sources are
padded to the longest and masked in encoder self-attention and cross-attention.
`Looped` is any batch-1 LM per row, called one after another: the reference the batched
engine is tested against, and the path of every architecture the batched engine lacks.

    rows = batched(large, 8)        # LeanT5Batch for a lean T5, Looped otherwise
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bildlib.models.engine import HF
from bildlib.models.lean_causal import LeanGPT2, LeanLlama
from bildlib.models.lean_common import longer, rms
from bildlib.models.lean_t5 import LeanT5
from bildlib.models.lm import LM, check_source


def check_sources(sources, vocab: int, limit: int | None = None, model: str = "the model") -> list:
    """A non-empty list of sources, each one check_source accepts; errors name the row."""
    if isinstance(sources, torch.Tensor) or not isinstance(sources, list | tuple):
        raise TypeError(f"sources must be a list of sources (lists of ids), got {type(sources).__name__}")
    if not sources:
        raise ValueError("sources is empty: a batch needs at least one source")
    out = []
    for r, s in enumerate(sources):
        try:
            out.append(check_source(s, vocab, limit, model))
        except (TypeError, ValueError) as e:
            raise type(e)(f"sources[{r}]: {e}") from None
    return out


class Looped:
    """B batch-1 models, one per row, called in turn: correct for every engine and for fakes."""

    def __init__(self, lm, rows: int):
        self.lm, self.capacity = lm, rows
        self.row = [_clone(lm) for _ in range(rows)]
        self.n = 0  # rows in use: the sources of the last start()
        self.eos, self.name, self.device = lm.eos, lm.name, lm.device

    @property
    def width(self) -> int:
        return self.lm.width

    @property
    def ids(self) -> list[list[int]]:
        return [m.ids for m in self.row[: self.n]]

    def start(self, sources: list) -> list[int]:
        """Take B <= capacity sources: rows 0 to B - 1 start on them (a last, shorter chunk
        leaves the other rows idle)."""
        _check_capacity(self, len(sources))
        xs = [s[0].tolist() if isinstance(s, torch.Tensor) else s for s in sources]  # as bild passes them
        self.n = len(xs)
        return [m.start(x) for m, x in zip(self.row, xs, strict=False)]

    def forward(self, rows: list[int], tokens: list[list[int]]) -> list[torch.Tensor]:
        return [self.row[r].forward(t)[:, : self.width] for r, t in zip(rows, tokens, strict=True)]

    def crop(self, r: int, n: int) -> None:
        self.row[r].crop(n)


class LeanT5Batch:
    """A lean T5's decoder over a ragged batch of up to `rows` rows (see the module's docstring)."""

    def __init__(self, lm: LM, rows: int, T: int = 128):
        if not isinstance(getattr(lm, "impl", None), LeanT5):
            raise TypeError(f"{lm.name}: LeanT5Batch needs a T5 on the lean engine; use batched()")
        self.lm, self.t, self.capacity = lm, lm.impl, rows
        self.eos, self.name, self.device = lm.eos, lm.name, lm.device
        t = self.t
        self.kv = torch.zeros(t.n_layers, 2, rows, t.H, T, t.dh, dtype=t.emb.dtype, device=lm.device)
        self.ids: list[list[int]] = []
        self.cross: list[tuple[torch.Tensor, torch.Tensor]] = []  # per layer (B, H, S, dh) K and V
        self.src_mask = torch.empty(0)  # (B, S): 0 on a source token, the dtype's min on padding

    @property
    def width(self) -> int:
        return self.lm.width

    def start(self, sources: list) -> list[int]:
        """Take B <= capacity sources (any lengths) and encode them in one padded call."""
        _check_capacity(self, len(sources))
        xs = check_sources(sources, self.lm.vocab, self.lm.max_source, self.lm.name)
        S = max(x.shape[1] for x in xs)
        src = torch.zeros(len(xs), S, dtype=torch.long, device=self.device)  # 0-padded, masked below
        mask = torch.full((len(xs), S), torch.finfo(self.t.emb.dtype).min, device=self.device)
        for r, x in enumerate(xs):
            src[r, : x.shape[1]], mask[r, : x.shape[1]] = x[0], 0.0
        self.src_mask, self.ids = mask.to(self.t.emb.dtype), [[] for _ in xs]  # as HF's padding mask
        self._encode(src)
        return [int(self.lm.model.config.decoder_start_token_id)] * len(xs)

    @torch.inference_mode()
    def forward(self, rows: list[int], tokens: list[list[int]]) -> list[torch.Tensor]:
        """Logits (k_j, V) of tokens[j] run for row rows[j], all rows in one call. The projections
        and feed-forwards run on the sum k_j real tokens, packed; only attention pads them to
        (R, K) slots, K = max k_j."""
        t, dev = self.t, self.device
        if len(rows) != len(tokens) or any(not k for k in tokens):
            raise ValueError("forward() needs one non-empty token list per row")
        R, K = len(rows), max(map(len, tokens))
        pos = [len(self.ids[r]) for r in rows]  # each row's length: its tokens go at [pos, pos + k)
        N = max(pos) + K  # keys [0, N) cover every row's prefix and this call
        flat = [(x, r, p + c, j * K + c) for j, (r, p, tk) in enumerate(zip(rows, pos, tokens, strict=True))
                for c, x in enumerate(tk)]  # fmt: skip
        x, row, at, slot = torch.tensor(flat, device=dev).T  # (n,) each: token, cache row, position, slot
        t._grow(N)
        self.kv = longer(self.kv, N)  # (L, 2, B, H, T >= N, dh)
        run = rows == list(range(rows[0], rows[0] + R))  # consecutive rows: views, not gathers
        idx = slice(rows[0], rows[0] + R) if run else torch.tensor(rows, device=dev)  # (R,) rows read
        qpos = torch.tensor(pos, device=dev)[:, None] + torch.arange(K, device=dev)  # (R, K)
        bias = t.bias[:, qpos, :N].transpose(0, 1).reshape(R * t.H, K, N)  # the causal mask folded in
        cmask = self.src_mask[idx][:, None, None].expand(R, t.H, K, -1).reshape(R * t.H, K, -1)
        ragged = any(len(tk) < K for tk in tokens)
        call = _Call(R, K, slot if ragged else None, idx, row, at, N, bias, cmask)
        h = F.embedding(x, t.emb)  # (n, d)
        for i, w in enumerate(t.dec):
            h = self._block(h, w, call, i)
        logits = t.head(h)[:, : self.width]  # (n, V)
        for r, tk in zip(rows, tokens, strict=True):
            self.ids[r] += tk
        return list(logits.split([len(tk) for tk in tokens]))

    def crop(self, r: int, n: int) -> None:
        if not 0 <= n <= len(self.ids[r]):
            raise ValueError(f"{self.name}: cannot crop row {r} to {n} tokens, it holds {len(self.ids[r])}")
        del self.ids[r][n:]  # the cache row past n is overwritten before it is read again

    # -- internals ------------------------------------------------------------------------------
    def _encode(self, src: torch.Tensor) -> None:
        """The encoder over src (B, S) with padded keys masked; every layer's cross K/V."""
        t = self.t
        B, S = src.shape
        x = F.embedding(src.reshape(-1), t.emb)  # (B * S, d): every slot a token, padding masked as keys
        rel = t.rel_enc.compute_bias(S, S, device=x.device)[0]  # (H, S, S)
        bias = (rel[None] + self.src_mask[:, None, None]).reshape(B * t.H, S, S)  # padded keys masked
        c = _Call(B, S, None, None, None, None, S, bias)
        for w in t.enc:
            x = self._block(x, w, c, None)
        e = rms(x, t.enc_ln, t.eps).view(B, S, -1)
        self.cross = []
        for w in t.dec:
            kv = F.linear(e, w["ckv"]).view(B, S, 2, t.H, t.dh).permute(2, 0, 3, 1, 4)  # (2, B, H, S, dh)
            self.cross.append((kv[0].contiguous(), kv[1].contiguous()))  # rows gather or slice cheaply

    def _block(self, x: torch.Tensor, w: dict, c: _Call, i: int | None) -> torch.Tensor:
        """One T5 block on x (n, d), the tokens of call c packed; i None: an encoder block (c's
        slots are every position), else decoder layer i (its cache written, cross-attention)."""
        t = self.t
        n, H, dh = x.shape[0], t.H, t.dh
        qkv = F.linear(rms(x, w["ln0"], t.eps), w["qkv"]).view(n, 3, H, dh)
        if i is None:
            k, v = (c.pad(qkv[:, m]) for m in (1, 2))  # (R, H, K, dh)
        else:
            kv = self.kv[i]  # (2, B, H, T, dh)
            kv[0][c.row, :, c.at], kv[1][c.row, :, c.at] = qkv[:, 1], qkv[:, 2]  # (n, H, dh) each
            k, v = kv[0][c.idx, :, : c.N], kv[1][c.idx, :, : c.N]  # (R, H, N, dh)
        x = x + F.linear(c.unpad(_attend(c.pad(qkv[:, 0]), k, v, c.bias)), w["o"])
        if i is not None:  # cross-attention over each row's source, its padding masked
            q = F.linear(rms(x, w["ln1"], t.eps), w["cq"]).view(n, H, dh)
            ck, cv = self.cross[i]
            x = x + F.linear(c.unpad(_attend(c.pad(q), ck[c.idx], cv[c.idx], c.cmask)), w["co"])
        h = rms(x, w["lnf"], t.eps)
        h = t.act(F.linear(h, w["wi0"])) * F.linear(h, w["wi1"]) if t.gated else t.act(F.linear(h, w["wi"]))
        return x + F.linear(h, w["wo"])



@dataclass
class _Call:
    """One call's layout: R rows of up to K tokens; token m of the packed (n, ...) tensors sits
    in slot[m] of the (R * K) padded ones (slot None: no padding, n = R * K), belongs to cache row
    row[m] at position at[m]; rows idx (R,) (a slice where they are consecutive) read keys
    [0, N); bias (R * H, K, N) self-attention, cmask (R * H, K, S) cross-attention."""

    R: int
    K: int
    slot: torch.Tensor | None
    idx: torch.Tensor | slice | None
    row: torch.Tensor | None
    at: torch.Tensor | None
    N: int
    bias: torch.Tensor
    cmask: torch.Tensor | None = None

    def pad(self, y: torch.Tensor) -> torch.Tensor:
        """(n, H, dh) packed -> (R, H, K, dh), zeros in the padding slots."""
        if self.slot is not None:
            y = y.new_zeros(self.R * self.K, *y.shape[1:]).index_copy_(0, self.slot, y)
        return y.view(self.R, self.K, *y.shape[1:]).transpose(1, 2)

    def unpad(self, a: torch.Tensor) -> torch.Tensor:
        """(R, H, K, dh) -> (n, H * dh), the padding slots dropped."""
        a = a.transpose(1, 2).reshape(self.R * self.K, -1)
        return a if self.slot is None else a[self.slot]


def _attend(q, k, v, bias) -> torch.Tensor:
    """softmax(q k^T + bias) v for q (R, H, K, dh), k and v (R, H, N, dh), bias (R*H, K, N); the
    same three ops as lean_common.attend, over R*H matrices (softmax in fp32)."""
    R, H, K, dh = q.shape
    s = torch.baddbmm(bias, q.reshape(R * H, K, dh), k.reshape(R * H, -1, dh).transpose(1, 2))
    a = torch.softmax(s, -1, dtype=torch.float32).to(v.dtype) @ v.reshape(R * H, -1, dh)
    return a.view(R, H, K, dh)


def batched(lm, rows: int):
    """A batch model of `rows` rows over lm: LeanT5Batch for a T5 on the lean engine (one call per
    step for all rows), Looped otherwise (hf engine, decoder-only, fakes: one call per row)."""
    if isinstance(getattr(lm, "impl", None), LeanT5):
        return LeanT5Batch(lm, rows)
    return Looped(lm, rows)


def _check_capacity(m, n: int) -> None:
    if n > m.capacity:
        raise ValueError(f"{m.name}: a batch of {n} sources, but this batch model was made for "
                         f"{m.capacity} rows (make it with rows >= {n})")  # fmt: skip


def _clone(lm):
    """A second batch-1 model on lm's weights with its own cache (lm.clone() where it has one)."""
    if isinstance(lm, LM):
        if not isinstance(lm.impl, HF | LeanT5 | LeanGPT2 | LeanLlama):  # e.g. an early-exit view
            raise ValueError(f"{lm.name}: a batch runs models on the hf or lean engine, not on a "
                             f"{type(lm.impl).__name__}")  # fmt: skip
        return LM(lm.model, lm.tok, lm.name, lm.engine)  # a new engine object, the same weights
    if hasattr(lm, "clone"):
        return lm.clone()
    c = copy.copy(lm)  # a fake (tutorial.fakes): its state is ids and source
    c.ids, c.source = [], None
    return c
