"""What decides a result's outputs and timings: the decoder a Config runs and the timed call.

This file, the decoders, the model adapters and the kernels are what the results cache's code
hash covers (experiments.cache.CODE): editing them invalidates cached results; editing the
runner, the analysis or the plots does not.
"""

from __future__ import annotations

import time

import torch

from bildlib import decoding as D
from bildlib.decoding import Trace


def decode(config, models, src: list[int], max_new_tokens: int) -> tuple[list[int], Trace]:
    """Run config's decoder on one source with models (an experiments.Models) on its engine."""
    c, n = config, max_new_tokens
    engine = c.runs_on
    if c.method == "vanilla":
        return D.vanilla(models.get(c.model, engine), src, sampling=c.sampling, max_new_tokens=n)
    if c.method == "generate":
        return D.hf_generate(models.get("large", engine), src, max_new_tokens=n)
    if c.method == "calm":
        return D.calm(models.get("calm", engine), src, c.threshold, c.tau, c.measure, max_new_tokens=n)
    if c.model == "ee":  # early-exit BiLD: the ee model's first layers against all of them
        small, large = models.views(engine)
    else:
        small, large = models.get(c.model, engine), models.get("large", engine)
    if c.method == "assisted":
        return D.hf_assisted(small, large, src, c.window, c.threshold, max_new_tokens=n)
    if c.method == "oracle":
        return D.oracle(small, large, src, c.threshold, max_new_tokens=n)
    if c.method == "speculative":
        return D.speculative_sampling(small, large, src, c.window, sampling=c.sampling, max_new_tokens=n)
    return D.bild(small, large, src, sampling=c.sampling, **_bild_settings(c), max_new_tokens=n)


def _bild_settings(c) -> dict:
    """A bild Config's settings as bild's (and bild_batch's) keyword arguments, sampling aside."""
    return {"fallback": c.fallback, "rollback": c.rollback, "window": c.window,
            "max_small_steps": c.max_small_steps, "distance": c.distance, "verify_end": c.verify_end,
            "rules": c.rules, "verify_end_below": c.verify_end_below}  # fmt: skip


BATCHED = ("vanilla", "bild", "speculative")  # the methods decoding.batch runs, greedy


def check_batchable(config) -> None:
    """A configuration a batch > 1 can run: greedy vanilla, bild or speculative on two
    separate models (decoding.batch); the error names the configuration."""
    c = config
    why = (f"method {c.method!r}" if c.method not in BATCHED else "sampling" if c.sampling is not None
           else "the early-exit views" if c.model == "ee" and c.method != "vanilla" else None)  # fmt: skip
    if why:
        raise ValueError(f"batch_size > 1 runs greedy {', '.join(BATCHED)} (decoding.batch); "
                         f"{c.label} has {why}")  # fmt: skip


def decode_batch(config, models, srcs: list[list[int]], max_new_tokens: int):
    """Run config's batched decoder (decoding.batch) on sources: (outputs, BatchTrace)."""
    c, n = config, max_new_tokens
    if c.method == "vanilla":
        return D.vanilla_batch(models.get(c.model, c.runs_on), srcs, max_new_tokens=n)
    small, large = models.get(c.model, c.runs_on), models.get("large", c.runs_on)
    if c.method == "speculative":
        return D.speculative_batch(small, large, srcs, window=c.window, max_new_tokens=n)
    return D.bild_batch(small, large, srcs, **_bild_settings(c), max_new_tokens=n)


def timed(config, models, src: list[int], max_new_tokens: int) -> tuple[list[int], Trace, float]:
    """decode() and its wall time in seconds (CUDA synchronised before the clock stops)."""
    return _clocked(decode, config, models, src, max_new_tokens)


def timed_batch(config, models, srcs: list[list[int]], max_new_tokens: int):
    """decode_batch() and its wall time in seconds (CUDA synchronised before the clock stops)."""
    return _clocked(decode_batch, config, models, srcs, max_new_tokens)


def _clocked(f, config, models, *args):
    """(f's two results, its wall time), CUDA synchronised before the clock stops."""
    t0 = time.perf_counter()
    out, tr = f(config, models, *args)
    if models.device.type == "cuda":
        torch.cuda.synchronize()
    return out, tr, time.perf_counter() - t0
