"""Trace: what a decoder did, token by token and call by call."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch


@dataclass
class Trace:
    """Which model wrote each output token, and every model call with its wall time."""

    source: list[str] = field(default_factory=list)  # per output token: "S" small, "L" large
    small_calls: int = 0
    large_calls: int = 0
    large_call_tokens: list[int] = field(default_factory=list)  # tokens run by each large call
    small_times: list[float] = field(default_factory=list)  # wall seconds of each call
    large_times: list[float] = field(default_factory=list)
    drafted: int = 0  # tokens the small model produced, kept or not
    fallbacks: int = 0  # small tokens dropped for low confidence (one per fallback)
    rollbacks: int = 0
    rolled_back: int = 0  # small tokens discarded by rollbacks (or rejected drafts)
    exits: list[int] = field(default_factory=list)  # CALM: the decoder layer each token exited at

    @property
    def discarded(self) -> int:
        return self.fallbacks + self.rolled_back

    @property
    def n_small(self) -> int:
        return self.source.count("S")

    @property
    def n_large(self) -> int:
        return self.source.count("L")

    def counters(self) -> dict:
        """Flat numbers for a results table."""
        return {
            "tokens": len(self.source),
            "small_tokens": self.n_small,
            "large_tokens": self.n_large,
            "small_calls": self.small_calls,
            "large_calls": self.large_calls,
            "large_call_tokens": sum(self.large_call_tokens),
            "drafted": self.drafted,
            "fallbacks": self.fallbacks,
            "rollbacks": self.rollbacks,
            "discarded": self.discarded,
            "small_s": sum(self.small_times),
            "large_s": sum(self.large_times),
        }

    def call(self, who: str, model, seq: list[int]) -> torch.Tensor:
        """Run the tokens of seq that model's cache has not seen, seq[len(model.ids):], in one
        call; counted and timed (synchronised on GPU); who: "S" or "L". Returns logits (k, V):
        row i predicts the token after the i-th of them."""
        tokens = seq[len(model.ids) :]
        t0 = time.perf_counter()
        logits = model.forward(tokens)
        if logits.is_cuda:
            torch.cuda.synchronize()
        self.record(who, len(tokens), time.perf_counter() - t0)
        return logits

    def record(self, who: str, tokens: int, seconds: float) -> None:
        """Count one model call over `tokens` tokens that took `seconds`; who: "S" or "L"."""
        if who == "S":
            self.small_calls += 1
            self.small_times.append(seconds)
        else:
            self.large_calls += 1
            self.large_call_tokens.append(tokens)
            self.large_times.append(seconds)

    def record_run(self, seconds: float, steps: list[float]) -> None:
        """Count a small model's native run (decoding.draft) that took `seconds`, as its model
        steps, each timed in C++ (`steps`): one small call each, as the Python loop counts them;
        the run's time around its steps (the call into C++, its arguments) goes to the first."""
        self.small_calls += len(steps)
        self.small_times += [steps[0] + max(0.0, seconds - sum(steps)), *steps[1:]]

    def emit(self, seq: list[int], token, who: str) -> None:
        """Append token (an int or a one-element tensor) to seq, written by who ("S" or "L")."""
        seq.append(int(token))
        self.source.append(who)

    def rewind(self, seq: list[int], pos: int, *models) -> None:
        """Discard seq[pos:] (small-model tokens) and roll every model's cache back to at most pos
        tokens (seq = [bos] + output, so output token i is seq[i + 1])."""
        self.rolled_back += len(seq) - pos
        del seq[pos:], self.source[pos - 1 :]
        for m in models:
            m.crop(min(len(m.ids), pos))
