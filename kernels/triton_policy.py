"""Triton kernels for BiLD's policy reductions over rows of logits (k, V).

Each kernel reads a row once with an online softmax (running max and rescaled sum, fp32
whatever the input dtype), so no softmax tensor is ever written. One program per row; the
launchers take CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (the tests).
Argmax ties go to the first maximum, like torch.argmax; -inf entries have probability 0.
"""

import torch
import triton
import triton.language as tl


def _block(V: int) -> int:
    return min(triton.next_power_of_2(V), 4096)


def _rows(x: torch.Tensor, name: str) -> torch.Tensor:
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"{name} must be (k, V) with V >= 1, got shape {tuple(x.shape)}")
    return x if x.stride(-1) == 1 else x.contiguous()


@triton.jit
def _online_step(x, cols, start, m1, i1, s):
    """Fold one block x into the running max m1, its first index i1 and s = sum exp(x - m1)."""
    bm, bi = tl.max(x, axis=0, return_indices=True, return_indices_tie_break_left=True)
    m_new = tl.maximum(m1, bm)
    alpha = tl.where(m_new == float("-inf"), 0.0, tl.exp(m1 - m_new))
    e = tl.where(x == float("-inf"), 0.0, tl.exp(x - m_new))
    s = s * alpha + tl.sum(e, axis=0)
    i1 = tl.where(bm > m1, start + bi, i1)  # strictly greater: an earlier maximum wins ties
    return m_new, i1, s, bm, bi


@triton.jit
def max_prob_kernel(x_ptr, p_ptr, idx_ptr, margin_ptr, V, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride
    m1 = tl.full((), float("-inf"), tl.float32)  # running max
    m2 = tl.full((), float("-inf"), tl.float32)  # running second largest (equal to m1 on ties)
    i1 = tl.full((), 0, tl.int32)
    s = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m_old = m1
        m1, i1, s, bm, bi = _online_step(x, cols, start, m1, i1, s)
        b2 = tl.max(tl.where(cols == start + bi, float("-inf"), x), axis=0)  # block's second largest
        m2 = tl.where(bm > m_old, tl.maximum(m_old, b2), tl.maximum(m2, bm))
    p1 = 1.0 / s
    tl.store(p_ptr + row, p1)
    tl.store(idx_ptr + row, i1.to(tl.int64))
    tl.store(margin_ptr + row, p1 - tl.exp(m2 - m1) / s)


def max_prob(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(max probability (k,), argmax (k,), top1 - top2 probability (k,)) of each row."""
    x = _rows(logits, "logits")
    k, V = x.shape
    p = torch.empty(k, dtype=torch.float32, device=x.device)
    idx = torch.empty(k, dtype=torch.int64, device=x.device)
    margin = torch.empty(k, dtype=torch.float32, device=x.device)
    max_prob_kernel[(k,)](x, p, idx, margin, V, x.stride(0), BLOCK=_block(V))
    return p, idx, margin


@triton.jit
def rollback_distance_kernel(x_ptr, tok_ptr, ce_ptr, idx_ptr, lse_ptr, V, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride
    m1 = tl.full((), float("-inf"), tl.float32)
    i1 = tl.full((), 0, tl.int32)
    s = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        m1, i1, s, bm, bi = _online_step(x, cols, start, m1, i1, s)
    lse = m1 + tl.log(s)
    picked = tl.load(x_row + tl.load(tok_ptr + row)).to(tl.float32)
    tl.store(ce_ptr + row, lse - picked)
    tl.store(idx_ptr + row, i1.to(tl.int64))
    tl.store(lse_ptr + row, lse)


def rollback_distance(
    logits: torch.Tensor, tokens: torch.Tensor, return_lse: bool = False
) -> tuple[torch.Tensor, ...]:
    """(-log p(tokens) (k,), argmax (k,)) per row; with return_lse also logsumexp (k,)."""
    x = _rows(logits, "logits")
    k, V = x.shape
    if tokens.shape != (k,):
        raise ValueError(f"tokens has shape {tuple(tokens.shape)}, expected ({k},)")
    ce = torch.empty(k, dtype=torch.float32, device=x.device)
    idx = torch.empty(k, dtype=torch.int64, device=x.device)
    lse = torch.empty(k, dtype=torch.float32, device=x.device)
    rollback_distance_kernel[(k,)](x, tokens.contiguous(), ce, idx, lse, V, x.stride(0), BLOCK=_block(V))
    return (ce, idx, lse) if return_lse else (ce, idx)


@triton.jit
def _inverse_cdf(a_row, b_row, lse_a, lse_b, w_b, target, V, BLOCK: tl.constexpr):
    """First index j where the running sum of q_j = max(0, exp(a_j - lse_a) - w_b exp(b_j - lse_b))
    exceeds target; the last index with q_j > 0 if rounding leaves none (w_b = 0: b unused)."""
    c = tl.zeros((), tl.float32)
    found = tl.full((), V, tl.int32)
    last = tl.full((), 0, tl.int32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        a = tl.load(a_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        q = tl.where(a == float("-inf"), 0.0, tl.exp(a - lse_a))
        if w_b != 0:
            b = tl.load(b_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
            q = tl.maximum(q - tl.where(b == float("-inf"), 0.0, tl.exp(b - lse_b)), 0.0)
        cs = tl.cumsum(q, axis=0) + c
        found = tl.minimum(found, tl.min(tl.where(cs > target, cols, V), axis=0))
        last = tl.maximum(last, tl.max(tl.where(q > 0, cols, 0), axis=0))
        c += tl.sum(q, axis=0)
    return tl.minimum(found, last)


@triton.jit
def _residual_mass(a_row, b_row, lse_a, lse_b, V, BLOCK: tl.constexpr):
    t = tl.zeros((), tl.float32)
    for start in range(0, V, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        a = tl.load(a_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        b = tl.load(b_row + cols, mask=cols < V, other=float("-inf")).to(tl.float32)
        pa = tl.where(a == float("-inf"), 0.0, tl.exp(a - lse_a))
        pb = tl.where(b == float("-inf"), 0.0, tl.exp(b - lse_b))
        t += tl.sum(tl.maximum(pa - pb, 0.0), axis=0)
    return t


@triton.jit
def sample_kernel(x_ptr, u_ptr, lse_ptr, out_ptr, V, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride
    lse = tl.load(lse_ptr + row)
    target = tl.load(u_ptr + row).to(tl.float32)  # the softmax sums to 1
    tok = _inverse_cdf(x_row, x_row, lse, lse, 0.0, target, V, BLOCK)
    tl.store(out_ptr + row, tok.to(tl.int64))


def sample(logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of logits (k, V) by inverse CDF at uniforms (k,) in [0, 1)."""
    x = _rows(logits, "logits")
    k, V = x.shape
    zeros = torch.zeros(k, dtype=torch.long, device=x.device)
    lse = rollback_distance(x, zeros, return_lse=True)[2]  # (k,)
    out = torch.empty(k, dtype=torch.int64, device=x.device)
    sample_kernel[(k,)](x, uniforms.float().contiguous(), lse, out, V, x.stride(0), BLOCK=_block(V))
    return out


@triton.jit
def speculative_accept_kernel(
    l_ptr, s_ptr, lse_l_ptr, lse_s_ptr, d_ptr, u_ptr, out_ptr,
    k, V, stride_l, stride_s, BLOCK: tl.constexpr,
):  # fmt: skip
    # one program per independent draw b: drafts d_ptr[b, :k], uniforms u_ptr[b, :k+1]
    b = tl.program_id(0).to(tl.int64)
    n = k
    for i in range(0, k):  # accept draft i while u_i * p_S(d_i) < p_L(d_i)
        d = tl.load(d_ptr + b * k + i)
        p_l = tl.exp(tl.load(l_ptr + i * stride_l + d).to(tl.float32) - tl.load(lse_l_ptr + i))
        p_s = tl.exp(tl.load(s_ptr + i * stride_s + d).to(tl.float32) - tl.load(lse_s_ptr + i))
        ok = tl.load(u_ptr + b * (k + 1) + i).to(tl.float32) * p_s < p_l
        n = tl.where((n == k) & (~ok), i, n)
    l_row = l_ptr + n.to(tl.int64) * stride_l
    s_row = s_ptr + tl.minimum(n, k - 1).to(tl.int64) * stride_s
    lse_l = tl.load(lse_l_ptr + n)
    lse_s = tl.load(lse_s_ptr + tl.minimum(n, k - 1))
    u = tl.load(u_ptr + b * (k + 1) + k).to(tl.float32)
    if n < k:  # rejected: draw from norm(max(0, p_L - p_S)) at row n
        target = u * _residual_mass(l_row, s_row, lse_l, lse_s, V, BLOCK)
        tok = _inverse_cdf(l_row, s_row, lse_l, lse_s, 1.0, target, V, BLOCK)
    else:  # all accepted: the bonus token from p_L at row k
        tok = _inverse_cdf(l_row, s_row, lse_l, lse_s, 0.0, u, V, BLOCK)
    tl.store(out_ptr + 2 * b, n.to(tl.int64))
    tl.store(out_ptr + 2 * b + 1, tok.to(tl.int64))


def speculative_accept(
    logits_large: torch.Tensor, logits_small: torch.Tensor, draft: torch.Tensor, uniforms: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(n accepted, next token), the contract of reference.speculative_accept_ref. draft (k,) and
    uniforms (k+1,) give 0-d results; draft (B, k) and uniforms (B, k+1) give B independent
    decisions over the same logits in one launch (the statistical tests use this)."""
    xl, xs = _rows(logits_large, "logits_large"), _rows(logits_small, "logits_small")
    k, V = xs.shape
    d2, u2 = draft.reshape(-1, k), uniforms.reshape(-1, k + 1)
    if k < 1 or xl.shape != (k + 1, V) or d2.shape[0] != u2.shape[0] or draft.dim() != uniforms.dim():
        raise ValueError(
            f"expected logits_large (k+1, V), logits_small (k, V), draft ([B,] k), uniforms ([B,] k+1) "
            f"for k={k} >= 1; got {tuple(xl.shape)}, {tuple(xs.shape)}, {tuple(draft.shape)}, "
            f"{tuple(uniforms.shape)}"
        )
    zeros = torch.zeros(k + 1, dtype=torch.long, device=xl.device)
    lse_l = rollback_distance(xl, zeros, return_lse=True)[2]  # (k+1,)
    lse_s = rollback_distance(xs, zeros[:k], return_lse=True)[2]  # (k,)
    B = d2.shape[0]
    out = torch.empty(B, 2, dtype=torch.int64, device=xl.device)
    speculative_accept_kernel[(B,)](
        xl, xs, lse_l, lse_s, d2.long().contiguous(), u2.float().contiguous(), out,
        k, V, xl.stride(0), xs.stride(0), BLOCK=_block(V),
    )  # fmt: skip
    if draft.dim() == 1:
        return out[0, 0], out[0, 1]
    return out[:, 0], out[:, 1]
