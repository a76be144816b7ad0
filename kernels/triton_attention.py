"""Row-invariant attention for a decoder step of 1 to 16 query rows (kernels/triton_rowinv.py says
why and how row invariance is kept).

One program per head over all 16 query rows (padded with zeros), an online softmax over key blocks
of a fixed size. The key count is read on the device (causal: the call's position plus its rows;
cross: the source's length), so a captured CUDA graph serves every position; the key blocks a row
sees past its own last key are fully masked, which leaves its sums unchanged, so a row's bits do
not depend on the others. The torch reference is reference.attention_ref.
"""

import torch
import triton
import triton.language as tl

from .triton_rowinv import ROWS, _upcast


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
    n_keys[0] keys. bias (H, T_q, T) is added at [h, pos + row, t] (T5's relative positions).
    Returns (H, M, dh) laid out as (M, H, dh) in memory."""
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
    if bias is not None and (bias.dim() != 3 or bias.stride(-1) != 1):
        raise ValueError(
            f"attention: bias must be (H, T_q, T) with unit stride over keys, got strides {bias.stride()}"
        )
    q = q if q.stride(2) == 1 else q.contiguous()  # a view of a fused qkv product reads in place
    # the output as (M, H, dh) memory: the caller's (M, H dh) for the next product is then a view
    o = out if out is not None else torch.empty(M, H, dh, dtype=q.dtype, device=q.device).transpose(0, 1)
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
