"""What the lean engines share: the preallocated KV cache, RMS norm, attention (each path probed
row-invariant where it runs), activations by their HF name. Weights' layout and fusing: models.layout."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.activations import ACT2FN

from bildlib.models import rowinv


def native_pieces(model):
    """bildlib.kernels.cpu's built module for a model on a CPU (engine "native"), or None: another
    device, or nothing could be built here (cpu.why() says why, logged once)."""
    if model.device.type != "cpu":
        return None
    from bildlib.kernels import cpu

    return cpu.load()


class UnsupportedArchitectureError(ValueError):
    """engine="lean" asked of a model the lean engine does not implement."""


class Buffers:
    """Every layer's keys and values, (L, 2, H, T, dh), preallocated; T doubles when a sequence
    outgrows it (existing entries are copied once). Lengths live with the caller: put() writes
    positions [pos, pos + k) and returns the views [0, pos + k)."""

    def __init__(self, layers: int, heads: int, dh: int, dtype: torch.dtype, device, T: int = 128):
        self.buf = torch.zeros(layers, 2, heads, T, dh, dtype=dtype, device=device)
        self._views()

    def _views(self) -> None:
        self.T = self.buf.shape[-2]
        self.k, self.v = list(self.buf[:, 0]), list(self.buf[:, 1])  # per layer (H, T, dh) views
        self.kv = list(self.buf)  # per layer (2, H, T, dh) views

    def room(self, n: int) -> None:
        """Room for n positions: buf grown (doubling, longer()) where it holds fewer."""
        if n > self.T:
            self.buf = longer(self.buf, n)
            self._views()

    def put(self, i: int, k: torch.Tensor, v: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = pos + k.shape[1]  # k, v: (H, k, dh)
        self.room(n)
        K, V = self.k[i], self.v[i]
        K[:, pos:n] = k
        V[:, pos:n] = v
        return K[:, :n], V[:, :n]  # (H, n, dh) each

    def put2(self, i: int, kv: torch.Tensor, pos: int) -> tuple[torch.Tensor, torch.Tensor]:
        """put() for keys and values as one (2, H, k, dh) tensor: one copy instead of two."""
        n = pos + kv.shape[2]
        self.room(n)
        self.kv[i].narrow(2, pos, kv.shape[2]).copy_(kv)
        return self.k[i].narrow(1, 0, n), self.v[i].narrow(1, 0, n)  # (H, n, dh) each


def longer(buf: torch.Tensor, n: int) -> torch.Tensor:
    """A KV buffer (..., T, dh) with room for n positions: buf itself, or a copy with T = 2n
    (doubling, so a growing sequence copies rarely) holding buf's entries."""
    T = buf.shape[-2]
    if n <= T:
        return buf
    grown = buf.new_zeros(*buf.shape[:-2], 2 * n, buf.shape[-1])
    grown[..., :T, :] = buf
    return grown


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """T5LayerNorm / LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * w, the mean taken in fp32 (in fp32
    torch's fused rms_norm gives the same bits, 5 us sooner; in half precision HF's rounding)."""
    if x.dtype == torch.float32 and w.dtype == torch.float32:
        return F.rms_norm(x, w.shape, w, eps)
    v = x.float().pow(2).mean(-1, keepdim=True)
    return w * (x.float() * torch.rsqrt(v + eps)).to(w.dtype)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """softmax(q k^T + bias) v for q (H, k, dh), k and v (H, n, dh), bias (H, k, n) or None; no
    1/sqrt(dh) (T5 folds it into its weights). Each query row's result has the same bits whatever
    the number of rows: the path (_attend as is, padded to a few rows, or row by row) is probed
    once per process, dtype, head shape and thread count (models.rowinv); in float32 on an Intel
    Xeon with AMX, bmm's one- and two-row products sum in other orders than more rows'."""
    H, dh, threads = q.shape[0], q.shape[2], torch.get_num_threads()
    key = (q.dtype, q.device.type, H, dh, bias is None, rowinv.FIRST_ONLY, threads)
    f = _ATTEND.get(key)
    if f is None:
        f = _ATTEND[key] = _attend_path(key)
    return f(q, k, v, bias)


def attend_once(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """attend's three ops over every row at once, unprobed: an encoder's attention. It runs once
    per source, and every decoder that encodes a source runs it alike, so no row needs its one-row
    bits; the large model's encoder took 27 ms a Multi30k sentence row by row (attend's path for
    its heads on an AVX2 EPYC), 16 ms so (float32, 2 threads)."""
    return _attend(q, k, v, bias)


def attend_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor,
                  prefix: bool = False) -> torch.Tensor:
    """A decoder's self-attention for a call of k new tokens: q (H, k, dh) over the n cached keys
    and values (H, n, dh), the last k of them this call's, bias (H, k, n) causal (finfo.min past
    each row's position). A row's result must not depend on the keys masked after it: vanilla
    decoding gives the row exactly its keys, a k-token call gives it n keys, the later ones
    masked. On an Intel Xeon with AMX, bf16 attention over masked trailing keys summed otherwise
    (lossless BiLD then differed from vanilla on val sentences: docs/engines.md). So the path is
    probed (once per process, dtype, head shape and thread count; models.rowinv), the first whose
    rows in one call equal its own one-row calls over exactly their keys:
    - "masked": the k rows in one call (attend);
    - "prefix" (where the caller allows it: `prefix`): the k rows in one call with every sum over
      keys taken in key order (attend_prefix), invariant by construction, at a call's cost;
    - "per-row": row j alone over its own n - k + j + 1 keys, the very call vanilla's one-token
      step makes there, at k calls' cost (_attend as it is: one query row needs no padding)."""
    key = (q.dtype, q.device.type, q.shape[0], q.shape[2], prefix, rowinv.FIRST_ONLY, torch.get_num_threads())
    f = _CAUSAL.get(key)
    if f is None:
        f = _CAUSAL[key] = _causal_path(key)
    return f(q, k, v, bias)


PREFIX_ROWS = 16  # attend_prefix's rows per piece: its memory grows with rows x keys x dh


def attend_prefix(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """attend_causal's rows in one call, each row's result the bits it has alone over exactly its
    keys, by construction rather than by a kernel's luck: a score is a float32 sum over dh of exact
    products (the (H, k, n, dh) products summed over their last axis, the same reduction for every
    score), rounded and biased in q's dtype as HF rounds; the softmax's denominator and the
    probability-weighted values are running sums in key order (cumsum), read at each row's last
    key, so the masked keys after it (exp 0) are never added in. No bmm: a matrix kernel's summation
    order may follow the row or key count (gemv against gemm; docs/engines.md). By construction
    where cumsum is a sequential scan (ATen's CPU kernel); a GPU's parallel scan is probed like the
    rest (attend_causal), and the whole-call check runs everywhere."""
    kq, n = q.shape[1], k.shape[1]
    if kq > PREFIX_ROWS:  # pieces of PREFIX_ROWS rows, each over the keys up to its last row's
        ends = [n - kq + min(j + PREFIX_ROWS, kq) for j in range(0, kq, PREFIX_ROWS)]
        return torch.cat([attend_prefix(q[:, j : j + PREFIX_ROWS], k[:, :e], v[:, :e],
                                        bias[:, j : j + PREFIX_ROWS, :e])
                          for j, e in zip(range(0, kq, PREFIX_ROWS), ends, strict=True)], 1)  # fmt: skip
    s = torch.mul(q.float().unsqueeze(2), k.float().unsqueeze(1)).sum(-1)  # (H, kq, n)
    s = s.add_(bias) if q.dtype == torch.float32 else (s.to(q.dtype) + bias).float()
    e = s.sub_(s.amax(-1, keepdim=True)).exp_()  # (H, kq, n); 0 past each row's position
    # row j's running sums at its last key n - kq + j: the diagonal of the last kq keys' columns
    den = e.cumsum(-1)[:, :, n - kq :].diagonal(0, 1, 2)  # (H, kq)
    pv = torch.mul(e.unsqueeze(-1), v.float().unsqueeze(1)).cumsum(2)  # (H, kq, n, dh)
    num = pv[:, :, n - kq :].diagonal(0, 1, 2).transpose(1, 2)  # (H, kq, dh)
    return (num / den.unsqueeze(-1)).to(q.dtype)


def per_row(q, k, v, bias) -> torch.Tensor:
    """attend_causal one query row at a time, each over exactly its own keys (_attend as it is)."""
    kq, n = q.shape[1], k.shape[1]
    if kq == 1:  # vanilla's step
        return _attend(q, k, v, bias)
    return torch.cat([_attend(q[:, j : j + 1], k[:, : n - kq + j + 1], v[:, : n - kq + j + 1],
                              bias[:, j : j + 1, : n - kq + j + 1]) for j in range(kq)], 1)  # fmt: skip


_CAUSAL: dict[tuple, object] = {}  # (dtype, device, H, dh, prefix, rowinv.FIRST_ONLY, threads) -> its path


def _causal_path(key: tuple):
    """The first path of attend_causal ("masked", "prefix" where allowed, then "per-row") whose
    rows in one call equal, bit for bit, its own one-row calls over exactly their keys (what
    vanilla's step runs), for calls of 1 to 16 tokens after 0, 7 and 30 cached."""
    dtype, device, H, dh, prefix, *_ = key
    g = torch.Generator().manual_seed(2)

    def check(f) -> bool:
        for sharp in (False, True):
            for pos in (0, 7, 30):
                for kq in range(1, rowinv.ROWS + 1):
                    n = pos + kq
                    q, k, v = (torch.randn(H, m, dh, generator=g) for m in (kq, n, n))
                    b = torch.randn(H, kq, n, generator=g)
                    if sharp and pos:
                        k, v, b = _sharp_keys(k, v, b, dtype)
                    q, k, v, b = (t.to(device=device, dtype=dtype) for t in (q, k, v, b))
                    b = b.masked_fill(torch.ones(kq, n, dtype=torch.bool, device=device).triu(pos + 1),
                                      torch.finfo(dtype).min)  # fmt: skip
                    alone = torch.cat([f(q[:, j : j + 1], k[:, : pos + j + 1], v[:, : pos + j + 1],
                                         b[:, j : j + 1, : pos + j + 1]) for j in range(kq)], 1)  # fmt: skip
                    if not torch.equal(f(q, k, v, b), alone):
                        return False
        return True

    label = (str(dtype).removeprefix("torch."), H, dh, "causal, prefix allowed" if prefix else "causal")
    paths = {"masked": attend} | ({"prefix": attend_prefix} if prefix else {}) | {"per-row": per_row}
    return rowinv.choose("attention", label, paths, check, device)[1]


def _sharp_keys(k: torch.Tensor, v: torch.Tensor, b: torch.Tensor, dtype: torch.dtype):
    """Keys and values that show attention's summation order, as rowinv.sharp's rows show a
    product's: key 1 a copy of key 0 with the same bias, so every row gives both the same weight,
    and value 1 the negative of value 0, both scaled large. Their terms cancel exactly, while the
    output's partial sums pass through large values: a kernel that adds the other keys' terms in
    another order (masked trailing keys or not) rounds otherwise, by far more than bf16 rounding
    hides. Random keys alone let a masked bf16 path pass the probe on an emulated AMD EPYC Milan
    (AVX2) where real sentences' calls then kept no one-token call's bits. k, v (H, n, dh), b
    (H, kq, n), float32; returned changed copies."""
    k, v, b = k.clone(), v.clone(), b.clone()
    scale = 2.0**8 if dtype == torch.bfloat16 or dtype == torch.float16 else 2.0**16
    k[:, 1], b[:, :, 1] = k[:, 0], b[:, :, 0]
    v[:, 0] *= scale
    v[:, 1] = -v[:, 0]
    return k, v, b


def _attend(q, k, v, bias) -> torch.Tensor:
    """attend's three plain ops: at the decoder's shapes (k and n small) torch's SDPA takes its
    math path at twice the cost (20 us against 10 per call), and bmm skips matmul's reshapes (6 us
    against 10). An operand that starts off a 16-byte boundary runs on an aligned copy: cuBLAS
    picks its kernel by the operands' addresses, and on an H200 bf16 baddbmm over an unaligned
    bias gave other bits than over the same values aligned, whatever the row count (figures/gpu)."""
    q, k, v, bias = (_aligned(t) for t in (q, k, v, bias))
    s = torch.bmm(q, k.transpose(1, 2)) if bias is None else torch.baddbmm(bias, q, k.transpose(1, 2))
    if s.dtype != torch.float32:  # s: (H, k, n); the softmax runs in fp32
        return torch.bmm(torch.softmax(s, -1, dtype=torch.float32).to(v.dtype), v)
    return torch.bmm(torch.softmax(s, -1), v)  # (H, k, dh)


def _aligned(t: torch.Tensor | None) -> torch.Tensor | None:
    """t, or a copy of it in fresh (aligned) memory where its first element is off a 16-byte boundary."""
    return t if t is None or t.data_ptr() % 16 == 0 else t.clone(memory_format=torch.contiguous_format)


_ATTEND: dict[tuple, object] = {}  # (dtype, device, H, dh, no bias, rowinv.FIRST_ONLY, threads) -> its path


def _attend_path(key: tuple):
    """The first row-invariant path of _attend at this key, probed over 1 to 41 keys (a decoder
    starts at one; on an Intel Xeon float32 kernels summed otherwise below four keys): a query
    row's (H, dh) query and (H, n) bias are one (H dh + H n) row of the probe."""
    dtype, device, H, dh, no_bias, *_ = key
    g = torch.Generator().manual_seed(1)
    keys = (1, 2, 3, 5, 8, 13, 20, 41)
    kvs = [torch.randn(2, H, n, dh, generator=g).to(device=device, dtype=dtype) for n in keys]

    def rows(f, kv):  # f over probe rows: x (r, H dh + H n) -> (r, H dh)
        def row_fn(x):
            r, n = x.shape[0], kv.shape[2]
            q = x[:, : H * dh].reshape(r, H, dh).transpose(0, 1)
            b = None if no_bias else x[:, H * dh :].reshape(r, H, n).transpose(0, 1)
            return f(q, kv[0], kv[1], b).transpose(0, 1).reshape(r, -1)

        return row_fn

    def check(f) -> bool:
        return not any(rowinv.probe(rows(f, kv), H * dh + H * kv.shape[2], dtype, device) for kv in kvs)

    label = (str(dtype).removeprefix("torch."), H, dh, "no bias" if no_bias else "bias")
    return rowinv.choose("attention", label, rowinv.paths(_attend, 1, (0, 3)), check, device)[1]


def act_fn(name: str):
    """The activation HF uses under this config name (relu and silu as plain functions)."""
    return {"relu": F.relu, "silu": F.silu}.get(name) or ACT2FN[name]

