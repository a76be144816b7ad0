"""CALM (Schuster et al. 2022), confident adaptive early exiting, greedy, as the BiLD paper
compares it (§4.4): per token the decoder runs a layer at a time and exits at the first layer
whose confidence reaches a threshold that decays along the output.

    lambda(t) = lambda * (9/10 + e^(-tau t / N) / 10)        t5x contrib/calm (cond_fn)

t is the output position (0 for the first token), N = max_new_tokens. The CALM paper writes
clip_[0,1](9/10 lambda + e^(-tau t / N) / 10), the decay not scaled by lambda; we follow the
authors' code, which ran their experiments (README, "Early exit"), so lambda = 0 always exits.

Confidence after layer i (1-based), exit when it is >= lambda(t) and i >= min_exit:
    "state":   cosine similarity of layer i's and layer i-1's hidden states; at the first layer
               0, as in t5x (it has no previous state there);
    "softmax": top-1 minus top-2 probability of the exit's prediction.
The layers a token skips get their keys and values from its exited hidden state (state
propagation), so later tokens that run them attend to it.
"""

from __future__ import annotations

import math
import time

import torch

from bildlib import kernels
from bildlib.decoding.common import check_count, check_threshold, finished
from bildlib.decoding.trace import Trace

MEASURES = ("state", "softmax")


def calm_threshold(lam: float, tau: float, t: int, n: int) -> float:
    """lambda(t) for threshold lam, temperature tau, output position t, max length n (t5x)."""
    return lam * (0.9 + 0.1 * math.exp(-tau * t / n))


@torch.inference_mode()
def calm(
    model,
    source_ids,
    threshold: float = 0.9,
    tau: float = 0.0,
    measure: str = "state",
    min_exit: int = 1,
    max_new_tokens: int = 128,
) -> tuple[list[int], Trace]:
    """CALM's greedy decoding of one source with a lean-engine T5 `LM`; returns (ids, Trace).
    The trace counts one call per token (timed), source "S" for a token that exited early and "L"
    for one that ran every layer, and `exits`, the exit layer of every token."""
    check_threshold("threshold", threshold, 0, 1)
    check_threshold("tau", tau, 0)
    if measure not in MEASURES:
        raise ValueError(f"measure must be one of {', '.join(MEASURES)}, got {measure!r}")
    check_count("max_new_tokens", max_new_tokens)
    t5 = model.impl
    if not hasattr(t5, "fill"):
        arch = getattr(t5, "arch", "?")
        raise ValueError(f"{model.name}: CALM runs a T5 on the lean engine (a layer at a time); "
                         f"this model runs on engine {model.engine!r} ({arch})")  # fmt: skip
    n = t5.n_layers
    check_count("min_exit", min_exit)
    if min_exit > n:
        raise ValueError(f"min_exit must be in [1, {n}] (the decoder has {n} layers), got {min_exit}")
    tr = Trace()
    seq = [model.start(source_ids)]
    model.begin()
    while not finished(seq, model.eos, max_new_tokens):
        lam = calm_threshold(threshold, tau, len(seq) - 1, max_new_tokens)  # "lambda(t)"
        pos = len(model.ids)  # == len(seq) - 1: the decoder position of seq[-1]
        t0 = time.perf_counter()
        x = t5.embed(torch.tensor(seq[-1:], device=model.device))  # (1, d)
        for i in range(1, n + 1):  # layer i, 1-based
            prev, x = x, t5.layer(i - 1, x, pos)
            if i == n or i < min_exit:
                continue
            if measure == "softmax":
                logits = t5.head(x)  # (1, V)
                conf = kernels.max_prob(logits[:, : model.width], margin=True)[2].item()
            elif i > 1:
                conf = kernels.saturation(prev, x).item()
            else:
                conf = 0.0  # layer 1 has no previous state to saturate against
            if conf >= lam:  # "exit": .item() is one host sync per layer, as CALM's while loop
                break
        for j in range(i, n):  # state propagation: the skipped layers' K/V from the exited state
            t5.fill(j, x, pos)
        if measure != "softmax" or i == n:
            logits = t5.head(x)
        y = int(kernels.max_prob(logits[:, : model.width])[1])  # int(): the host waits for the GPU
        tr.record("L", 1, time.perf_counter() - t0)
        model.ids.append(seq[-1])
        tr.exits.append(i)
        tr.emit(seq, y, "L" if i == n else "S")
    return seq[1:], tr
