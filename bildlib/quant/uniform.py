"""Uniform quantization: round-to-nearest (the baseline of SqueezeLLM's Table 1) and int8."""

from __future__ import annotations

import torch

from bildlib.quant.weights import QWeight


def rtn(w: torch.Tensor, bits: int, group: int | None = None, name: str = "weight") -> QWeight:
    """Asymmetric round-to-nearest of w (out, in): per output channel, or per `group` input columns,
    the range [min, max] cut into 2^bits - 1 equal steps; each weight rounded to the nearest step."""
    out, n = w.shape
    g = n if group is None else group
    if n % g:
        raise ValueError(f"group ({g}) must divide the input width of {name} ({n} columns)")
    x = w.detach().float().view(out, n // g, g)  # (out, G, group)
    lo, hi = x.amin(-1, keepdim=True).clamp(max=0), x.amax(-1, keepdim=True).clamp(min=0)
    L = 2**bits - 1
    scale = ((hi - lo) / L).clamp(min=1e-12)  # (out, G, 1)
    zero = torch.round(-lo / scale)
    codes = torch.clamp(torch.round(x / scale) + zero, 0, L)
    table = (torch.arange(L + 1, dtype=torch.float32) - zero) * scale  # (out, G, 2^bits)
    return QWeight(codes.to(torch.uint8).view(out, n), table, bits, uniform=True)


def int8(w: torch.Tensor) -> QWeight:
    """Symmetric int8 per output channel: scale = max |w| / 127, rounded up to the nearest bf16, the
    dtype CPU int8 kernels take it in (models.linear.Int8), so the kernel multiplies by exactly the
    stored scale. Codes are the int8 values shifted by 128 into uint8."""
    x = w.detach().float()
    scale = up_to_bf16((x.abs().amax(1, keepdim=True) / 127).clamp(min=1e-12))  # (out, 1)
    q = torch.clamp(torch.round(x / scale), -127, 127)
    table = ((torch.arange(256, dtype=torch.float32) - 128) * scale).unsqueeze(1)  # (out, 1, 256)
    return QWeight((q + 128).to(torch.uint8), table, 8, uniform=True)


def up_to_bf16(x: torch.Tensor) -> torch.Tensor:
    """Each positive float32 of x as the smallest bf16 at or above it (float32): never below, so
    max |w| / scale stays at most 127 and no weight is clipped."""
    b = x.bfloat16()
    below = b.float() < x
    b[below] = (b[below].view(torch.int16) + 1).view(torch.bfloat16)  # the next bf16 up
    return b.float()


def is_int8(w: QWeight) -> bool:
    """Whether w is int8's per-channel grid (int8): 8 bits, uniform, one table of 256 per row."""
    return w.bits == 8 and w.uniform and tuple(w.table.shape[1:]) == (1, 256)


def int8_parts(w: QWeight) -> tuple[torch.Tensor, torch.Tensor]:
    """An int8 QWeight as a CPU int8 kernel takes it: codes (out, in) int8 and the scale (out,)
    float32 (table[j] = (j - 128) scale, so table[129] is the scale)."""
    if not is_int8(w):
        raise ValueError(f"not a per-channel int8 weight (bits {w.bits}, table {tuple(w.table.shape)})")
    return (w.codes.to(torch.int16) - 128).to(torch.int8), w.table[:, 0, 129].clone()
