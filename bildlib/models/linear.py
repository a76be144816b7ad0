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

from bildlib.models import rowinv

# Whether linear() may prepack or copy (tests turn it off to compare with plain torch.mm).
PACK = True
# Fewer weights than this run without oneDNN: its call overhead (about 10 us) outweighs its
# faster reads. Measured on the shipped pair (docs/engines.md).
MIN_PACKED = {torch.float32: 1 << 18, torch.bfloat16: 1 << 17}


def linear(w: torch.Tensor) -> Packed | Float32 | MM | Int8:
    """The product object for weight w (out, in) (module docstring): the first of candidates(w)
    that is row-invariant on this machine and device at w's shape and dtype (rowinv.probe, once
    per process and shape), Float32 (rows_mm, itself probed) last. With PACK off: MM."""
    if not PACK:
        return MM(w)
    key = (tuple(w.shape), str(w.dtype).removeprefix("torch."))
    cands = {c.__name__: c for c in candidates(w)}
    cls = rowinv.choose("linear", key, cands, lambda c: _invariant(c, w), w.device.type)[1]
    return Int8(*w._bild_int8) if cls is Int8 else cls(w)


def candidates(w: torch.Tensor) -> list[type]:
    """The product classes for weight w, fastest first (module docstring). On a GPU, cuBLAS's
    product alone, probed and recorded. On an H200 in float32 it gave one row other bits alone
    than among several at all 12 weight shapes of the shipped pair, and Float32's batched one-row
    products did at 5 of them too, at a far higher cost; so lossless BiLD on a GPU says it is not
    exact until the engine has row-invariant products there (docs/engines-gpu.md, *On a GPU*)."""
    if w.device.type != "cpu":
        return [MM]
    cands: list[type] = [Int8] if int8_ok(w) else []
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


def rows_mm(x: torch.Tensor, t: torch.Tensor, res: torch.Tensor | None = None) -> torch.Tensor:
    """x (k, n) @ t (n, m) (+ res (k, m), or (1, m) for every row), each row's result the same
    bits whatever k is and wherever the row sits in x: torch.mm is not (MKL multiplies one row
    (gemv) and several (gemm) in different summation orders), so a token's logits would depend on
    how many tokens its call carried, and lossless BiLD would drift from vanilla greedy (bf16
    rounding magnifies the last-bit differences). The path is probed once per process and shape
    (rowinv): k one-row products in one batched call, padded to a few rows where this machine's
    kernel treats one row apart, or one call per row. Where m is not a multiple of 4, output rows
    start off 16-byte boundaries and some rows' bits changed on this project's CPUs, so the engine
    pads its folded cross-attention to such widths."""
    per_row = res is not None and (res.shape[0] != 1 or x.shape[0] == 1)
    key = (x.shape[1], t.shape[1], per_row, x.device.type, rowinv.FIRST_ONLY, torch.get_num_threads())
    f = _ROWS.get(key)
    if f is None:
        f = _ROWS[key] = _rows_path(key, t, res)
    return f(x, t, res)


def _rows_bmm(x: torch.Tensor, t: torch.Tensor, res: torch.Tensor | None = None) -> torch.Tensor:
    """x (k, n) @ t (n, m) (+ res) as a batch of k one-row products."""
    k = x.shape[0]
    if res is None:
        return torch.bmm(x.unsqueeze(1), t.expand(k, -1, -1)).squeeze(1)
    return torch.baddbmm(res.unsqueeze(1), x.unsqueeze(1), t.expand(k, -1, -1)).squeeze(1)


_ROWS: dict[tuple, object] = {}  # (n, m, per-row res, device, rowinv.FIRST_ONLY, threads) -> its path
ROWS_PATH: dict[tuple, str] = {}  # the same keys -> the path's name (rowinv.paths; models.native.plan)


def _rows_path(key: tuple, t: torch.Tensor, res: torch.Tensor | None):
    """The first row-invariant path of rows_mm at this key. It serves every matrix of the shape
    (weights of either dtype, a source's folded keys), so it is probed on two stand-ins, one with
    float32 values and one with bf16 values, with rows that show a summation order (rowinv.sharp)."""
    n, m, per_row = key[0], key[1], key[2]
    g = torch.Generator().manual_seed(3)
    t32 = torch.randn(n, m, generator=g).to(t.device)
    cases = []  # (product over probe rows, probe rows)
    for u in (t32, t32.bfloat16().float()):
        x = rowinv.sharp(u.t())
        if res is None:
            cases.append((lambda f, u=u: lambda z: f(z, u, None), x))
        elif per_row:
            xr = torch.cat([x, torch.randn(x.shape[0], m, generator=g)], 1)
            cases.append((lambda f, u=u: lambda z: f(z[:, :n], u, z[:, n:]), xr))
        else:
            one = res[:1].clone().float()
            cases.append((lambda f, u=u, one=one: lambda z: f(z, u, one), x))

    def check(f) -> bool:
        return not any(rowinv.probe(over(f), x.shape[1], t.dtype, t.device, x0=x) for over, x in cases)

    name, f = rowinv.choose("rows_mm", key[:3], rowinv.paths(_rows_bmm, 0, (0, 2)), check, key[3])
    ROWS_PATH[key] = name
    return f


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
