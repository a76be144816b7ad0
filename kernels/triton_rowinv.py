"""Row-invariant Triton kernels for a decoder step of 1 to 16 tokens: a row's result has the same
bits whether the row comes alone (vanilla greedy's one-token steps) or among up to 15 others (BiLD's
verifying call), at any position among them.

How (after Thinking Machines' batch-invariant kernels, "Defeating Nondeterminism in LLM
Inference", 2025): every launch works on a fixed tile of 16 rows, padded with zeros, whatever the
number of rows it is given; the tile sizes, the split of the inner dimension and the order of the
final sum depend on the weight's shape only, never on the rows. A tensor-core product computes each
row of its tile alone, and the sums run in one fixed order, so the other rows cannot change a row.

- `mm(x, w, epilogue=...)`: x (M, K) @ w (N, K)^T, accumulated in float32 and rounded once, with a
  residual added, a product taken or an activation applied before that rounding. With few column
  tiles the inner dimension is cut into a fixed number of slices, summed in slice order by a second
  kernel (deterministic; no atomics).
- `rms_norm(x, w, eps)`: T5's RMS norm, one program per row.
- `attention(q, k, v, ...)`: one program per head over all 16 query rows, an online softmax over
  key blocks of a fixed size. The key count is read on the device (causal: the call's position plus
  its rows; cross: the source's length), so a captured CUDA graph serves every position, and the
  key blocks a row sees past its own last key are fully masked, which leaves its sums unchanged.

Launchers take CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (the tests). The torch
references are reference.mm_ref, rms_norm_ref and attention_ref.
"""

import os

import torch
import triton
import triton.language as tl


def _upcast() -> bool:
    """Triton's interpreter multiplies bf16 tiles as raw integers (Triton 3.x): under it, the tiles
    go to float32 first. A bf16 product is exact in float32, so only the order of the sum can
    differ from the compiled bf16 tl.dot; the masks and indices tested are the same code."""
    return os.environ.get("TRITON_INTERPRET") == "1"


ROWS = 16  # the fixed row tile: every launch computes 16 rows, padded with zeros
EPILOGUES = ("none", "add", "mul", "relu", "gelu_tanh")


def _split(N: int, K: int, bn: int, bk: int) -> int:
    """Slices of the inner dimension: enough programs to keep the memory busy when N has few column
    tiles. A function of the weight's shape only (row invariance)."""
    tiles = triton.cdiv(N, bn)
    return max(1, min(triton.cdiv(K, bk), triton.cdiv(256, tiles), 16))


def _tiles(N: int, K: int) -> tuple[int, int]:
    return (64 if N >= 4096 else 32), (128 if K >= 128 else max(16, triton.next_power_of_2(K)))


@triton.jit
def _epilogue(acc, r_ptr, offs_m, offs_n, mask, stride_r, EPI: tl.constexpr):
    if EPI == 1 or EPI == 2:
        r = tl.load(r_ptr + offs_m[:, None] * stride_r + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
        acc = acc + r if EPI == 1 else acc * r
    if EPI == 3:
        acc = tl.maximum(acc, 0.0)
    if EPI == 4:  # gelu with tanh (T5 v1.1 / mT5's gelu_new); tanh(u) = 2 sigmoid(2u) - 1
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = 0.5 * acc * (1.0 + (2.0 * tl.sigmoid(2.0 * u) - 1.0))
    return acc


@triton.jit
def mm_kernel(
    x_ptr,
    w_ptr,
    r_ptr,
    y_ptr,
    part_ptr,
    M,
    N,
    K,
    stride_x,
    stride_w,
    stride_r,
    stride_y,
    K_SLICE,
    EPI: tl.constexpr,
    SPLIT: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    pid_n, pid_m, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    k_lo = s * K_SLICE
    for k0 in range(k_lo, tl.minimum(k_lo + K_SLICE, K), BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        kin = offs_k < K
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_x + offs_k[None, :],
            mask=(offs_m[:, None] < M) & kin[None, :],
            other=0.0,
        )
        w = tl.load(
            w_ptr + offs_n[None, :] * stride_w + offs_k[:, None],
            mask=(offs_n[None, :] < N) & kin[:, None],
            other=0.0,
        )
        if IEEE:  # float32 (or the interpreter's upcast): no TF32 rounding of the inputs
            acc += tl.dot(x.to(tl.float32), w.to(tl.float32), input_precision="ieee")
        else:
            acc += tl.dot(x, w)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    if SPLIT == 1:
        acc = _epilogue(acc, r_ptr, offs_m, offs_n, mask, stride_r, EPI)
        tl.store(
            y_ptr + offs_m[:, None] * stride_y + offs_n[None, :], acc.to(y_ptr.dtype.element_ty), mask=mask
        )
    else:  # this slice's partial sum, float32 (SPLIT, M, N); reduce_kernel adds them in order
        tl.store(part_ptr + (s * M + offs_m[:, None]) * N + offs_n[None, :], acc, mask=mask)


@triton.jit
def reduce_kernel(
    part_ptr,
    r_ptr,
    y_ptr,
    M,
    N,
    stride_r,
    stride_y,
    EPI: tl.constexpr,
    SPLIT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    pid_n, pid_m = tl.program_id(0), tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    for s in range(SPLIT):  # slice order: the same sum for every row
        acc += tl.load(part_ptr + (s * M + offs_m[:, None]) * N + offs_n[None, :], mask=mask, other=0.0)
    acc = _epilogue(acc, r_ptr, offs_m, offs_n, mask, stride_r, EPI)
    tl.store(y_ptr + offs_m[:, None] * stride_y + offs_n[None, :], acc.to(y_ptr.dtype.element_ty), mask=mask)


def mm(
    x: torch.Tensor,
    w: torch.Tensor,
    epilogue: str = "none",
    other: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """x (M, K) @ w (N, K)^T -> (M, N) in x's dtype; epilogue "add" / "mul" combines `other` (M, N),
    "relu" / "gelu_tanh" applies the activation, all in float32 before the one rounding."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"mm: x (M, K) and w (N, K) must share K, got {tuple(x.shape)} and {tuple(w.shape)}")
    if epilogue not in EPILOGUES:
        raise ValueError(f"mm: epilogue must be one of {', '.join(EPILOGUES)}, got {epilogue!r}")
    epi = EPILOGUES.index(epilogue)
    if (epi in (1, 2)) != (other is not None):
        raise ValueError(f"mm: epilogue {epilogue!r} {'needs' if epi in (1, 2) else 'takes no'} `other`")
    x, w = x.contiguous(), w.contiguous()
    M, K = x.shape
    N = w.shape[0]
    y = out if out is not None else torch.empty(M, N, dtype=x.dtype, device=x.device)
    r = other.contiguous() if other is not None else y
    bn, bk = _tiles(N, K)
    split = _split(N, K, bn, bk)
    k_slice = triton.cdiv(triton.cdiv(K, split), bk) * bk
    split = triton.cdiv(K, k_slice)  # no empty slice
    grid = (triton.cdiv(N, bn), triton.cdiv(M, ROWS), split)
    part = torch.empty(split, M, N, dtype=torch.float32, device=x.device) if split > 1 else y
    mm_kernel[grid](
        x,
        w,
        r,
        y,
        part,
        M,
        N,
        K,
        x.stride(0),
        w.stride(0),
        r.stride(0),
        y.stride(0),
        k_slice,
        EPI=epi,
        SPLIT=split,
        IEEE=x.dtype == torch.float32 or _upcast(),
        BLOCK_M=ROWS,
        BLOCK_N=bn,
        BLOCK_K=bk,
    )
    if split > 1:
        reduce_kernel[grid[:2]](
            part, r, y, M, N, r.stride(0), y.stride(0), EPI=epi, SPLIT=split, BLOCK_M=ROWS, BLOCK_N=bn
        )
    return y


@triton.jit
def rms_norm_kernel(x_ptr, w_ptr, y_ptr, K, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    ss = tl.zeros((BLOCK,), tl.float32)
    for k0 in range(0, K, BLOCK):
        c = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + c, mask=c < K, other=0.0).to(tl.float32)
        ss += x * x
    r = tl.rsqrt(tl.sum(ss, axis=0) / K + eps)
    for k0 in range(0, K, BLOCK):
        c = k0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_x + c, mask=c < K, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + c, mask=c < K, other=0.0).to(tl.float32)
        h = (x * r).to(w_ptr.dtype.element_ty).to(tl.float32)  # HF's T5LayerNorm: rounded to w's dtype,
        tl.store(y_ptr + row * stride_y + c, (w * h).to(y_ptr.dtype.element_ty), mask=c < K)  # then scaled


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """T5's RMS norm of each row of x (M, K) by weight w (K,), in w's dtype."""
    x = x.contiguous()
    M, K = x.shape
    y = torch.empty(M, K, dtype=w.dtype, device=x.device)
    rms_norm_kernel[(M,)](
        x, w, y, K, x.stride(0), y.stride(0), eps, BLOCK=min(1024, triton.next_power_of_2(K))
    )
    return y


@triton.jit
def attention_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    b_ptr,
    o_ptr,
    pos_ptr,
    nk_ptr,
    M,
    dh,
    sq_h,
    sq_m,
    sk_h,
    sk_t,
    so_h,
    so_m,
    sb_h,
    sb_q,
    CAUSAL: tl.constexpr,
    BIAS: tl.constexpr,
    IEEE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    h = tl.program_id(0)
    rows = tl.arange(0, BLOCK_M)
    d = tl.arange(0, BLOCK_D)
    pos = tl.load(pos_ptr)  # the call's first position: the rows are at pos + rows
    n_keys = pos + M if CAUSAL else tl.load(nk_ptr)
    q = tl.load(
        q_ptr + h * sq_h + rows[:, None] * sq_m + d[None, :],
        mask=(rows[:, None] < M) & (d[None, :] < dh),
        other=0.0,
    )
    m = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    den = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    for t0 in range(0, n_keys, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        kv_mask = (t[:, None] < n_keys) & (d[None, :] < dh)
        k = tl.load(k_ptr + h * sk_h + t[:, None] * sk_t + d[None, :], mask=kv_mask, other=0.0)
        if IEEE:
            s = tl.dot(
                q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee"
            )  # (BLOCK_M, BLOCK_T)
        else:
            s = tl.dot(q, tl.trans(k))
        see = t[None, :] < n_keys
        if CAUSAL:
            see = see & (t[None, :] <= pos + rows[:, None])
        if BIAS:
            s += tl.load(
                b_ptr + h * sb_h + (pos + rows[:, None]) * sb_q + t[None, :],
                mask=see & (rows[:, None] < M),
                other=0.0,
            ).to(tl.float32)
        s = tl.where(see, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # finite: key 0 is seen by every row
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])  # 0 at masked keys; a block with none seen changes nothing
        den = den * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + h * sk_h + t[:, None] * sk_t + d[None, :], mask=kv_mask, other=0.0)
        if IEEE:
            acc = acc * alpha[:, None] + tl.dot(
                p.to(v.dtype).to(tl.float32), v.to(tl.float32), input_precision="ieee"
            )
        else:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    o = acc / den[:, None]
    tl.store(
        o_ptr + h * so_h + rows[:, None] * so_m + d[None, :],
        o.to(o_ptr.dtype.element_ty),
        mask=(rows[:, None] < M) & (d[None, :] < dh),
    )


def attention(q, k, v, pos, n_keys=None, bias=None, out=None) -> torch.Tensor:
    """Attention of q (H, M, dh), M <= 16 rows at positions pos + [0, M), over keys and values
    k, v (H, T, dh) (the cache, or the padded source). pos: a (1,) int device tensor. Causal when
    n_keys is None (key t is seen by the row at position p when t <= p); otherwise over the first
    n_keys[0] keys. bias (H, T_q, T) is added at [h, pos + row, t] (T5's relative positions)."""
    H, M, dh = q.shape
    if M > ROWS:
        raise ValueError(f"attention: at most {ROWS} query rows, got {M}")
    if (
        k.shape != v.shape
        or k.shape[0] != H
        or k.shape[2] != dh
        or k.stride(2) != 1
        or v.stride() != k.stride()
    ):
        raise ValueError(
            f"attention: k and v must be (H, T, dh) alike, got {tuple(k.shape)}, {tuple(v.shape)}"
        )
    q = q.contiguous()
    o = out if out is not None else torch.empty_like(q)
    b = bias if bias is not None else q
    nk = n_keys if n_keys is not None else pos
    attention_kernel[(H,)](
        q,
        k,
        v,
        b,
        o,
        pos,
        nk,
        M,
        dh,
        q.stride(0),
        q.stride(1),
        k.stride(0),
        k.stride(1),
        o.stride(0),
        o.stride(1),
        b.stride(0),
        b.stride(-2) if bias is not None else 0,
        CAUSAL=n_keys is None,
        BIAS=bias is not None,
        IEEE=q.dtype == torch.float32 or _upcast(),
        BLOCK_M=ROWS,
        BLOCK_T=64,
        BLOCK_D=max(16, triton.next_power_of_2(dh)),
    )
    return o
