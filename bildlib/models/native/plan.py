"""What the C++ draft loop (bildlib.kernels.cpu's Plan, cpu_draft.h) is handed: a native T5's
weights and each product as models.linear chose it (`build`), and a run's arguments and result
(`Run`, `Drafted`, `run`).

A product goes over as (kind, a, b, pad, pad_add): Packed (oneDNN's packed weight), MM (W^T),
Float32 (its float32 W^T, and the row-invariant path rows_mm took at its two shape keys, here, at
this thread count: "bmm" 1, "bmm>=R" R, "rowwise" 0) or Int8 (codes, scales). A product of any
other kind (a wrapped one: wholecall.EachRow), or an activation other than relu and gelu_new, has
no C++ mirror: build returns None and the Python loop runs. A plan holds this thread count's
paths; the engine builds another when it changes."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers.activations import NewGELUActivation

from bildlib.models import linear, rowinv

KINDS = {linear.Packed: 0, linear.MM: 1, linear.Float32: 2, linear.Int8: 3, linear.Native: 4,
         linear.NativeInt8: 5}
STOPS = ("fallback", "limit", "eos", "length")  # cpu_draft.h's Stop, in its order


@dataclass(frozen=True)
class Run:
    """A small model's run of Algorithm 1: at most `most` tokens, while each token's max
    probability is at least `fallback` (None: never falls back), until `eos` or `room` tokens;
    greedy, or nucleus sampling (temperature, top_p) drawing one uniform per step from `generator`.
    confidence False (vanilla decoding, no fallback): the tokens' max probabilities are not
    computed (NaN)."""

    most: int
    fallback: float | None
    eos: int
    room: int
    temperature: float = 0.0
    top_p: float = 1.0
    generator: torch.Generator | None = None
    confidence: bool = True


@dataclass(frozen=True)
class Drafted:
    """A run's result: the tokens kept and their max probabilities, why it stopped (STOPS), and
    each model step's wall seconds, timed in C++ (the steps: kept, plus the token dropped at a
    fallback)."""

    tokens: list[int]
    probs: list[float]
    stop: str
    seconds: list[float]

    @property
    def steps(self) -> int:
        return len(self.seconds)


def first_only() -> bool:
    return rowinv.FIRST_ONLY


def spec(p) -> tuple | None:
    """(kind, a, b, pad, pad_add) for product p, or None where the C++ loop has no mirror of it."""
    kind, none = KINDS.get(type(p)), torch.empty(0)
    if kind is None:
        return None
    if kind == 0:
        return (0, p.p, none, 1, 1)
    if kind == 1:
        return (1, p.t, none, 1, 1)
    if kind == 3:
        return (3, p.q, p.s, 1, 1)
    if kind == 4:
        return (4, p.p, none, p.m, 1)
    if kind == 5:
        return (5, p.p, p.s, p.m, 1)
    n, m = p.t.shape
    return (2, p.t, none, rows_pad(n, m, False), rows_pad(n, m, True))


def rows_pad(n: int, m: int, per_row: bool) -> int:
    """rows_mm's path for (k, n) @ (n, m) (+ a residual of k rows: per_row) on a CPU at this
    thread count, as cpu_draft.h's rows_mm takes it: 1 "bmm", R "bmm>=R", 0 "rowwise". One tiny
    product chooses it where nothing has yet (the same probe a decode's first call makes)."""
    key = (n, m, per_row, "cpu", rowinv.FIRST_ONLY, torch.get_num_threads())
    if key not in linear.ROWS_PATH:
        linear.rows_mm(torch.zeros(1, n), torch.zeros(n, m), torch.zeros(1, m) if per_row else None)
    name = linear.ROWS_PATH.get(key, "bmm")  # FIRST_ONLY: nothing recorded, the first path ("bmm")
    return 0 if name == "rowwise" else int(name.removeprefix("bmm>=")) if ">=" in name else 1


def activation(act) -> int | None:
    """cpu_draft.h's code for a feed-forward activation: 0 relu, 1 HF's NewGELUActivation
    ("gelu_new", mT5's), None for any other (the Python loop runs)."""
    if act is F.relu:
        return 0
    return 1 if type(act) is NewGELUActivation else None


def build(impl, width: int):
    """(the C++ Plan of a native T5 `impl`, -1: no source yet), or None where a product or the
    activation has no C++ mirror. `width`: the logits' columns the policy reads (LM.width)."""
    act = activation(impl.act)
    names = ("qkv_l", "o_l", "wi0_l" if impl.gated else "wi_l", "wi1_l", "wo_l")
    specs = [[spec(w[n]) for w in impl.dec] if n in impl.dec[0] else [] for n in names]
    lm = spec(impl.lm_l)
    if act is None or lm is None or any(s is None for layer in specs for s in layer):
        return None
    head = impl.head_ln if impl.f32 else impl.dec_ln
    ln0 = [w["ln0_n"] for w in impl.dec]
    lnf = [w["lnf_n"] for w in impl.dec]
    p = impl.cpp.Plan(impl.emb, head, float(impl.scale or 0.0), impl.eps_dn, impl.f32, act, impl.H, width,
                      ln0, lnf, *specs, lm)  # fmt: skip
    return p, -1


def run(p, tokens: list[int], pos: int, buf: torch.Tensor, bias: torch.Tensor, r: Run) -> Drafted:
    """Plan p's run from tokens at [pos, ...) over the cache buf and bias table (room made)."""
    x = torch.tensor(tokens, dtype=torch.long)
    fb = -1.0 if r.fallback is None else float(r.fallback)
    kept, probs, stop, seconds = p.run(x, pos, buf, bias, r.most, fb, r.eos, r.room, float(r.temperature),
                                     float(r.top_p), r.generator, r.confidence)  # fmt: skip
    return Drafted(kept, probs, STOPS[stop], seconds)
