"""The model calls behind a sweep's rows, recorded: for each call, which model ran it, how many
tokens, over how long a cache, with how long a source, and whether it was the sentence's first
call of that model (the input of the cost model, bildlib.analysis.cost).

The sweep's timed runs keep counters, not call shapes, so calls_of decodes the rows' sources
again, untimed, with every model's forward recorded, and checks that each example gives the
row's output ids and call counts: greedy decoding is deterministic, so these are the calls the
timed run made. prefix and timed time one call alone (bench.callbench, the tutorial's lab).
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import pandas as pd
import torch

from bildlib.experiments import measure, presets
from bildlib.experiments.config import Config


@contextmanager
def recording(models: dict):
    """Record every forward of the LMs in `models` (name -> LM) into the yielded list, as dicts
    (model, k, past, source, first), a native small-model run as its steps. The LMs' start,
    forward and draft are wrapped on the instances and restored on exit."""
    calls: list[dict] = []
    wrapped = ("start", "forward", "draft")
    kept = [{n: vars(m)[n] for n in wrapped if n in vars(m)} for m in models.values()]  # an instance's own
    for name, m in models.items():
        st = {"source": 0, "first": True}

        def start(source_ids, st=st, inner=m.start):
            st["source"], st["first"] = len(source_ids), True
            return inner(source_ids)

        def forward(tokens, m=m, st=st, name=name, inner=m.forward):
            calls.append({"model": name, "k": len(tokens), "past": len(m.ids)} | st)
            st["first"] = False
            return inner(tokens)

        def draft(seq, run, m=m, st=st, name=name, inner=m.draft):  # a native run: one record per step
            k, past = len(seq) - len(m.ids), len(m.ids)
            out = inner(seq, run)
            for _ in range(out.steps if out is not None else 0):
                calls.append({"model": name, "k": k, "past": past} | st)
                st["first"], past, k = False, past + k, 1
            return out

        m.start, m.forward, m.draft = start, forward, draft
    try:
        yield calls
    finally:
        for m, own in zip(models.values(), kept, strict=True):
            del m.start, m.forward, m.draft  # the class's methods again, or what the instance had
            vars(m).update(own)


def calls_of(preset: str, config: Config, models, rows: pd.DataFrame) -> pd.DataFrame:
    """One row per model call (id, model, k, past, source, first) of `config` (greedy) on the
    sweep rows `rows` (that configuration's rows of experiments.sweep), decoded again with
    `models` (an experiments.Models); raises where an example's output or call counts differ
    from the row's."""
    if config.sampling is not None:
        raise ValueError(
            f"{config.label}: calls_of replays greedy decoding only (sampled runs differ per seed)"
        )
    if rows.empty or (rows["label"] != config.label).any():
        raise ValueError(f"rows must be the sweep rows of {config.label} (and only those)")
    p = presets.get(preset)
    names = dict.fromkeys(config.needs())  # the Models keys this configuration runs, in order
    lms = {n: models.get(n, config.engine) for n in names}
    if len({id(m) for m in lms.values()}) != len(lms):
        raise ValueError(f"{config.label}: its models must be distinct objects")
    tok, out = lms[config.model], []
    for r in rows.itertuples():
        with recording(lms) as calls:
            ids, tr = measure.decode(config, models, p.source_ids(tok, r.source), p.max_new_tokens)
        n = pd.Series([c["model"] for c in calls]).value_counts()
        big = int(n.get("large", 0)) if config.method != "vanilla" else 0
        small = len(calls) - big
        if list(ids) != list(r.output_ids) or (small, big) != (r.small_calls, r.large_calls):
            raise ValueError(
                f"{config.label}, example {r.id}: decoding again gave {len(ids)} tokens in {small} + {big} "
                f"calls, the sweep's row {len(r.output_ids)} tokens in {r.small_calls} + {r.large_calls}: "
                "not the same run (other models, code or device?)"
            )
        out += [{"id": r.id} | c for c in calls]
    return pd.DataFrame(out)


def prefix(lm, src: list[int]) -> None:
    """Start `src` and run a 9-token decoder prefix, as mid-sentence: every timed call follows it."""
    lm.start(src)
    lm.forward([0] + [5] * 8)


def timed(lm, tokens: list[int], n: int) -> float:
    """Seconds of one forward of `tokens` after a prefix of n decoder tokens."""
    lm.crop(n)
    t0 = time.perf_counter()
    lm.forward(tokens)
    if lm.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0
