"""BiLD (Algorithm 1 of Kim et al. 2023) and the decoders it is compared with, at batch 1.

Every decoder drives `bildlib.models.LM` adapters and keeps one list, seq = [bos] + output.
A model whose cache holds seq[:n] runs seq[n:] in one call; row i of the returned logits
predicts seq[n + 1 + i]. Policy arithmetic (max probability, -log p, sampling, acceptance)
goes through bildlib.kernels. Each decoder returns (output ids, Trace).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from bildlib import kernels
from bildlib.models import LM


@dataclass
class Sampling:
    """Nucleus sampling (temperature, top-p) with a seed; temperature 0 is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


@dataclass
class Trace:
    """What a decoder did, token by token and call by call."""

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

    def call(self, who: str, model: LM, tokens: list[int]) -> torch.Tensor:
        """model.forward(tokens), counted and timed (synchronised on GPU)."""
        t0 = time.perf_counter()
        logits = model.forward(tokens)
        if logits.is_cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        if who == "S":
            self.small_calls += 1
            self.small_times.append(dt)
        else:
            self.large_calls += 1
            self.large_call_tokens.append(len(tokens))
            self.large_times.append(dt)
        return logits


class _Policy:
    """Greedy or nucleus sampling over logits rows, with one generator per decode."""

    def __init__(self, sampling: Sampling | None, device: torch.device):
        self.s = sampling
        self.g = None
        if sampling is not None and sampling.temperature > 0:
            self.g = torch.Generator(device=device).manual_seed(sampling.seed)

    def scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits of the distribution the models sample from, before the top-p cut (confidence,
        distance)."""
        if self.s is None or self.s.temperature in (0, 1):
            return logits
        return logits.float() / self.s.temperature

    def filtered(self, scaled: torch.Tensor) -> torch.Tensor:
        """(k, V) scaled logits with the nucleus kept (greedy: the argmax) and the rest at -inf."""
        if self.g is None:
            return kernels.nucleus(scaled, 0.0)
        return kernels.nucleus(scaled, 1.0, self.s.top_p)

    def uniforms(self, k: int, device) -> torch.Tensor:
        if self.g is None:
            return torch.zeros(k, device=device)
        return torch.rand(k, generator=self.g, device=device)

    def pick(self, scaled: torch.Tensor) -> torch.Tensor:
        """One token per row (k,) of scaled logits: argmax, or a draw from the nucleus."""
        if self.g is None:
            return kernels.max_prob(scaled)[1]
        return kernels.sample(self.filtered(scaled), self.uniforms(scaled.shape[0], scaled.device))


def _done(seq: list[int], eos: int, max_new_tokens: int) -> bool:
    """seq = [bos] + output (bos may equal eos: a decoder-only prompt can end with it)."""
    return len(seq) > 1 and seq[-1] == eos or len(seq) - 1 >= max_new_tokens


def _rewind(seq: list[int], tr: Trace, small: LM, large: LM, n_s: int, pos: int) -> int:
    """Discard seq[pos:] (small-model tokens) and roll both caches back to pos; returns the
    small model's new cache length (the large model's is pos)."""
    tr.rolled_back += len(seq) - pos
    del seq[pos:], tr.source[pos - 1 :]
    small.crop(min(n_s, pos))
    large.crop(pos)
    return min(n_s, pos)


def _check_common(max_new_tokens: int):
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")


@torch.inference_mode()
def vanilla(
    model: LM, source_ids, sampling: Sampling | None = None, max_new_tokens: int = 128
) -> tuple[list[int], Trace]:
    """Autoregressive decoding with one model: greedy, or nucleus sampling when `sampling` is set."""
    _check_common(max_new_tokens)
    tr, pol = Trace(), _Policy(sampling, model.device)
    seq = [model.start(source_ids)]
    while not _done(seq, model.eos, max_new_tokens):
        logits = tr.call("S", model, seq[-1:])  # (1, V)
        seq.append(int(pol.pick(pol.scaled(logits))))
        tr.source.append("S")
    return seq[1:], tr


@torch.inference_mode()
def bild(
    small: LM,
    large: LM,
    source_ids,
    fallback: float | None = 0.5,
    rollback: float | None = 5.0,
    max_small_steps: int | None = 10,
    window: int | None = None,
    distance: str = "ce",
    sampling: Sampling | None = None,
    max_new_tokens: int = 128,
    verify_end: bool | None = None,
) -> tuple[list[int], Trace]:
    """Big Little Decoder (Algorithm 1).

    fallback: α_FB; the small model hands over when its max probability is below it (None:
        never, then `window` small tokens are followed by one large call: the No-FB ablation).
    rollback: α_RB; a small token y_m is discarded with everything after it when
        -log p_L(y_m) > α_RB (None: never, the No-RB ablation). Greedy: only where the large
        model's token differs from y_m (putting y_m back in its own place would discard the
        tokens after it for nothing; the authors' code skips those rollbacks too).
    max_small_steps: the most small tokens in a row before the large model runs (None: no limit).
    distance: "ce" as above, or "exact": roll back wherever y_m is not the large model's argmax
        (lossless: the output is the large model's greedy output).
    verify_end: when decoding ends (EOS or max_new_tokens) with small tokens the large model has
        not seen, the large model checks them in one last call. None: only for distance="exact"
        (which is lossless only so); Algorithm 1 and the authors' code stop at the small EOS.
    """
    _check_common(max_new_tokens)
    if fallback is not None and not 0 <= fallback <= 1:
        raise ValueError(f"fallback must be in [0, 1] or None, got {fallback}")
    if rollback is not None and rollback < 0:
        raise ValueError(f"rollback must be >= 0 or None, got {rollback}")
    if distance not in ("ce", "exact"):
        raise ValueError(f"distance must be 'ce' or 'exact', got {distance!r}")
    if distance == "exact" and rollback is None:
        raise ValueError("distance='exact' needs rollback on (any value; it is not used)")
    if fallback is None:
        if window is None or window < 1:
            raise ValueError(f"without fallback, window must be >= 1 (No-FB ablation), got {window}")
        limit = window
    else:
        if window is not None:
            raise ValueError("window is the No-FB ablation: pass it with fallback=None")
        if max_small_steps is not None and max_small_steps < 1:
            raise ValueError(f"max_small_steps must be >= 1 or None, got {max_small_steps}")
        limit = max_small_steps if max_small_steps is not None else float("inf")
    if verify_end is None:
        verify_end = distance == "exact"
    if verify_end and rollback is None:
        raise ValueError("verify_end needs rollback on (without it the check changes nothing)")

    tr, pol = Trace(), _Policy(sampling, large.device)
    seq = [small.start(source_ids)]
    large.start(source_ids)
    n_s = n_l = 0  # tokens of seq in the small / large cache
    run = 0  # small tokens since the large model last ran
    while True:
        done = _done(seq, small.eos, max_new_tokens)
        if not done and run < limit:
            logits = pol.scaled(tr.call("S", small, seq[n_s:])[-1:])  # (1, V)
            n_s = len(seq)
            p, y = kernels.max_prob(logits)
            if pol.g is not None:
                y = pol.pick(logits)
            p, y = torch.cat((p, y.to(p.dtype))).tolist()  # the step's one host sync
            tr.drafted += 1
            if fallback is None or p >= fallback:
                seq.append(int(y))
                tr.source.append("S")
                run += 1
                continue
            tr.fallbacks += 1  # low confidence: drop y, the large model takes over
        elif done and (run == 0 or not verify_end):
            break
        # The large model runs, in one call, every token it has not seen
        logits = pol.scaled(tr.call("L", large, seq[n_l:]))  # (k, V); row i predicts seq[n_l + 1 + i]
        first = n_l + 1  # seq[n_l] is bos or the large model's own token
        drafted = seq[first:]  # the small model's tokens since the large model last ran
        n_l, run = len(seq), 0
        m = None
        if rollback is not None and drafted:
            y_s = torch.tensor(drafted, device=logits.device)  # (k-1,)
            d, y_l = kernels.rollback_distance(logits[:-1], y_s)
            bad = y_l != y_s  # (k-1,) greedy: only where the large model's token differs
            if distance == "ce":
                bad = bad & (d > rollback) if pol.g is None else d > rollback
            m = int(torch.where(bad.any(), bad.int().argmax(), -1))  # one host sync per large call
            m = None if m < 0 else m
        if m is not None:  # rollback: discard seq[pos:], the large model's token goes at pos
            pos = first + m
            tr.rollbacks += 1
            n_s, n_l = _rewind(seq, tr, small, large, n_s, pos), pos
            seq.append(int(pol.pick(logits[m : m + 1])))
            tr.source.append("L")
        elif done:
            break
        else:
            seq.append(int(pol.pick(logits[-1:])))
            tr.source.append("L")
    return seq[1:], tr


@torch.inference_mode()
def speculative_sampling(
    small: LM,
    large: LM,
    source_ids,
    window: int = 4,
    sampling: Sampling | None = None,
    max_new_tokens: int = 128,
) -> tuple[list[int], Trace]:
    """Speculative sampling (Leviathan et al. 2023; Chen et al. 2023): the small model drafts
    `window` tokens, the large model scores them in one call; draft i is accepted with probability
    min(1, p_L/p_S), at the first rejection a token is drawn from norm(max(0, p_L - p_S)), and with
    all accepted a bonus token from p_L. The output follows the large model's distribution; greedy
    (sampling None or temperature 0) is the degenerate case: the large model's greedy output.
    """
    _check_common(max_new_tokens)
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    tr, pol = Trace(), _Policy(sampling, large.device)
    seq = [small.start(source_ids)]
    large.start(source_ids)
    n_s = n_l = 0
    while not _done(seq, small.eos, max_new_tokens):
        q = []  # the small model's filtered logits rows, one per draft
        for _ in range(window):
            if _done(seq, small.eos, max_new_tokens):
                break
            row = pol.filtered(pol.scaled(tr.call("S", small, seq[n_s:])[-1:]))  # (1, V)
            n_s = len(seq)
            q.append(row)
            seq.append(int(kernels.sample(row, pol.uniforms(1, row.device))))
            tr.source.append("S")
            tr.drafted += 1
        k = len(q)
        p = pol.filtered(pol.scaled(tr.call("L", large, seq[n_l:])))[-(k + 1) :]  # (k+1, V)
        draft = torch.tensor(seq[-k:], device=p.device)
        n, y = kernels.speculative_accept(p, torch.cat(q), draft, pol.uniforms(k + 1, p.device))
        n, y = torch.stack((n, y)).tolist()
        pos = len(seq) - k + n  # seq[:pos] is kept
        tr.rollbacks += n < k
        n_s, n_l = _rewind(seq, tr, small, large, n_s, pos), pos
        if n < k or not _done(seq, small.eos, max_new_tokens):  # no bonus token after EOS
            seq.append(int(y))
            tr.source.append("L")
    return seq[1:], tr


@torch.inference_mode()
def oracle(
    small: LM, large: LM, source_ids, threshold: float, max_new_tokens: int = 128
) -> tuple[list[int], Trace]:
    """The oracle study of Fig. 2: both models run every step; where the large model gives the
    small model's greedy token probability below `threshold`, the large model's token replaces it.
    The trace's large-token fraction is the large model's engagement."""
    _check_common(max_new_tokens)
    if not 0 <= threshold <= 1:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    tr = Trace()
    seq = [small.start(source_ids)]
    large.start(source_ids)
    while not _done(seq, small.eos, max_new_tokens):
        y = kernels.max_prob(tr.call("S", small, seq[-1:]))[1]  # (1,)
        d, y_l = kernels.rollback_distance(tr.call("L", large, seq[-1:]), y)  # -log p_L(y)
        take_large = bool(torch.exp(-d) < threshold)
        seq.append(int(y_l if take_large else y))
        tr.source.append("L" if take_large else "S")
    return seq[1:], tr
