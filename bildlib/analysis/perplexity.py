"""Language modelling with fallback-only BiLD (arXiv v1 Table 2): teacher-forced perplexity of a
token stream in fixed-length windows, for one model and under BiLD's fallback policy.

The definition (README, *Language modelling*; v1 leaves these choices open):

- **Stream.** The texts are tokenized without special tokens and joined into one stream, each
  followed by EOS (GPT-2's document separator); the stream's first token has no context and is
  not scored.
- **Windows.** Window w covers tokens [w·stride, w·stride + window); it scores the tokens no
  earlier window scored (all of the first, else its last `stride`), so each scored token sees at
  least window − stride tokens of context (HF's "perplexity of fixed-length models" recipe).
  stride = window gives non-overlapping chunks (arXiv v1's 512-token chunks, HF's recipe at
  stride = max_length): each chunk's first token is its context only and is not scored.
- **Policy.** Token t is scored by the model fallback-only BiLD would have asked: the small
  model if its max probability at t, max p_S(· | x_<t), is at least α_FB, else the large one.
  This is `decoding.bild`'s rule (keep the small token iff p ≥ α_FB), on the reference text
  instead of the model's own: teacher forcing. α_FB = 0 is the small model's perplexity; α_FB
  = 1 is the large model's except at tokens where p_S rounds to exactly 1 (counted as `p_one`).
- **Perplexity** is exp of the mean negative log-likelihood over scored tokens (natural log).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from bildlib.decoding.common import check_count


def stream(tok, texts: list[str]) -> list[int]:
    """The texts as one token stream, each followed by EOS, without other special tokens. A text
    with no tokens (empty, or spaces only) adds nothing: no EOS right after an EOS."""
    if isinstance(texts, str) or not isinstance(texts, list | tuple):
        raise TypeError(f"texts must be a list of strings, got a {type(texts).__name__} (one text: [text])")
    if bad := [i for i, t in enumerate(texts) if not isinstance(t, str)]:
        raise TypeError(f"texts[{bad[0]}] must be a string, got {type(texts[bad[0]]).__name__}")
    ids = []
    for t in texts:
        if body := tok(t, add_special_tokens=False)["input_ids"]:
            ids += body + [tok.eos_token_id]
    if not ids:
        raise ValueError("texts is empty: perplexity needs at least one non-empty text")
    return ids


def positions(model) -> int | None:
    """How many positions the model can attend over (GPT-2's n_positions); None if unbounded."""
    c = model.config
    return getattr(c, "n_positions", None) or getattr(c, "max_position_embeddings", None)


def windows(n: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored) of each window over a stream of n tokens: tokens [first, end)
    are scored with context from begin. Every token but the stream's first is scored once, except
    with stride = window: then each window's first token is not scored."""
    check_count("window", window, minimum=2)
    check_count("stride", stride)
    if not 1 <= stride <= window:
        raise ValueError(f"stride must be in [1, window = {window}], got {stride}")
    if n < 2:
        raise ValueError(f"the token stream has {n} token(s): perplexity needs at least 2")
    out, done = [], 1  # token 0 has no context
    for b in range(0, n, stride):
        e = min(b + window, n)
        first = max(done, b + 1)  # a window's first token is context only: stride = window skips it
        if e > first:
            out.append((b, e, first))
            done = e
        if e == n:
            break
    return out


@dataclass
class Scores:
    """Per scored token (N,): the negative log-likelihood and the max probability of one model."""

    nll: np.ndarray  # -log p(x_t | context)
    pmax: np.ndarray  # max_v p(v | context)

    @property
    def perplexity(self) -> float:
        return float(np.exp(self.nll.mean()))


@torch.inference_mode()
def score(model, ids: list[int], window: int = 128, stride: int = 64, batch: int = 16) -> Scores:
    """Teacher-forced scores of every token of `ids` but the first, by a Hugging Face causal LM,
    in windows (see `windows`), `batch` windows per forward."""
    check_count("batch", batch)
    spans = windows(len(ids), window, stride)  # checks window and stride before the model is asked
    limit = positions(model)
    if limit is not None and window > limit:
        raise ValueError(f"window={window} is larger than the model's {limit} positions")
    x, dev = torch.tensor(ids, dtype=torch.long), model.device
    nll, pmax = [], []
    for i in range(0, len(spans), batch):
        part = spans[i : i + batch]
        width = max(e - b for b, e, _ in part)
        inp = torch.zeros(len(part), width, dtype=torch.long)
        mask = torch.zeros(len(part), width, dtype=torch.long)
        for r, (b, e, _) in enumerate(part):
            inp[r, : e - b], mask[r, : e - b] = x[b:e], 1
        logp = F.log_softmax(model(input_ids=inp.to(dev), attention_mask=mask.to(dev)).logits.float(), -1)
        for r, (b, e, first) in enumerate(part):
            lp = logp[r, first - b - 1 : e - b - 1]  # (k, V): row j predicts token first + j
            nll.append(-lp.gather(1, x[first:e, None].to(dev))[:, 0].cpu())
            pmax.append(lp.max(-1).values.exp().cpu())
    return Scores(torch.cat(nll).double().numpy(), torch.cat(pmax).double().numpy())


@dataclass
class FallbackPerplexity:
    """Fallback-only BiLD on a teacher-forced stream, at one α_FB."""

    fallback: float
    perplexity: float
    fallback_pct: float  # % of scored tokens the large model scored
    p_one: int  # tokens whose p_S is exactly 1 (kept by the small model even at α_FB = 1)
    n_tokens: int


def policy(small: Scores, large: Scores, fallback: float) -> FallbackPerplexity:
    """Perplexity when each token is scored by the model fallback-only BiLD would ask (small
    unless max p_S < α_FB)."""
    if not 0 <= fallback <= 1:
        raise ValueError(f"fallback must be in [0, 1], got {fallback}")
    if small.nll.shape != large.nll.shape:
        raise ValueError(f"small and large scored different streams ({small.nll.shape} vs {large.nll.shape})")
    fb = small.pmax < fallback  # (N,) the large model's tokens
    nll = np.where(fb, large.nll, small.nll)
    return FallbackPerplexity(
        fallback, float(np.exp(nll.mean())), 100 * float(fb.mean()), int((small.pmax >= 1).sum()), len(nll)
    )
