"""The whole-call check: a lean engine's decoder call over k tokens gives each token the bits of
one-token calls, measured on the model itself where it runs (docs/row-invariance.md).

models.rowinv probes each product and attention path alone. That is not the property lossless
BiLD rests on: on an AMD EPYC with AVX2 only, every product of the shipped large was probed
invariant and still a 3-token bf16 call gave its tokens other logits than one-token calls, by one
bf16 step; something outside the products (a norm's reduction, an element-wise kernel's vector
tail, a conversion) depended on the number of rows. So when an LM is made on a lean engine, once
per process, model, dtype and thread count, `settle` runs the model's own decoder:
- one-token calls over a real target sentence after its real source (SOURCE and TARGET, through
  the model's own tokenizer): vanilla's steps, teacher-forced, so the tokens are what a small
  model proposes, not only the large model's own greedy choices. Random tokens, and the model's
  greedy tokens, were not enough: on an emulated AMD EPYC Milan with AVX2 both passed where a
  real sentence pair's 3-token bf16 calls kept no one-token call's bits;
- then, for k = 2, 3, 5, 8, 11, 16, those tokens from position 1 on in calls of k (BiLD's calls;
  its checks carry at most 11), each compared bit for bit with the one-token calls' logits.

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
from pathlib import Path

import torch

from bildlib.models import rowinv

log = logging.getLogger(__name__)

KS = (2, 3, 5, 8, 11, 16)  # call lengths, each over every position from 1 on
N = 17  # decoder tokens checked (bos and 16 more)
# the check's sentence pair, Multi30k-like and in no split the project ships, tokenized by each
# model's own tokenizer: the source (encoder-decoder) or prompt (decoder-only), and the target
SOURCE = "Drei Kinder in bunten Jacken bauen am Ufer eines Sees einen Schneemann, während ein Hund bellt."
TARGET = "Three children in colorful jackets build a snowman on the shore of a lake while a dog barks."


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


def op(rows: frozenset, name: str, f, *args, split: int = 1) -> torch.Tensor:
    """f(*args), one row of its first `split` arguments at a time where op family `name` is
    switched (name in rows): rowinv.rowwise, each row a fresh contiguous copy, as a one-token
    call's row starts where an allocation starts."""
    return rowinv.rowwise(f, 0, tuple(range(split)))(*args) if name in rows else f(*args)


class EachRow:
    """A models.linear product run one row at a time (op family "products")."""

    __slots__ = ("p",)
    OWN_RELU = False

    def __init__(self, p):
        self.p = p

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return rowinv.rowwise(self.p)(x)

    def relu(self, x: torch.Tensor) -> torch.Tensor:
        return rowinv.rowwise(self.p.relu)(x)

    def add(self, x: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
        return rowinv.rowwise(self.p.add, 0, (0, 1))(x, res)  # a one-row res (a bias) is left whole


@torch.inference_mode()
def differs(impl, src: torch.Tensor, tokens: torch.Tensor) -> tuple[int, int] | None:
    """The (position, k) of the first checked call whose logits differ in any bit from one-token
    calls' (module docstring), or None where every one keeps them: src (1, S) the source or
    prompt, tokens (n,) the decoder tokens, the first one bos. Leaves impl's cache holding the
    check's tokens: the caller's next sentence begins anew (models.lm.LM.start)."""
    device = impl.model.device
    impl.begin(src.to(device))
    tokens, n = tokens.to(device), tokens.shape[0]
    one = torch.cat([impl.forward(tokens[i : i + 1], i) for i in range(n)])  # (n, V): vanilla's steps
    for k in KS:
        impl.forward(tokens[:1], 0)  # bos, as BiLD's first call
        for p in range(1, n, k):
            # the cache before p holds this schedule's earlier calls, equal to the one-token calls'
            # while the check passes; this call rewrites [p, p + k)
            if not torch.equal(impl.forward(tokens[p : p + k], p), one[p : p + k]):
                return p, k
    return None


# HF model -> {(arch, dtype, threads): Verdict}
_DONE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def inputs(lm) -> tuple[torch.Tensor, torch.Tensor]:
    """(src (1, S), tokens (N,)): SOURCE as lm's source or prompt, and bos then TARGET's first
    tokens (repeated to N where it has fewer), ids that the tokenizer and the model both know."""
    vocab = min(lm.width, lm.vocab)
    ids = [min(i, vocab - 1) for i in lm.encode(SOURCE)[:32]] or [0]
    if not lm.is_encoder_decoder and len(ids) < 2:
        ids = [ids[0]] * 2
    bos = int(lm.model.config.decoder_start_token_id) if lm.is_encoder_decoder else ids[-1]
    target = [min(i, vocab - 1) for i in lm.encode(TARGET)] or [bos]
    return torch.tensor([ids]), torch.tensor(([bos] + target * N)[:N])


def settle(lm) -> Verdict | None:
    """Check LM lm's engine's whole decoder call here and switch op families until it passes
    (module docstring); lm.impl.rows holds the switch. Once per process, model, dtype and thread
    count: a second engine on the same model takes the first one's switch unchecked. None where
    the engine cannot switch its ops (the hf and static engines) or under rowinv.first_only()."""
    impl = lm.impl
    name = Path(lm.name).name if Path(lm.name).exists() else lm.name  # a folder's name; hub ids whole
    if not hasattr(impl, "set_rows") or rowinv.FIRST_ONLY:
        return None
    threads, dtype = torch.get_num_threads(), lm.precision  # "int8" for the native int8 products
    key = (impl.arch, dtype, threads)
    done = _DONE.setdefault(impl.model, {})
    if key in done:
        impl.set_rows(done[key].switched)
        impl.checked = threads
        return done[key]
    t0 = time.perf_counter()
    impl.set_rows(())
    x = inputs(lm)
    first = differs(impl, *x)
    switched: tuple[str, ...] = ()
    passed = first is None
    if not passed:
        passed, switched = _search(impl, x)
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


def _search(impl, x: tuple) -> tuple[bool, tuple[str, ...]]:
    """The fewest op families (impl.OPS, in order, but "call") whose switch makes the check pass:
    each alone, else switched in order until it passes and then the unneeded ones switched back;
    else "call" alone, the last resort; (False, all of OPS) where even that fails."""
    ops = [o for o in impl.OPS if o != "call"]
    for o in ops:
        impl.set_rows((o,))
        if differs(impl, *x) is None:
            return True, (o,)
    on: list[str] = []
    for o in ops:
        on.append(o)
        impl.set_rows(on)
        if differs(impl, *x) is None:
            for extra in on[:-1]:
                impl.set_rows([x for x in on if x != extra])
                if differs(impl, *x) is None:
                    on.remove(extra)
            impl.set_rows(on)
            return True, tuple(on)
    impl.set_rows(("call",))
    if differs(impl, *x) is None:
        return True, ("call",)
    impl.set_rows(impl.OPS)
    return False, tuple(impl.OPS)


def recheck(lm) -> None:
    """settle() again where torch's thread count changed since lm's engine was checked (kernels
    block by thread count); LM.start calls it, between sentences, where the engine's cache is free."""
    if getattr(lm.impl, "checked", None) not in (None, torch.get_num_threads()):
        settle(lm)
