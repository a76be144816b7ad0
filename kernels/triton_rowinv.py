"""Row-invariant Triton kernels for a decoder step of 1 to 16 tokens: a row's result has the same
bits whether the row comes alone (vanilla greedy's one-token steps) or among up to 15 others (BiLD's
verifying call), at any position among them.

How (after Thinking Machines' batch-invariant kernels, "Defeating Nondeterminism in LLM
Inference", 2025): every launch works on a fixed tile of 16 rows, padded with zeros, whatever the
number of rows it is given; the tile sizes, the split of the inner dimension and the order of the
final sum depend on the weight's shape only, never on the rows. A tensor-core product computes each
row of its tile alone, and the sums run in one fixed order, so the other rows cannot change a row.

- `mm(x, w, epilogue=..., norm=...)`: x (M, K) @ w (N, K)^T, accumulated in float32 and rounded
  once, with T5's RMS norm of x fused in (the row scale after the sum), and a residual added, a
  product taken or an activation applied before that rounding: one launch. With few column tiles
  the inner dimension is cut into a fixed number of slices; the last slice of a tile to finish
  (counted on a lock) adds the slices' partial sums in slice order: the same sum whichever one
  finishes last (serial split-K), with no second launch.
- `rms_norm(x, w, eps)`: T5's RMS norm, one program per row.
- attention: kernels/triton_attention.py, on the same 16-row tile.

Launchers take CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (the tests). The torch
references are reference.mm_ref and rms_norm_ref.
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
    g_ptr,
    r_ptr,
    y_ptr,
    part_ptr,
    ssq_ptr,
    lock_ptr,
    M,
    N,
    K,
    stride_x,
    stride_w,
    stride_r,
    stride_y,
    K_SLICE,
    eps,
    scale,
    EPI: tl.constexpr,
    NORM: tl.constexpr,
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
    ssq = tl.zeros((BLOCK_M,), tl.float32)  # NORM: each row's sum of squares over this slice of K
    k_lo = s * K_SLICE
    for k0 in range(k_lo, tl.minimum(k_lo + K_SLICE, K), BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        kin = offs_k < K
        x = tl.load(
            x_ptr + offs_m[:, None] * stride_x + offs_k[None, :],
            mask=(offs_m[:, None] < M) & kin[None, :],
            other=0.0,
        )
        if NORM:  # T5's RMS norm in the prologue: x * g here, the row's 1 / rms after the sum
            xf = x.to(tl.float32)
            ssq += tl.sum(xf * xf, axis=1)
            g = tl.load(g_ptr + offs_k, mask=kin, other=0.0).to(tl.float32)
            x = (xf * g[None, :]).to(x_ptr.dtype.element_ty)
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
    if SPLIT > 1:
        # Serial split-K: each slice stores its float32 partial (SPLIT, M, N) and row sums, then
        # counts itself in on the tile's lock; the last to arrive adds the SPLIT partials in slice
        # order (the same sum whichever arrives last), applies the epilogue, and resets the lock.
        tl.store(part_ptr + (s * M + offs_m[:, None]) * N + offs_n[None, :], acc, mask=mask)
        rows_per_slice = BLOCK_M * tl.num_programs(1)  # ssq_ptr: (column tiles, SPLIT, padded M)
        ssq_at = ssq_ptr + pid_n * SPLIT * rows_per_slice + offs_m
        if NORM:
            tl.store(ssq_at + s * rows_per_slice, ssq)
        tl.debug_barrier()  # every thread's stores issued before the release below
        lock = lock_ptr + pid_m * tl.num_programs(0) + pid_n
        if tl.atomic_add(lock, 1, sem="acq_rel") == SPLIT - 1:
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            ssq = tl.zeros((BLOCK_M,), tl.float32)
            for j in range(SPLIT):  # slice order: the same sum for every row
                acc += tl.load(part_ptr + (j * M + offs_m[:, None]) * N + offs_n[None, :], mask=mask,
                               other=0.0, cache_modifier=".cg")  # fmt: skip
                if NORM:
                    ssq += tl.load(ssq_at + j * rows_per_slice, cache_modifier=".cg")
            _finish(acc, ssq, K, eps, scale, r_ptr, y_ptr, offs_m, offs_n, mask, stride_r, stride_y,
                    EPI, NORM)  # fmt: skip
            tl.atomic_xchg(lock, 0)  # ready for the next launch (a CUDA graph replays the same lock)
    else:
        _finish(acc, ssq, K, eps, scale, r_ptr, y_ptr, offs_m, offs_n, mask, stride_r, stride_y, EPI, NORM)


@triton.jit
def _finish(acc, ssq, K, eps, scale, r_ptr, y_ptr, offs_m, offs_n, mask, stride_r, stride_y,
            EPI: tl.constexpr, NORM: tl.constexpr):  # fmt: skip
    """The row scale (the norm's 1 / rms, times scale), the epilogue, one rounding, the store."""
    if NORM:
        acc = acc * (tl.rsqrt(ssq / K + eps) * scale)[:, None]
    else:
        acc = acc * scale  # exact when scale is 1
    acc = _epilogue(acc, r_ptr, offs_m, offs_n, mask, stride_r, EPI)
    tl.store(y_ptr + offs_m[:, None] * stride_y + offs_n[None, :], acc.to(y_ptr.dtype.element_ty), mask=mask)


# device -> int32 counters, zero between launches (the last slice resets its own). One buffer per
# device serves every split product, so split products must not run on two streams at once (the
# static engine runs its calls and graphs on one). An outgrown buffer stays allocated: a captured
# graph replays with the address it was captured with.
_LOCKS: dict = {}
_OUTGROWN: list = []


def _locks(device: torch.device, n: int) -> torch.Tensor:
    t = _LOCKS.get(device)
    if t is None or t.numel() < n:
        if t is not None:
            _OUTGROWN.append(t)
        t = _LOCKS[device] = torch.zeros(max(n, 4096), dtype=torch.int32, device=device)
    return t


def mm(
    x: torch.Tensor,
    w: torch.Tensor,
    epilogue: str = "none",
    other: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    norm: torch.Tensor | None = None,
    eps: float = 1e-6,
    scale: float = 1.0,
) -> torch.Tensor:
    """x (M, K) @ w (N, K)^T -> (M, N) in x's dtype; epilogue "add" / "mul" combines `other` (M, N),
    "relu" / "gelu_tanh" applies the activation, all in float32 before the one rounding, after the
    float32 sum is multiplied by scale. With norm (K,), x is first T5's RMS norm of x by it
    (reference.mm_ref: x * norm rounded to x's dtype enters the product, and each row's 1 / rms(x)
    joins scale)."""
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"mm: x (M, K) and w (N, K) must share K, got {tuple(x.shape)} and {tuple(w.shape)}")
    if epilogue not in EPILOGUES:
        raise ValueError(f"mm: epilogue must be one of {', '.join(EPILOGUES)}, got {epilogue!r}")
    epi = EPILOGUES.index(epilogue)
    if (epi in (1, 2)) != (other is not None):
        raise ValueError(f"mm: epilogue {epilogue!r} {'needs' if epi in (1, 2) else 'takes no'} `other`")
    if norm is not None and tuple(norm.shape) != (x.shape[1],):
        raise ValueError(f"mm: norm must be (K,) = ({x.shape[1]},), got {tuple(norm.shape)}")
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
    fused = split > 1 and norm is not None
    ssq = torch.empty(grid[0] * split * grid[1] * ROWS, dtype=torch.float32, device=x.device) if fused else y
    mm_kernel[grid](
        x,
        w,
        norm if norm is not None else x,
        r,
        y,
        part,
        ssq,
        _locks(x.device, grid[0] * grid[1]) if split > 1 else y,
        M,
        N,
        K,
        x.stride(0),
        w.stride(0),
        r.stride(0),
        y.stride(0),
        k_slice,
        float(eps),
        float(scale),
        EPI=epi,
        NORM=norm is not None,
        SPLIT=split,
        IEEE=x.dtype == torch.float32 or _upcast(),
        BLOCK_M=ROWS,
        BLOCK_N=bn,
        BLOCK_K=bk,
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
