"""Batch > 1 (docs/batching.md): BiLD, vanilla greedy and greedy speculative decoding over many sources
at once, each row with its own fallbacks, rollbacks and length.

Each row runs the batch-1 decoder's control flow as a small state machine: want() says which
call the row needs next ("S", "L" or None: finished), small() / large() take that call's logits.
Every round, one small call runs over all rows that want the small model and one large call
over all rows that want the large model (bildlib.models.batch: a ragged, padded call), so each
row's output is what the batch-1 decoder gives for that source alone (tests/test_batch.py;
in floating point, up to the batched kernels' rounding, measured on all of val by
`python -m bildlib.bench.batchbench --check`). Greedy only: nucleus sampling would need each row's
draws in the batch-1 order, which no batched caller needs yet.

    outs, bt = D.bild_batch(small, large, sources, fallback=0.5, rollback=3.0)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from bildlib import kernels
from bildlib.decoding.bild import BildSettings, first_rollback
from bildlib.decoding.common import check_count, finished
from bildlib.decoding.policy import Policy
from bildlib.decoding.trace import Trace
from bildlib.models.batch import batched, check_sources
from bildlib.models.lm import check_pair

SCHEDULES = ("wait", "eager")
GREEDY = Policy(None, torch.device("cpu"))  # first_rollback reads only .greedy


@dataclass
class BatchTrace:
    """What a batched decode did: each row's Trace (its tokens, and the calls it took part in,
    each with the whole batched call's wall time) and the batched calls themselves: wall time,
    rows and padded tokens (rows x longest) of each."""

    rows: list[Trace]
    start_s: float = 0.0  # the models' start(): the encoders over the padded sources
    small_times: list[float] = field(default_factory=list)
    large_times: list[float] = field(default_factory=list)
    small_rows: list[int] = field(default_factory=list)
    large_rows: list[int] = field(default_factory=list)
    large_padded: list[int] = field(default_factory=list)

    def counters(self) -> dict:
        """Flat numbers for a results table, all sums (they add up over batches): the batch's
        calls, the rows they ran, seconds."""
        return {
            "batch": len(self.rows), "small_calls": len(self.small_times),
            "large_calls": len(self.large_times), "small_call_rows": sum(self.small_rows),
            "large_call_rows": sum(self.large_rows), "large_padded_tokens": sum(self.large_padded),
            "start_s": self.start_s, "small_s": sum(self.small_times), "large_s": sum(self.large_times),
        }  # fmt: skip


class _Row:
    """One row of a batch: seq = [bos] + output, and its Trace."""

    def __init__(self, bos: int):
        self.seq, self.tr = [bos], Trace()


class _Bild(_Row):
    """One row of bild(): its sequence and the loop's variables, a call at a time."""

    def __init__(self, s: BildSettings, bos: int, eos: int):
        super().__init__(bos)
        self.s, self.eos, self.run, self.low = s, eos, 0, 1.0
        self.large_next = s.rules == "authors"
        self.fell = self.done = self.over = False

    def want(self) -> str | None:
        """bild's loop head: "S", "L" (after a fallback, at the limit, or checking the end) or None."""
        if self.over:
            return None
        if self.fell:  # a dropped small token: the large model runs now
            return "L"
        s = self.s
        self.done = not self.large_next and finished(self.seq, self.eos, s.max_new_tokens)
        if not (self.done or self.large_next) and self.run < s.limit:
            return "S"
        if self.done and (self.run == 0 or not s.checks_end(self.low)):
            self.over = True
            return None
        return "L"

    def small(self, p: float, y: int) -> None:
        self.tr.drafted += 1
        if self.s.fallback is None or p >= self.s.fallback:  # keep the small token
            self.tr.emit(self.seq, y, "S")
            self.run, self.low = self.run + 1, min(self.low, p)
        else:
            self.tr.fallbacks += 1
            self.fell = True

    def large(self, logits: torch.Tensor, first: int, models) -> None:
        """logits (k, V) of the large call; seq[first:] the small tokens it checked."""
        s = self.s
        self.run, self.low, self.large_next, self.fell = 0, 1.0, False, False
        m = first_rollback(logits, self.seq[first:], s, GREEDY)
        if m is not None:
            self.tr.rollbacks += 1
            self.tr.rewind(self.seq, first + m, *models)
            self.tr.emit(self.seq, logits[m].argmax(), "L")
            self.large_next = s.rules == "authors"
        elif self.done:
            self.over = True
        else:
            self.tr.emit(self.seq, logits[-1].argmax(), "L")


class _RowView:
    """Row r of a batch model as Trace.rewind sees a model: ids and crop."""

    def __init__(self, m, r: int):
        self.m, self.r = m, r

    @property
    def ids(self) -> list[int]:
        return self.m.ids[self.r]

    def crop(self, n: int) -> None:
        self.m.crop(self.r, n)


def _call(bt: BatchTrace, who: str, m, rows: list, todo: list[int]) -> list[torch.Tensor]:
    """One batched call of model m over rows[todo], each running the tokens its cache lacks."""
    tokens = [rows[j].seq[len(m.ids[j]) :] for j in todo]
    t0 = time.perf_counter()
    out = m.forward(todo, tokens)
    if m.device.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    (bt.small_times if who == "S" else bt.large_times).append(dt)
    (bt.small_rows if who == "S" else bt.large_rows).append(len(todo))
    if who == "L":
        bt.large_padded.append(len(todo) * max(map(len, tokens)))
    for j, tk in zip(todo, tokens, strict=True):
        rows[j].tr.record(who, len(tk), dt)
    return out


def _start(models, xs: list) -> tuple[list[int], float]:
    """Every model's start() on the sources: (bos per row, seconds)."""
    t0 = time.perf_counter()
    bos = [m.start(xs) for m in models][0]
    if models[0].device.type == "cuda":
        torch.cuda.synchronize()
    return bos, time.perf_counter() - t0


def _setup(small, large, sources, pair: bool):
    """Checked sources and the two batch models (cached on the LMs, rebuilt when too small)."""
    if pair:
        check_pair(small, large)
    limit, name = getattr(small, "max_source", None), getattr(small, "name", "small")  # a test's fake: none
    xs = check_sources(sources, getattr(small, "vocab", None) or small.width, limit, name)
    b, ms = len(xs), []
    for lm in (small, large) if pair else (small,):
        m = getattr(lm, "_batch", None)
        if m is None or m.capacity < b:
            m = lm._batch = batched(lm, b)
        ms.append(m)
    return xs, ms


@torch.inference_mode()
def bild_batch(
    small, large, sources: list, max_new_tokens: int = 128, schedule: str = "wait", **settings
) -> tuple[list[list[int]], BatchTrace]:
    """decoding.bild over a batch of sources (a list of id lists, any lengths); settings as bild's
    (fallback, rollback, max_small_steps, window, distance, verify_end, rules, verify_end_below;
    greedy only). Returns (one output per source, BatchTrace).
    schedule: when the large model runs. "wait": only once no row wants the small model, so one
        large call serves every row that fell back, hit the limit or checks its end (fewer,
        fuller large calls); "eager": in every round where some row needs it (no row waits).
        Either way each row's output is the same; only the calls' grouping differs."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    if settings.get("sampling") is not None:
        raise ValueError("sampling: bild_batch is greedy only; decode sampled rows with decoding.bild")
    s = BildSettings(max_new_tokens=max_new_tokens, **settings)
    xs, (S, L) = _setup(small, large, sources, pair=True)
    bos, t = _start((S, L), xs)
    rows = [_Bild(s, b, small.eos) for b in bos]
    bt = BatchTrace([r.tr for r in rows], t)
    while True:
        wants = [r.want() for r in rows]
        todo = [j for j, w in enumerate(wants) if w == "S"]
        if todo:  # one small step for every row drafting
            last = torch.stack([lg[-1] for lg in _call(bt, "S", S, rows, todo)])  # (R, V)
            p, y = kernels.max_prob(last)
            p, y = torch.stack((p, y.to(p.dtype))).tolist()  # one host sync for the batch
            for j, pj, yj in zip(todo, p, y, strict=True):
                rows[j].small(pj, int(yj))
        # one large call for every row that fell back, hit the limit or checks its end
        todo = [j for j, w in enumerate(wants) if w == "L"] + [j for j in todo if rows[j].fell]
        if todo and (schedule == "eager" or "S" not in wants):
            first = {j: len(L.ids[j]) + 1 for j in todo}
            for j, lg in zip(todo, _call(bt, "L", L, rows, todo), strict=True):
                rows[j].large(lg, first[j], (_RowView(S, j), _RowView(L, j)))
        if not any(wants):
            break
    return [r.seq[1:] for r in rows], bt


@torch.inference_mode()
def vanilla_batch(model, sources: list, max_new_tokens: int = 128) -> tuple[list[list[int]], BatchTrace]:
    """Greedy decoding of a batch with one model; a finished row leaves the batch."""
    check_count("max_new_tokens", max_new_tokens)
    xs, (M,) = _setup(model, None, sources, pair=False)
    bos, t = _start((M,), xs)
    rows = [_Row(b) for b in bos]
    bt = BatchTrace([r.tr for r in rows], t)
    while todo := [j for j, r in enumerate(rows) if not finished(r.seq, model.eos, max_new_tokens)]:
        last = torch.stack([lg[-1] for lg in _call(bt, "S", M, rows, todo)])  # (R, V)
        for j, y in zip(todo, last.argmax(-1).tolist(), strict=True):
            rows[j].tr.emit(rows[j].seq, y, "S")
    return [r.seq[1:] for r in rows], bt


class _Spec(_Row):
    """One row of greedy speculative_sampling: `q` drafts since the large model last ran."""

    def __init__(self, window: int, bos: int, eos: int, max_new_tokens: int):
        super().__init__(bos)
        self.window, self.eos, self.n, self.q = window, eos, max_new_tokens, 0

    def want(self) -> str | None:
        if not finished(self.seq, self.eos, self.n) and self.q < self.window:
            return "S"
        return "L" if self.q else None

    def large(self, logits: torch.Tensor, models) -> None:
        """logits (k, V) of the large call; the last q + 1 rows score the drafts and past them."""
        k, self.q = self.q, 0
        y = logits[-(k + 1) :].argmax(-1).tolist()  # the large model's token at each draft and after
        draft = self.seq[len(self.seq) - k :]
        n = next((i for i in range(k) if draft[i] != y[i]), k)  # drafts accepted
        self.tr.rollbacks += n < k
        self.tr.rewind(self.seq, len(self.seq) - k + n, *models)
        if n < k or not finished(self.seq, self.eos, self.n):  # no bonus token after EOS
            self.tr.emit(self.seq, y[n], "L")


@torch.inference_mode()
def speculative_batch(
    small, large, sources: list, window: int = 4, max_new_tokens: int = 128
) -> tuple[list[list[int]], BatchTrace]:
    """Greedy speculative decoding (speculative_sampling at temperature 0: the large model's
    greedy output) over a batch: every row drafts up to `window` tokens, then one large call
    checks every row's drafts (rows drafting EOS early wait for the others)."""
    check_count("max_new_tokens", max_new_tokens)
    check_count("window", window)
    xs, (S, L) = _setup(small, large, sources, pair=True)
    bos, t = _start((S, L), xs)
    rows = [_Spec(window, b, small.eos, max_new_tokens) for b in bos]
    bt = BatchTrace([r.tr for r in rows], t)
    while any(wants := [r.want() for r in rows]):
        if todo := [j for j, w in enumerate(wants) if w == "S"]:
            last = torch.stack([lg[-1] for lg in _call(bt, "S", S, rows, todo)])  # (R, V)
            for j, y in zip(todo, last.argmax(-1).tolist(), strict=True):
                rows[j].tr.emit(rows[j].seq, y, "S")
                rows[j].tr.drafted += 1
                rows[j].q += 1
        elif todo := [j for j, w in enumerate(wants) if w == "L"]:
            for j, lg in zip(todo, _call(bt, "L", L, rows, todo), strict=True):
                rows[j].large(lg, (_RowView(S, j), _RowView(L, j)))
    return [r.seq[1:] for r in rows], bt
