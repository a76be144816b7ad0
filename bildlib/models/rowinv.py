"""Row invariance, measured on the machine that runs (docs/row-invariance.md).

Lossless BiLD equals vanilla greedy decoding only if the large model gives a token the same logits
whether its call carries that token alone (vanilla) or ten tokens (BiLD's check): every product of
a decoder step must give each row the bits it gets alone. Whether a kernel does is a property of
the CPU, the library and the ISA it dispatches to, not of our code. On this project's AMD EPYCs
MKL's one-row and several-row float32 products agreed; on an Intel Xeon with AMX the one-row
product (gemv) sums in another order, and float32 attention's bmm differs at one and two rows.

So the engine measures it. `probe` runs a product on 1..16 rows against one 16-row call, with the
rows starting on and off 16-byte boundaries; `choose` takes the first path, fastest first, that
`probe` finds invariant, once per process, shape and thread count, and logs a fallback. (A
decoder's self-attention must also give a row the same bits whether the keys after it are absent,
as in vanilla's steps, or masked, as in a longer call: models.lean_common.attend_causal probes
that.) The paths, for a product over rows:
- "bmm": the kernel as it is (for models.linear.rows_mm: a batch of one-row products);
- "bmm>=R" (R = 2, 4, 8, 16): the same kernel with the call padded to at least R rows, which keeps
  a kernel's few-row special case (gemv at one row) out of the way;
- "rowwise": one call per row on a fresh copy of the row, so that every row runs the same call:
  invariant by construction (and checked like the rest); the slowest.

Probing the parts is not enough: models.wholecall checks each lean engine's whole decoder call
on the model itself (k-token calls against one-token calls) and switches what breaks it to one
row at a time; its verdicts land in CALLS. `summary()` says what was chosen in this process and
whether all of it, whole calls included, is invariant: checks files record it
(notebook.save_checks), and lossless BiLD on a machine where it is False says it is not exact
(decoding.bild).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from bildlib.models.cpuinfo import caps, cpu_name, gpu, isa  # noqa: F401 (where choices are probed)

log = logging.getLogger(__name__)

ROWS = 16  # the probe's largest call; BiLD's calls carry at most 11 tokens (10 small ones + 1)
PADS = (1, 2, 4, 8, ROWS)  # "bmm>=R" for these R, 1 being the kernel as it is


def probe(f: Callable[[torch.Tensor], torch.Tensor], width: int, dtype: torch.dtype,
          device: str | torch.device = "cpu", rows: int = ROWS, seed: int = 0,
          x0: torch.Tensor | None = None) -> list[tuple]:  # fmt: skip
    """Where f, a product over rows ((k, width) -> (k, ...)), is not row-invariant: each
    (offset, k, start) whose k-row call on rows [start, start + k) differs in any bit from those
    rows of one aligned `rows`-row call, for k = 1..rows (k = 1 at every row of the aligned
    buffer, and at its first and last row off it); offset 1: the same
    rows copied one element past a (16-byte aligned) buffer's start. The rows: x0 (rows, width)
    when given (sharp's, for a product whose matrix is known), else random normal ones. An empty
    list: invariant at this width."""
    if x0 is None:
        g = torch.Generator().manual_seed(seed)
        x0 = torch.randn(rows, width, generator=g)
    x0 = x0.to(device=device, dtype=dtype)
    rows = x0.shape[0]
    full = f(x0)
    bad = []
    for off in (0, 1):
        buf = torch.empty(rows * width + 1, device=device, dtype=dtype)
        x = buf[off : off + rows * width].view(rows, width).copy_(x0)
        for k in range(1, rows + 1):
            # the first rows aligned, the last rows not; one row alone from every start of the
            # aligned buffer (each sharp row shows its own output's order), off it the first and last
            singles = range(rows) if off == 0 else (0, rows - 1)
            for start in singles if k == 1 else [0 if off == 0 else rows - k]:
                if not torch.equal(f(x[start : start + k]), full[start : start + k]):
                    bad.append((off, k, start))
    return bad


def sharp(m: torch.Tensor, rows: int = ROWS, seed: int = 0, scale: float = 2.0**24,
          dtype: torch.dtype | None = None) -> torch.Tensor:  # fmt: skip
    """Probe rows (rows, n) for a product x @ m^T with m (out, n), each as sensitive to the
    product's summation order as a row can be. In half precision a product sums in float32 and
    rounds once, so two summation orders mostly round to the same bits: random rows let a kernel
    whose one-row call sums otherwise pass (oneDNN's packed bf16 product under
    ONEDNN_MAX_CPU_ISA=AVX512_CORE did; a real activation row then flipped one bit).

    Row r is random but for two large entries that cancel exactly at one output j:
    x_a = scale m[j, b] and x_b = -scale m[j, a], a and b where row j of m is largest in each
    half. Their products are exact in float32 (m's values times a power of two), so output j is
    small while its partial sums pass through large values: a kernel that adds the other terms in
    another order rounds them otherwise, by far more than one rounding step of the result. dtype:
    the probe rows' dtype, whose range caps scale (float16's would overflow at 2^24)."""
    g = torch.Generator().manual_seed(seed)
    out, n = m.shape
    w = m.detach().float().cpu()
    x = torch.randn(rows, n, generator=g)
    top = float(w.abs().max())
    if dtype is not None and dtype.is_floating_point and top > 0:  # the rows' dtype holds x and x m
        fit = torch.finfo(dtype).max / (16 * max(top, top * top))  # float16: 65504
        scale = min(scale, 2.0 ** math.floor(math.log2(fit)))
    if n < 2:
        return x
    h = n // 2  # the two entries in different halves of the sum, so no blocking adds them first
    for r in range(rows):
        j = int(torch.randint(out, (1,), generator=g))
        a, b = int(w[j, :h].abs().argmax()), h + int(w[j, h:].abs().argmax())  # the largest terms
        x[r, a], x[r, b] = w[j, b] * scale, -w[j, a] * scale
    return x


def at_least(f: Callable, R: int, dim: int = 0, rowed: tuple[int, ...] = (0,)) -> Callable:
    """f over the rows (dimension `dim`) of its arguments at positions `rowed` (the first one's
    rows; another with one row where the first has more is broadcast and left), called with at
    least R rows: fewer are padded with copies of the last row, and the padding's results dropped."""
    if R <= 1:
        return f

    def padded(*args):
        k = args[rowed[0]].shape[dim]
        if k >= R:
            return f(*args)
        return f(*_rows(args, rowed, dim, k, lambda a: _pad(a, R, k, dim))).narrow(dim, 0, k)

    return padded


def rowwise(f: Callable, dim: int = 0, rowed: tuple[int, ...] = (0,)) -> Callable:
    """f over the rows of its `rowed` arguments (as at_least), one call per row on a fresh
    contiguous copy of that row (so every call's rows start where an allocation starts)."""

    def each(*args):
        k = args[rowed[0]].shape[dim]
        one = lambda a, i: a.narrow(dim, i, 1).clone(memory_format=torch.contiguous_format)  # noqa: E731
        return torch.cat([f(*_rows(args, rowed, dim, k, lambda a, i=i: one(a, i)))
                          for i in range(k)], dim)  # fmt: skip

    return each


def _rows(args: tuple, rowed: tuple[int, ...], dim: int, k: int, g: Callable) -> list:
    """args with g applied to each `rowed` one that has k rows (None and broadcast rows left)."""
    return [g(a) if i in rowed and a is not None and a.shape[dim] == k else a for i, a in enumerate(args)]


def _pad(a: torch.Tensor, R: int, k: int, dim: int) -> torch.Tensor:
    last = a.narrow(dim, k - 1, 1)
    return torch.cat([a, last.expand(*a.shape[:dim], R - k, *a.shape[dim + 1 :])], dim)


def paths(f: Callable, dim: int = 0, rowed: tuple[int, ...] = (0,)) -> dict[str, Callable]:
    """The family of paths of a product f over rows, fastest first (module docstring)."""
    out = {("bmm" if R == 1 else f"bmm>={R}"): at_least(f, R, dim, rowed) for R in PADS}
    return out | {"rowwise": rowwise(f, dim, rowed)}


def each_thread_count(check: Callable[[], bool]) -> bool:
    """check() at one torch thread and at this process's count (kernels pick other blockings by
    thread count: on an Intel Xeon, rows_mm's one-row product agreed with several at one thread,
    not at two); torch's count is left as it was."""
    now = torch.get_num_threads()
    try:
        for t in sorted({1, now}):
            torch.set_num_threads(t)
            if not check():
                return False
        return True
    finally:
        torch.set_num_threads(now)


@dataclass(frozen=True)
class Choice:
    kind: str  # "linear", "rows_mm", "attention"
    path: str  # the chosen path's name
    invariant: bool  # False: no path was invariant here; the first one runs
    tried: tuple[str, ...]  # the paths refused before it
    device: str = "cpu"  # where it was probed ("cpu", "cuda")


CHOSEN: dict[tuple, Choice] = {}  # (kind, *shape key[, device other than cpu]) -> Choice, for this process
NOT_INVARIANT: set[tuple] = set()  # the keys of CHOSEN where no path was invariant
FIRST_ONLY = False  # take each product's fastest path unprobed (first_only)
CALLS: dict[tuple, object] = {}  # (model name, dtype, threads) -> models.wholecall.Verdict, this process


def choose(kind: str, key: tuple, candidates: dict[str, Callable], check: Callable[[Callable], bool],
           device: str = "cpu"):  # fmt: skip
    """The first of candidates (name -> path, fastest first) that check(path) finds invariant on
    `device`, remembered under (kind, *key), device appended where it is not the CPU; if none is,
    the first, recorded as not invariant and logged. Returns (name, path)."""
    names = list(candidates)
    key = (*key, device) if device != "cpu" else key
    if FIRST_ONLY:  # the engine before the probe (bench.exactness's cost): nothing probed or recorded
        return names[0], candidates[names[0]]
    for i, name in enumerate(names):
        if check(candidates[name]):
            if i:
                _log_once(kind, f"{kind} {key}: {', '.join(names[:i])} not row-invariant on this machine; "
                                f"using {name} (bildlib.models.rowinv)")  # fmt: skip
            CHOSEN[(kind, *key)] = Choice(kind, name, True, tuple(names[:i]), device)
            return name, candidates[name]
    _log_once(kind, f"{kind} {key}: no row-invariant path on this machine ({', '.join(names)}); lossless "
                    "BiLD cannot be exact here (bildlib.models.rowinv)", logging.WARNING)  # fmt: skip
    CHOSEN[(kind, *key)] = Choice(kind, names[0], False, tuple(names), device)
    NOT_INVARIANT.add((kind, *key))
    return names[0], candidates[names[0]]


@contextlib.contextmanager
def first_only():
    """Inside: each product takes its fastest path unprobed, as the engine did before it probed
    (bench.exactness times the two engines against each other in one process). Engines built
    inside keep their linear products; rows_mm and attention choose at each call, so an engine's
    calls run inside too."""
    global FIRST_ONLY
    before, FIRST_ONLY = FIRST_ONLY, True
    try:
        yield
    finally:
        FIRST_ONLY = before


_LOGGED: set[tuple[str, int]] = set()


def _log_once(kind: str, msg: str, level: int = logging.INFO) -> None:
    if (kind, level) not in _LOGGED:
        _LOGGED.add((kind, level))
        log.log(level, msg)


def summary() -> dict:
    """What this process chose: {"products": "linear Packed, Float32; rows_mm bmm>=2; ...",
    "whole_call": each whole-call check's verdict ("multi30k-large bfloat16 2 threads passed (one
    row at a time: norm)"; models.wholecall), "row_invariant": bool or None (nothing probed yet),
    False where a product or a whole call is not, "isa": where the choices were probed: the CPU's
    ISA and caps, and or the GPU}."""
    by_kind: dict[str, set[str]] = {}
    for c in CHOSEN.values():
        by_kind.setdefault(c.kind, set()).add(c.path if c.invariant else f"{c.path} (NOT invariant)")
    products = "; ".join(f"{k} {', '.join(sorted(v))}" for k, v in sorted(by_kind.items()))
    inv = all(c.invariant for c in CHOSEN.values()) if CHOSEN else None
    calls = [v.line() for v in CALLS.values()]
    if CALLS:
        inv = (inv is not False) and all(v.passed for v in CALLS.values())
    devices = {c.device for c in CHOSEN.values()}
    where = ([isa()] if not devices or "cpu" in devices else []) + [gpu(d) for d in sorted(devices - {"cpu"})]
    return {"products": products or "none probed", "whole_call": "; ".join(calls) or "none checked",
            "row_invariant": inv, "isa": "; ".join(where)}


def exact_here() -> bool:
    """False where a product this process chose is not row-invariant, or a whole decoder call
    failed its check (lossless BiLD then differs from vanilla greedy where a last bit flips an
    argmax)."""
    return not NOT_INVARIANT and all(v.passed for v in CALLS.values())


def not_exact() -> list[str]:
    """What makes this process not exact: the products with no invariant path and the whole calls
    that failed their check."""
    return [str(k) for k in sorted(NOT_INVARIANT)] + [v.line() for v in CALLS.values() if not v.passed]
