"""Products with a weight W (out, in), as the lean T5 engine runs them: y = x W^T, relu of it,
and res + x W^T rounded once (torch.addmm's bits; HF's x + linear(a) rounds twice).

`linear(w)` picks how, by what a call costs on this project's CPUs (docs/engines-cpu.md, *Anatomy
of a step*), fastest first, keeping only a product that is row-invariant on the machine that runs
(models.rowinv: probed once per process and shape; Float32 is the fallback of every CPU weight):
- `Packed`: W prepacked once into oneDNN's blocked layout (PyTorch's own
  `mkldnn._reorder_linear_weight` / `_linear_pointwise`, the kernels inductor's `freezing`
  uses). A one-row product reads it at about twice the rate of torch.mm, with torch.mm's bits
  in bf16 and within float32 rounding of them in float32, but each call costs about 10 us.
  The packed copy is kept on W (a second copy of the weights: the HF model keeps its own) and
  reused while W is unchanged in place.
- `Float32`: a small bf16 weight as a float32 copy, one row at a time (`rows_mm`, a few us a
  call): bf16 inputs, float32 products and sums, one rounding to bf16, as bf16 torch.mm computes
  them, in another summation order (at most one bf16 rounding step apart).
- `MM`: torch.mm on W's transposed view: other dtypes, small float32 weights, a PyTorch
  without oneDNN, PACK off, or a GPU (probed there too; where cuBLAS's product is not
  row-invariant, the choice says so and lossless BiLD does not call itself exact). On an Intel
  Xeon with AMX its float32 one-row product (gemv) has other bits than the same row among
  several, so there small float32 weights run Float32.
- `Int8`: a weight of an int8 checkpoint (bildlib.quant), whose int8 codes and per-row scale
  the loader keeps on W (`_bild_int8`, models.load.keep_int8): torch's CPU int8 weight-only
  kernel (`torch._weight_int8pack_mm`), in bf16. Faster than the packed bf16 product at one row,
  slower at ten (docs/quantization.md, *CPU int8*, per matrix); each row's result is the same
  bits whatever the number of rows (probed like the rest). torchao's int8 weight-only linear
  casts the codes to bf16 at every call and is slower than both here, so it is not used.
"""

from __future__ import annotations

import torch

from bildlib.kernels import cpu
from bildlib.models import rowinv
from bildlib.models.linear_int8 import Int8, NativeInt8, int8_ok  # noqa: F401 (re-exported)
from bildlib.models.rowsmm import ROWS_PATH, rows_mm  # noqa: F401 (ROWS_PATH: models.native.plan reads it here)

# Whether linear() may prepack or copy (tests turn it off to compare with plain torch.mm).
PACK = True
# Fewer weights than this run without oneDNN: its call overhead (about 10 us) outweighs its
# faster reads. Measured on the shipped pair (docs/engines.md).
MIN_PACKED = {torch.float32: 1 << 18, torch.bfloat16: 1 << 17}


def linear(w: torch.Tensor, native: bool | str = False) -> Native | NativeInt8 | Packed | Float32 | MM | Int8:
    """The product object for weight w (out, in) (module docstring): the first of candidates(w)
    that is row-invariant on this machine and device at w's shape and dtype (rowinv.probe, once
    per process and shape), Float32 (rows_mm, itself probed) last; `native` (the native engine's
    weights) puts Native first, `native` "int8" (dtype "int8") NativeInt8 alone. With PACK off: MM."""
    if not PACK:
        return MM(w)
    kind = () if not native else ("int8",) if native == "int8" else ("native",)
    key = (tuple(w.shape), str(w.dtype).removeprefix("torch."), *kind)
    cands = {c.__name__: c for c in candidates(w, native)}
    cls = rowinv.choose("linear", key, cands, lambda c: _invariant(c, w), w.device.type)[1]
    return Int8(*w._bild_int8) if cls is Int8 else cls(w)


def once(w: torch.Tensor, native: bool | str = False) -> Native | NativeInt8 | Packed | Float32 | MM | Int8:
    """The product for calls whose rows need no row invariance: an encoder's, which runs once per
    source with every decoder encoding a source alike. linear()'s kinds unprobed, over every row at
    once: Int8 or Packed where linear() would try them first, else torch.mm (a bf16 weight on its
    float32 copy, Float32's formula). Float32's one-row products took the large encoder 17 ms a
    Multi30k sentence and the small one 4 (AVX2 EPYC, float32, 2 threads; docs/engines-cpu.md)."""
    cands = candidates(w, native) if PACK else [MM]
    if cands[0] is Int8:
        return Int8(*w._bild_int8)
    return cands[0](w) if cands[0] is not Float32 else AllRows(w)


def candidates(w: torch.Tensor, native: bool | str = False) -> list[type]:
    """The product classes for weight w, fastest first (module docstring). On a GPU, cuBLAS's
    product alone, probed and recorded. On an H200 in float32 it gave one row other bits alone
    than among several at all 12 weight shapes of the shipped pair, and Float32's batched one-row
    products did at 5 of them too, at a far higher cost; so lossless BiLD on a GPU says it is not
    exact until the engine has row-invariant products there (docs/engines-gpu.md, *On a GPU*)."""
    if w.device.type != "cpu":
        return [MM]
    if native == "int8" and cpu.load() is not None:  # int8 asked for: int8 or nothing (rowinv logs it)
        return [NativeInt8]
    cands: list[type] = [Int8] if int8_ok(w) else []
    if native and w.dtype == torch.float32 and cpu.load() is not None:
        cands.append(Native)
    if w.dtype in MIN_PACKED and w.numel() >= MIN_PACKED[w.dtype] and onednn(w.dtype):
        cands.append(Packed)
    elif w.dtype != torch.bfloat16:
        cands.append(MM)
    return cands + [Float32]


_INVARIANT: dict[tuple, bool] = {}  # (class, shape, dtype, device) -> probed row-invariant here


def _invariant(cls, w: torch.Tensor) -> bool:
    """Whether cls's product, its relu (where that is a kernel of its own) and its residual add
    over w are row-invariant here (rowinv.probe), on a CPU at one thread and at this process's
    count (the object outlives a change of thread count).
    A product this machine cannot run counts as not invariant: under ONEDNN_MAX_CPU_ISA=AVX2,
    oneDNN refuses to pack a bf16 weight ("bf16 path needs the cpu support ...")."""
    key = (cls, tuple(w.shape), w.dtype, w.device.type)
    if key not in _INVARIANT:
        out, n = w.shape
        try:
            p = Int8(*w._bild_int8) if cls is Int8 else cls(w)
            add = lambda xr: p.add(xr[:, :n].contiguous(), xr[:, n:].contiguous())  # noqa: E731
            x = rowinv.sharp(w._bild_int8[0] if cls is Int8 else w, dtype=w.dtype)  # show a summation order
            xr = torch.cat([x, torch.randn(x.shape[0], out, generator=torch.Generator().manual_seed(0))], 1)
            def check() -> bool:  # relu only where it is a kernel of its own (else p's bits, relu'd)
                return not (rowinv.probe(p, n, w.dtype, w.device, x0=x) or
                            (cls.OWN_RELU and rowinv.probe(p.relu, n, w.dtype, w.device, x0=x)) or
                            rowinv.probe(add, n + out, w.dtype, w.device, x0=xr))  # fmt: skip

            _INVARIANT[key] = rowinv.each_thread_count(check) if w.device.type == "cpu" else check()
        except (RuntimeError, NotImplementedError) as e:
            rowinv.log.info("linear %s %s: %s unavailable (%s)", tuple(w.shape), w.dtype, cls.__name__, e)
            _INVARIANT[key] = False
    return _INVARIANT[key]


class MM:
    __slots__ = ("t",)
    OWN_RELU = False  # relu(x) is relu_ on __call__(x)'s result, so it has its bits where they are invariant

    def __init__(self, w: torch.Tensor):
        self.t = w.t()  # (in, out) view, no copy

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # (k, in) -> (k, out)
        return torch.mm(x, self.t)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x, self.t).relu_()

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return torch.addmm(res, x, self.t)


class Float32(MM):
    def __init__(self, w: torch.Tensor):
        self.t = w.detach().float().t()  # (in, out) float32 copy

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return rows_mm(x.float(), self.t).to(x.dtype)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return rows_mm(x.float(), self.t).relu_().to(x.dtype)

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return rows_mm(x.float(), self.t, res.float()).to(res.dtype)


class AllRows(Float32):
    """Float32's formulas over every row in one torch.mm (linear.once)."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x.float(), self.t).to(x.dtype)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(x.float(), self.t).relu_().to(x.dtype)

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return torch.addmm(res.float(), x.float(), self.t).to(res.dtype)


class Native:
    """A float32 weight packed for bildlib.kernels.cpu's product (cpu_gemm.h): each output one
    sum in index order, so row-invariant by construction, and a k-row call reads W once (the native
    engine's; on an AVX2 EPYC oneDNN's product took 1.4-2.9 times its one-row time at 10 rows)."""

    __slots__ = ("p", "m", "f")
    OWN_RELU = True

    def __init__(self, w: torch.Tensor):
        mod = cpu.load()
        self.p, self.m, self.f = mod.pack(w.detach()), w.shape[0], mod.linear

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x, self.p, self.m, None, False)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return self.f(x, self.p, self.m, None, True)

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return self.f(x, self.p, self.m, res, False)


class Packed:
    __slots__ = ("p",)
    OWN_RELU = True  # relu fused into oneDNN's product: another primitive, probed on its own

    def __init__(self, w: torch.Tensor):
        self.p = packed(w)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return _LIN(x, self.p, None, "none", [], "")

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        """Rounding and relu commute, so the fused relu gives the same bits."""
        return _LIN(x, self.p, None, "relu", [], "")

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return _LIN_ADD(x, res, self.p, None, "add")


_LIN = _LIN_ADD = None


def packed(w: torch.Tensor) -> torch.Tensor:
    """W (out, in) in oneDNN's layout, kept on the tensor with its version counter and storage:
    later engines on the same weights pack nothing; an in-place change of W (training) or new
    data under the same Parameter (`model.to(dtype)` swaps `.data`) packs again."""
    global _LIN, _LIN_ADD
    version = -1 if w.is_inference() else w._version  # inference tensors keep no version counter
    key = (version, w.data_ptr(), w.dtype, tuple(w.shape))
    done = getattr(w, "_bild_packed", None)
    if done is not None and done[0] == key:
        return done[1]
    _LIN, _LIN_ADD = torch.ops.mkldnn._linear_pointwise, torch.ops.mkldnn._linear_pointwise.binary
    with torch.no_grad():
        p = torch.ops.mkldnn._reorder_linear_weight(w.detach(), None)
    w._bild_packed = (key, p)
    return p


_ONEDNN: bool | None = None


def onednn(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this PyTorch runs oneDNN's prepacked linear (x86 and most Arm builds) in dtype: one
    tiny product, checked against torch.mm once per process; for bf16, also whether this CPU can
    (bf16_packing: the engine never asks a CPU for what it refuses)."""
    if dtype == torch.bfloat16 and not bf16_packing():
        return False
    global _ONEDNN
    if _ONEDNN is None:
        try:
            w, x = torch.eye(3, 2), torch.ones(1, 2)
            p = torch.ops.mkldnn._reorder_linear_weight(w, None)
            y = torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "")
            _ONEDNN = torch.backends.mkldnn.is_available() and torch.equal(y, x @ w.t())
        except (AttributeError, RuntimeError, NotImplementedError):
            _ONEDNN = False
    return _ONEDNN


def bf16_packing() -> bool:
    """Whether this CPU packs bf16 weights for oneDNN: it needs AVX512BW, VL and DQ or AVX-NE-CONVERT
    (oneDNN's own device check, torch.ops.mkldnn._is_mkldnn_bf16_supported). An AVX2-only CPU,
    most student laptops, refuses with "bf16 path needs the cpu support avx_ne_convert or
    avx512bw, avx512vl and avx512dq"."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def bf16_packing_refused() -> str:
    """Why this machine does not pack bf16 weights, naming its CPU and ISA (tests skip with it)."""
    return (f"this CPU ({rowinv.cpu_name()}, {rowinv.isa()}) cannot pack bf16 weights for oneDNN: it "
            "has neither AVX512BW/VL/DQ nor AVX-NE-CONVERT (torch.ops.mkldnn._is_mkldnn_bf16_supported)")
