"""Triton kernel for the non-uniform 4-bit / 3-bit matrix-vector product of a SqueezeLLM weight.

    y (k, out) = x (k, n) @ W^T,  W[r, c] = table[r, code(r, c)]

Codes are nibbles, two per byte (reference.pack_nibbles), so a row of W is read at half a byte per
weight; each program dequantizes a (BLOCK_N, BLOCK_K) tile through its rows' tables (out, L),
which stay in L1, and accumulates in float32. Grid: (output blocks, rows of x); at decode time
k is 1 to 11, and the codes a program reads are reused by the k programs from L2. The sparse part
(at most a few tenths of a percent of the weights) is added by torch's index_add in the launcher.
The launcher takes CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (the tests).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def lut_matvec_kernel(x_ptr, codes_ptr, table_ptr, y_ptr, N, K, stride_x, stride_c, stride_y,
                      L: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    pid_n, m = tl.program_id(0), tl.program_id(1)
    rows = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BLOCK_N,) output rows
    rmask = rows < N
    acc = tl.zeros((BLOCK_N,), tl.float32)
    for start in range(0, K, BLOCK_K):
        cols = start + tl.arange(0, BLOCK_K)  # (BLOCK_K,) input columns
        cmask = cols < K
        x = tl.load(x_ptr + m.to(tl.int64) * stride_x + cols, mask=cmask, other=0.0).to(tl.float32)
        mask = rmask[:, None] & cmask[None, :]
        byte = tl.load(
            codes_ptr + rows[:, None].to(tl.int64) * stride_c + cols[None, :] // 2, mask=mask, other=0
        )
        code = (byte.to(tl.int32) >> ((cols[None, :] % 2) * 4)) & 15  # (BLOCK_N, BLOCK_K)
        w = tl.load(table_ptr + rows[:, None].to(tl.int64) * L + code, mask=mask, other=0.0)
        acc += tl.sum(w * x[None, :], axis=1)
    tl.store(y_ptr + m.to(tl.int64) * stride_y + rows, acc, mask=rmask)


def lut_matvec(x, packed, table, n: int, sparse_idx=None, sparse_val=None) -> torch.Tensor:
    """As reference.lut_matvec_ref: x (k, n), packed (out, ceil(n / 2)) uint8, table (out, L),
    L <= 16 -> y (k, out) float32."""
    if x.dim() != 2 or x.shape[1] != n:
        raise ValueError(f"x must be (k, n={n}), got shape {tuple(x.shape)}")
    N, L = table.shape
    if packed.shape != (N, (n + 1) // 2) or packed.dtype != torch.uint8:
        raise ValueError(
            f"packed must be uint8 ({N}, {(n + 1) // 2}), got {packed.dtype} {tuple(packed.shape)}"
        )
    if L > 16:
        raise ValueError(f"table has {L} entries per row: nibble codes address at most 16")
    x, packed, table = x.contiguous(), packed.contiguous(), table.float().contiguous()
    y = torch.empty(x.shape[0], N, dtype=torch.float32, device=x.device)
    BLOCK_N, BLOCK_K = 64, 128
    grid = (triton.cdiv(N, BLOCK_N), x.shape[0])
    lut_matvec_kernel[grid](x, packed, table, y, N, n, x.stride(0), packed.stride(0), y.stride(0),
                            L=L, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)  # fmt: skip
    if sparse_val is not None and sparse_val.numel():
        r, c = sparse_idx
        y.index_add_(1, r, x.float()[:, c] * sparse_val.float())
    return y
