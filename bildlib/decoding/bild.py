"""BiLD: Algorithm 1 of Kim et al. (2023), its ablations, and the authors' rules as an option."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import torch

from bildlib import kernels
from bildlib.decoding.common import check_count, check_threshold, finished
from bildlib.decoding.draft import small_run
from bildlib.decoding.policy import Policy, Sampling
from bildlib.decoding.trace import Trace
from bildlib.models import rowinv
from bildlib.models.lm import check_pair

RULES = ("ours", "authors")


@dataclass(frozen=True)
class BildSettings:
    """bild()'s arguments, checked once (see bild for their meaning)."""

    fallback: float | None = 0.5
    rollback: float | None = 5.0
    max_small_steps: int | None = 10
    window: int | None = None
    distance: str = "ce"
    sampling: Sampling | None = None
    max_new_tokens: int = 128
    verify_end: bool | None = None
    rules: str = "ours"
    verify_end_below: float | None = None

    def __post_init__(self):
        check_count("max_new_tokens", self.max_new_tokens)
        check_threshold("fallback", self.fallback, 0, 1, optional=True)
        check_threshold("rollback", self.rollback, 0, optional=True)
        check_count("max_small_steps", self.max_small_steps, optional=True)
        if self.distance not in ("ce", "exact"):
            raise ValueError(f"distance must be 'ce' or 'exact', got {self.distance!r}")
        if self.rules not in RULES:
            raise ValueError(f"rules must be one of {', '.join(RULES)}, got {self.rules!r}")
        if self.distance == "exact" and self.rollback is None:
            raise ValueError("distance='exact' needs rollback on (any value; it is not used)")
        if self.fallback is None:
            if self.window is None:
                raise ValueError("without fallback, window must be >= 1 (No-FB ablation), got None")
            check_count("window", self.window)
        elif self.window is not None:
            raise ValueError("window is the No-FB ablation: pass it with fallback=None")
        if not (self.verify_end is None or isinstance(self.verify_end, bool)):  # 1 == True, but not a bool
            raise ValueError(f"verify_end must be True, False or None, got {self.verify_end!r}")
        if self.check_end and self.rollback is None:
            raise ValueError("verify_end needs rollback on (without it the check changes nothing)")
        check_threshold("verify_end_below", self.verify_end_below, 0, 1, optional=True)
        if self.verify_end_below is not None:
            if self.rollback is None:
                raise ValueError("verify_end_below needs rollback on (without it the check changes nothing)")
            if self.verify_end is False:
                raise ValueError("verify_end_below: verify_end=False turns the end check off; pass "
                                 "verify_end=None with verify_end_below")  # fmt: skip
            if self.check_end:
                raise ValueError("verify_end_below: the end is already always checked (verify_end=True or "
                                 "distance='exact'); pass one of the two")  # fmt: skip
        if self.rules == "authors":
            bad = {"window": self.window is not None, "distance": self.distance != "ce"}
            bad |= {"sampling": self.sampling is not None, "verify_end": bool(self.verify_end)}
            bad |= {"verify_end_below": self.verify_end_below is not None}
            if any(bad.values()):
                what = ", ".join(k for k in bad if bad[k])
                raise ValueError(f"rules='authors' is the authors' greedy T5BiLDModel; it has no {what}")

    @property
    def limit(self) -> float:
        """The most small tokens in a row before the large model runs."""
        if self.fallback is None:
            return self.window
        return math.inf if self.max_small_steps is None else self.max_small_steps

    @property
    def check_end(self) -> bool:
        """Whether the large model checks the small tokens left unchecked at the end."""
        return self.distance == "exact" if self.verify_end is None else self.verify_end

    def checks_end(self, low: float) -> bool:
        """Whether the large model checks the unchecked small tokens left at the end, the least
        confident of which had max probability `low`."""
        below = self.verify_end_below is not None and low < self.verify_end_below
        return self.check_end or below


def first_rollback(logits: torch.Tensor, drafted: list[int], s: BildSettings, pol: Policy) -> int | None:
    """Algorithm 1's m: the first draft position whose distance d = -log p_L(y_m) exceeds α_RB, or
    None. logits (k, V): row i scores drafted[i] (the last row predicts past the draft).
    Greedy (ours): only where the large model's token differs from y_m (putting y_m back would
    discard the tokens after it for nothing); distance "exact": wherever it differs.
    Authors' rules: the first d > α_RB, and nothing when the large model's token there is y_m.
    Sampling: the plain d > α_RB."""
    if s.rollback is None or not drafted:
        return None
    y_s = torch.tensor(drafted, device=logits.device)  # (k-1,)
    d, y_l = kernels.rollback_distance(logits[:-1], y_s)  # (k-1,) each
    d, y_l = torch.stack((d, y_l.to(d.dtype))).tolist()  # one host sync; ids < 2^24 are exact in fp32
    for m, (dm, ym) in enumerate(zip(d, y_l, strict=True)):  # k-1 <= a few dozen: plain Python
        differs = int(ym) != drafted[m]
        if s.distance == "exact":
            bad = differs
        elif s.rules == "authors" or not pol.greedy:
            bad = dm > s.rollback
        else:
            bad = differs and dm > s.rollback
        if bad:
            return None if s.rules == "authors" and not differs else m
    return None


@torch.inference_mode()
def bild(
    small,
    large,
    source_ids,
    fallback: float | None = 0.5,
    rollback: float | None = 5.0,
    max_small_steps: int | None = 10,
    window: int | None = None,
    distance: str = "ce",
    sampling: Sampling | None = None,
    max_new_tokens: int = 128,
    verify_end: bool | None = None,
    rules: str = "ours",
    verify_end_below: float | None = None,
) -> tuple[list[int], Trace]:
    """Big Little Decoder (Algorithm 1) over two `bildlib.models.LM`s; returns (output ids, Trace).

    fallback: α_FB; the small model hands over when its max probability is below it (None:
        never, then `window` small tokens are followed by one large call: the No-FB ablation).
    rollback: α_RB; a small token y_m is discarded with everything after it when
        -log p_L(y_m) > α_RB (None: never, the No-RB ablation); see first_rollback.
    max_small_steps: the most small tokens in a row before the large model runs (None: no limit).
    distance: "ce" as above, or "exact": roll back wherever y_m is not the large model's argmax
        (lossless: the output is the large model's greedy output).
    verify_end: when decoding ends (EOS or max_new_tokens) with small tokens the large model has
        not seen, the large model checks them in one last call. None: only for distance="exact"
        (which is lossless only so); Algorithm 1 and the authors' code stop at the small EOS.
    rules: "ours" (above), or "authors": the control flow of the authors' T5BiLDModel, greedy
        only: the large model writes the first token; a rollback is skipped, keeping the whole
        draft, when the first position past α_RB holds the large model's own token; after a
        rollback the large model runs again and writes the next token too, and an EOS placed by
        a rollback does not end decoding (their loop `continue`s past both checks).
    verify_end_below: the end check of verify_end, made only when one of the unchecked small
        tokens had max probability below this (docs/decoding.md): a confident tail stands unchecked, as
        in Algorithm 1 (at α_FB or lower it never checks; at 1, almost always).
    """
    s = BildSettings(fallback, rollback, max_small_steps, window, distance, sampling, max_new_tokens,
                     verify_end, rules, verify_end_below)  # fmt: skip
    check_pair(small, large)  # one vocabulary (checked once per pair, remembered on small)
    tr, pol = Trace(), Policy(s.sampling, large.device)
    seq = [small.start(source_ids)]  # [bos] + output; a model whose cache holds seq[:n] runs seq[n:]
    large.start(source_ids)
    run, low = 0, 1.0  # small tokens since the large model last ran, and their least max p_S
    large_next = s.rules == "authors"  # the authors' code starts with a large-model step
    while True:
        done = not large_next and finished(seq, small.eos, s.max_new_tokens)  # "while y[-1] != EOS"
        if not (done or large_next) and run < s.limit:  # at most s.limit small tokens in a row
            n, low, fell = small_run(tr, pol, small, seq, s, run, low)  # "while max p_S > α_FB: SmallModel"
            run += n
            if not fell:  # at the limit, EOS or max_new_tokens: the tests above decide
                continue
            tr.fallbacks += 1  # "else: fallback": the token is dropped, the large model takes over
        elif done and (run == 0 or not s.checks_end(low)):
            break
        first = len(large.ids) + 1  # seq[first:]: the small model's tokens since the large model ran
        logits = pol.scaled(tr.call("L", large, seq))  # "p_L <- LargeModel(y)", one call; (k, V)
        run, low, large_next = 0, 1.0, False
        m = first_rollback(logits, seq[first:], s, pol)  # "m <- min index with d > α_RB"
        if m is not None:  # "if m exists: y <- y[:m] + [sample(p_L[m])]": rollback
            tr.rollbacks += 1
            tr.rewind(seq, first + m, small, large)
            tr.emit(seq, pol.pick(logits[m : m + 1]), "L")
            large_next = s.rules == "authors"  # their rollback `continue`s to another large step
        elif done:
            break
        else:  # "else: y <- y + [sample(p_L[-1])]"
            tr.emit(seq, pol.pick(logits[-1:]), "L")
    if s.distance == "exact" and not rowinv.exact_here():
        not_exact_warning()
    return seq[1:], tr


def not_exact_warning() -> None:
    """distance="exact" where a product is not row-invariant on this machine (models.rowinv): the
    output may differ from vanilla greedy decoding, so it is not called exact."""
    warnings.warn("lossless BiLD is not exact on this machine: not row-invariant here: "
                  f"{'; '.join(rowinv.not_exact())} (bildlib.models.rowinv, wholecall); its output may "
                  "differ from vanilla greedy decoding", RuntimeWarning, stacklevel=3)
