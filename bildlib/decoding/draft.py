"""The small model's run of Algorithm 1: "while max p_S >= α_FB: y <- y + [SmallModel(y)]", at most
a given number of tokens, until EOS or max_new_tokens. One C++ call where the model's engine has
one (models.native: NativeT5.draft; `native_run`, which vanilla decoding also runs), else the
Python loop of `small_run`, the reference the native run is held to token for token and counter
for counter (tests/test_draft.py)."""

from __future__ import annotations

import math
import time

from bildlib.decoding.common import finished
from bildlib.decoding.policy import Policy
from bildlib.decoding.trace import Trace
from bildlib.models.native.plan import Drafted, Run


def native_run(tr: Trace, pol: Policy, model, seq: list[int], most: int, fallback: float | None,
               max_new_tokens: int, confidence: bool = True) -> Drafted | None:  # fmt: skip
    """model's run onto seq as one C++ call (plan.Run: at most `most` tokens, while each token's
    max probability is at least `fallback`, until EOS or max_new_tokens), counted in the Trace:
    each step a small call timed in C++, each token written by "S". None where the model has no
    native run (its engine, a switched op family, a stand-in model): the caller's loop runs."""
    f = getattr(model, "draft", None)
    if f is None:
        return None
    room = max_new_tokens - (len(seq) - 1)
    sampling = pol.s if not pol.greedy else None
    eos = -1 if model.eos is None else model.eos
    r = Run(min(most, room), fallback, eos, room, sampling.temperature if sampling else 0.0,
            sampling.top_p if sampling else 1.0, pol.g, confidence)  # fmt: skip
    t0 = time.perf_counter()
    out = f(seq, r)
    if out is not None:
        tr.record_run(time.perf_counter() - t0, out.seconds)
        for y in out.tokens:
            tr.emit(seq, y, "S")
    return out


def small_run(tr: Trace, pol: Policy, small, seq: list[int], s, run: int, low: float):
    """The small model writes tokens onto seq while its max probability is at least s.fallback,
    at most s.limit - run in a row, until EOS or s.max_new_tokens. Returns (tokens written, the
    least max probability among them and `low`, whether it fell back: its last token was dropped);
    s: bild's BildSettings. The Trace counts every drafted token and model step."""
    most = s.max_new_tokens if math.isinf(s.limit) else int(s.limit) - run
    out = native_run(tr, pol, small, seq, most, s.fallback, s.max_new_tokens)
    if out is not None:
        tr.drafted += out.steps
        return len(out.tokens), min([low, *out.probs]), out.stop == "fallback"
    n = 0
    while True:  # the reference: one model call per token
        p, y = pol.propose(pol.scaled(tr.call("S", small, seq)[-1:]))  # "p_S <- SmallModel(y)"
        tr.drafted += 1
        if s.fallback is not None and not p >= s.fallback:  # "else: fallback" (a NaN falls back too)
            return n, low, True
        tr.emit(seq, y, "S")  # "if max p_S > α_FB": the small token stays
        n, low = n + 1, min(low, p)
        if n >= most or finished(seq, small.eos, s.max_new_tokens):
            return n, low, False
