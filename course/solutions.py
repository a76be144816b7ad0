"""Solutions to the tutorial's exercises (notebooks/tutorial.ipynb), for instructors. Students: try first.

They live outside the bildlib package, so an installed bildlib cannot import them. `make course`
(bildlib.notebook.tutorial.course) puts each function's body into the nbgrader source notebook as its
exercise's solution; `make tutorial` runs that notebook; the tests hold the checks
(bildlib.notebook.tutorial.checks) to these.
"""

from __future__ import annotations

import torch


def should_fall_back(logits: torch.Tensor, alpha_fb: float) -> bool:
    """Exercise 1. logits (V,): the small model's scores for the next token. True when its max
    probability is below α_FB (the small token is then dropped and the large model takes over)."""
    return logits.float().softmax(-1).max().item() < alpha_fb


def rollback_position(logits: torch.Tensor, drafted: list[int], alpha_rb: float) -> int | None:
    """Exercise 2. logits (k, V): one large call over the k-1 drafted tokens and the token before
    them; row i scores drafted[i], the last row predicts past the draft. Returns the first m
    where the large model's own token differs from drafted[m] and -log p_L(drafted[m]) > α_RB,
    or None."""
    logp = logits[:-1].float().log_softmax(-1)  # (k-1, V)
    for m, y in enumerate(drafted):
        if logp[m].argmax().item() != y and -logp[m, y].item() > alpha_rb:
            return m
    return None


def bild_loop(small, large, source_ids, alpha_fb: float, alpha_rb: float, limit: int | None = 10,
              max_new_tokens: int = 64, verify_end: bool = False) -> list[int]:  # fmt: skip
    """Exercise 3. Greedy BiLD (Algorithm 1) over two models with the LM interface: start(src)
    -> bos; forward(tokens) -> logits (k, V) of the tokens the cache has not seen; crop(n);
    ids (the cache). Returns the output ids (without bos)."""
    import math

    seq = [small.start(source_ids)]  # [bos] + output
    large.start(source_ids)
    run = 0  # small tokens since the large model last ran
    limit = math.inf if limit is None else limit
    while True:
        done = len(seq) > 1 and seq[-1] == small.eos or len(seq) - 1 >= max_new_tokens
        if not done and run < limit:
            logits = small.forward(seq[len(small.ids) :])[-1]  # (V,)
            if not should_fall_back(logits, alpha_fb):
                seq.append(int(logits.argmax()))
                run += 1
                continue
        elif done and (run == 0 or not verify_end):
            break
        first = len(large.ids) + 1  # seq[first:]: the small tokens the large model has not seen
        logits = large.forward(seq[len(large.ids) :])  # (k, V), one call
        run = 0
        m = rollback_position(logits, seq[first:], alpha_rb)
        if m is not None:  # discard seq[first + m:], crop both caches, the large token goes at m
            del seq[first + m :]
            small.crop(min(len(small.ids), first + m))
            large.crop(first + m)
            seq.append(int(logits[m].argmax()))
        elif done:
            break
        else:
            seq.append(int(logits[-1].argmax()))
    return seq[1:]


def predict_speedup(trace, n_large: int, small_step: float, large_call) -> float:
    """Exercise 4. The speedup the per-call costs predict for one BiLD decode: vanilla large
    (n_large one-token calls of large_call(1) seconds) over BiLD (trace.small_calls steps of
    small_step seconds, and one large_call(k) per large call over k tokens)."""
    bild = trace.small_calls * small_step + sum(large_call(k) for k in trace.large_call_tokens)
    return n_large * large_call(1) / bild


def sweep_row(hypotheses: list[str], references: list[str], traces: list, seconds: list[float]) -> dict:
    """Exercise 5. One point of the α_FB sweep: corpus BLEU (sacrebleu), fallbacks per 100 output
    tokens, and the mean latency per sentence in ms."""
    import sacrebleu

    tokens = sum(len(t.source) for t in traces)
    return {
        "bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score,
        "fallback_pct": 100 * sum(t.fallbacks for t in traces) / tokens,
        "ms": 1e3 * sum(seconds) / len(seconds),
    }
