"""The whole-call check: a lean engine's decoder call over k tokens gives each token the bits of
one-token calls, measured on the model itself where it runs (docs/engines.md, *Row invariance*).

models.rowinv probes each product and attention path alone. That is not the property lossless
BiLD rests on: on an AMD EPYC with AVX2 only, every product of the shipped large was probed
invariant and still a 3-token bf16 call gave its tokens other logits than one-token calls, by one
bf16 step; something outside the products (a norm's reduction, an element-wise kernel's vector
tail, a conversion) depended on the number of rows. So when an LM is made on a lean engine, once
per process, model, dtype and thread count, `settle` runs the model's own decoder:
- one-token calls over N seeded random tokens after a seeded random source (vanilla's steps);
- then calls of k = 2, 3, 5, 8, 11, 16 tokens at position 1, and of 11 at position 5, each
  compared bit for bit with the one-token calls' logits (BiLD's checks carry at most 11).

Where a call differs, it finds the op family that breaks it: each of the engine's OPS alone is
switched to one row at a time (the row a fresh contiguous copy, so each row runs the one-row
call vanilla's step runs) and the whole check run again; if no single one suffices, they are
switched in order until the check passes, then each that is not needed is switched back. The
last family, "call", runs a k-token call as k one-token calls (invariant by construction, at k
steps' cost). Where even that fails (a kernel whose bits vary from run to run), the verdict says
so: rowinv.exact_here() is then False and lossless BiLD warns that it is not exact.

Verdicts land in rowinv.CALLS; rowinv.summary() (checks files, README's run lines) names them.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass

import torch

from bildlib.models import rowinv

log = logging.getLogger(__name__)

KS = (2, 3, 5, 8, 11, 16)  # call lengths checked at position 1
AT = ((1, KS), (5, (11,)))  # (position, call lengths): a call after a longer prefix too
SOURCE = 12  # the check's source length (encoder-decoder) or prompt length (decoder-only)


@dataclass(frozen=True)
class Verdict:
    name: str  # the model, as LM names it
    dtype: str
    threads: int
    passed: bool  # every checked call gave each token the one-token calls' bits
    switched: tuple[str, ...]  # op families run one row at a time to get there
    first: tuple[int, int] | None  # (position, k) of the first differing call, unswitched
    ms: float  # what the check cost, switching included

    def line(self) -> str:
        """"multi30k-large bfloat16 2 threads passed (one row at a time: norm)"."""
        rows = f" (one row at a time: {', '.join(self.switched)})" if self.switched else ""
        state = "passed" if self.passed else "FAILED"
        return f"{self.name} {self.dtype} {self.threads} threads {state}{rows}"


def each_row(f, *args, split: int = 1) -> torch.Tensor:
    """f(*args) one row (dimension 0) of its first `split` arguments at a time, each row a fresh
    contiguous copy (so every row starts where an allocation starts, as a one-token call's
    does), the other arguments whole; results concatenated."""
    one = lambda a, i: a.narrow(0, i, 1).clone(memory_format=torch.contiguous_format)  # noqa: E731
    return torch.cat([f(*(one(a, i) for a in args[:split]), *args[split:]) for i in range(args[0].shape[0])])


def op(rows: frozenset, name: str, f, *args, split: int = 1) -> torch.Tensor:
    """f(*args), one row of its first `split` arguments at a time where op family `name` is
    switched (name in rows)."""
    return each_row(f, *args, split=split) if name in rows else f(*args)


class EachRow:
    """A models.linear product run one row at a time (op family "products")."""

    __slots__ = ("p",)
    OWN_RELU = False

    def __init__(self, p):
        self.p = p

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return each_row(self.p, x)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return each_row(self.p.relu, x)

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        if res.shape[0] != x.shape[0]:  # one row of res for every row (a bias)
            return each_row(lambda a: self.p.add(a, res), x)
        return each_row(self.p.add, x, res, split=2)


@torch.inference_mode()
def differs(impl, vocab: int, seed: int = 0) -> tuple[int, int] | None:
    """The (position, k) of the first checked call whose logits differ in any bit from one-token
    calls' (module docstring), or None where every one keeps them. Leaves impl's cache holding the
    check's tokens: the caller's next sentence begins anew (models.lm.LM.start)."""
    device = impl.model.device
    g = torch.Generator().manual_seed(seed)
    lo = min(3, vocab - 1)  # past the special tokens where there are any
    src = torch.randint(lo, vocab, (1, SOURCE), generator=g).to(device)
    n = max(p + k for p, ks in AT for k in ks)
    tokens = torch.randint(lo, vocab, (n,), generator=g).to(device)
    impl.begin(src)
    one = torch.cat([impl.forward(tokens[i : i + 1], i) for i in range(n)])  # (n, V)
    for p, ks in AT:
        for k in ks:
            # the cache before p holds the one-token calls' keys and values; this call rewrites
            # [p, p + k) with its own, which equal theirs while the check passes
            if not torch.equal(impl.forward(tokens[p : p + k], p), one[p : p + k]):
                return p, k
    return None


# HF model -> {(arch, dtype, threads): Verdict}
_DONE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def settle(impl, name: str, vocab: int) -> Verdict | None:
    """Check impl's whole decoder call here and switch op families until it passes (module
    docstring); impl.rows holds the switch. Once per process, model, dtype and thread count: a
    second engine on the same model takes the first one's switch unchecked. None where the engine
    cannot switch its ops (the hf and static engines) or under rowinv.first_only()."""
    if not hasattr(impl, "set_rows") or rowinv.FIRST_ONLY:
        return None
    threads, dtype = torch.get_num_threads(), str(impl.model.dtype).removeprefix("torch.")
    key = (impl.arch, dtype, threads)
    done = _DONE.setdefault(impl.model, {})
    if key in done:
        impl.set_rows(done[key].switched)
        impl.checked = threads
        return done[key]
    t0 = time.perf_counter()
    impl.set_rows(())
    first = differs(impl, vocab)
    switched: tuple[str, ...] = ()
    passed = first is None
    if not passed:
        passed, switched = _search(impl, vocab)
    v = Verdict(name, dtype, threads, passed, switched, first, (time.perf_counter() - t0) * 1e3)
    done[key] = rowinv.CALLS[(name, dtype, threads)] = v
    impl.checked = threads
    if first is not None:
        level = logging.INFO if passed else logging.WARNING
        log.log(level, "%s: a %d-token call at position %d gave other bits than one-token calls; %s "
                       "(bildlib.models.wholecall)", name, first[1], first[0],  # fmt: skip
                "switched " + ", ".join(switched) + " to one row at a time" if passed else
                "no switch made it invariant: lossless BiLD cannot be exact here")  # fmt: skip
    return v


def _search(impl, vocab: int) -> tuple[bool, tuple[str, ...]]:
    """The fewest op families (impl.OPS, in order, but "call") whose switch makes the check pass:
    each alone, else switched in order until it passes and then the unneeded ones switched back;
    else "call" alone, the last resort; (False, all of OPS) where even that fails."""
    ops = [o for o in impl.OPS if o != "call"]
    for o in ops:
        impl.set_rows((o,))
        if differs(impl, vocab) is None:
            return True, (o,)
    on: list[str] = []
    for o in ops:
        on.append(o)
        impl.set_rows(on)
        if differs(impl, vocab) is None:
            for extra in on[:-1]:
                impl.set_rows([x for x in on if x != extra])
                if differs(impl, vocab) is None:
                    on.remove(extra)
            impl.set_rows(on)
            return True, tuple(on)
    impl.set_rows(("call",))
    if differs(impl, vocab) is None:
        return True, ("call",)
    impl.set_rows(impl.OPS)
    return False, tuple(impl.OPS)


def recheck(impl, name: str, vocab: int) -> None:
    """settle() again where torch's thread count changed since impl was checked (kernels block by
    thread count); LM.start calls it, between sentences, where the engine's cache is free."""
    if getattr(impl, "checked", None) not in (None, torch.get_num_threads()):
        settle(impl, name, vocab)
