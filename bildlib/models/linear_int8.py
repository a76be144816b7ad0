"""int8 products for models.linear: a weight's int8 codes times the input, two ways.

- `Int8`: a weight of an int8 checkpoint (bildlib.quant), whose codes and per-row scale the
  loader keeps on W (`_bild_int8`, models.load.keep_int8): torch's CPU int8 weight-only kernel
  (`torch._weight_int8pack_mm`), in bf16 (the lean engine's).
- `NativeInt8`: the native engine's int8 (dtype "int8"): W quantized per output channel at load,
  each input row by its own absolute maximum at each call, int32 sums (bildlib.kernels.cpu,
  cpu_gemm8.h): row-invariant by construction, the same bits on every x86 CPU, a quarter of
  float32's bytes read per call.
"""

from __future__ import annotations

import torch

from bildlib.kernels import cpu


def int8_ok(w: torch.Tensor) -> bool:
    """Whether W's product runs on its int8 codes: codes kept on it, of its shape, W in bf16 on a
    CPU, and an input width the kernel's 16-wide loads cover (a multiple of 16; others would read
    past a row). Otherwise W's own (dequantized) values run."""
    i8 = getattr(w, "_bild_int8", None)
    return (i8 is not None and w.device.type == "cpu" and w.dtype == torch.bfloat16
            and tuple(i8[0].shape) == tuple(w.shape) and w.shape[1] % 16 == 0
            and hasattr(torch, "_weight_int8pack_mm"))  # fmt: skip


class Int8:
    __slots__ = ("q", "s")
    OWN_RELU = False

    def __init__(self, q: torch.Tensor, scale: torch.Tensor):
        self.q = q.contiguous()  # (out, in) int8
        self.s = scale.to(torch.bfloat16).contiguous()  # (out,): the kernel takes it in x's dtype

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # (k, in) bf16 -> (k, out) bf16
        if not x.is_contiguous() or x.data_ptr() % 64:  # the kernel's aligned loads
            x = x.clone(memory_format=torch.contiguous_format)
        return torch._weight_int8pack_mm(x, self.q, self.s)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return self(x).relu_()

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return self(x).add_(res)  # rounded twice, as HF's x + linear(a)


class NativeInt8:
    """W (out, in) as cpu_gemm8.h's int8 codes per output channel and their scales; float32 rows
    in and out (docs/quantization.md, *The native engine in int8*)."""

    __slots__ = ("p", "s", "m", "f")
    OWN_RELU = True

    def __init__(self, w: torch.Tensor):
        mod = cpu.load()
        (self.p, self.s), self.m, self.f = mod.pack8(w.detach()), w.shape[0], mod.linear8

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x, self.p, self.s, self.m, None, False)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x, self.p, self.s, self.m, None, True)

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return self.f(x, self.p, self.s, self.m, res, False)
