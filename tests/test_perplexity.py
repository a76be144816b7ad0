"""bildlib.analysis.perplexity (docs/language-modelling.md):
teacher-forced perplexity in windows, and under fallback-only
BiLD's policy, against cross-entropies computed directly; its errors."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from bildlib.analysis import perplexity as P
from conftest import tiny_model, tiny_tokenizer

TEXTS = [" ".join(f"w{3 + (7 * i + 3 * j) % 37}" for j in range(5 + i % 9)) for i in range(20)]


@pytest.fixture(scope="module")
def pair():
    # peaked like trained models: max probabilities spread over (0, 1)
    return tiny_model("gpt2", seed=1, scale=6.0), tiny_model("llama", seed=2, scale=12.0)


def direct(model, ids: list[int], window: int, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Each window's scored tokens' cross-entropy and max probability, one forward per window,
    with F.cross_entropy on the model's own logits (no padding, no batching)."""
    nll, pmax, done = [], [], 1
    for b in range(0, len(ids), stride):
        e = min(b + window, len(ids))
        if e > done:
            x = torch.tensor([ids[b:e]])
            with torch.no_grad():
                logits = model(input_ids=x).logits[0].float()  # (e - b, V)
            rows, y = logits[done - b - 1 : e - b - 1], x[0, done - b : e - b]
            nll.append(F.cross_entropy(rows, y, reduction="none"))
            pmax.append(rows.softmax(-1).max(-1).values)
            done = e
        if e == len(ids):
            break
    return torch.cat(nll).double().numpy(), torch.cat(pmax).double().numpy()


@pytest.mark.parametrize("window,stride", [(256, 128), (16, 8), (16, 15), (13, 5), (2, 1)])
def test_perplexity_equals_cross_entropy(pair, window, stride):
    tok, model = tiny_tokenizer(), pair[0]
    ids = P.stream(tok, TEXTS)
    s = P.score(model, ids, window, stride, batch=4)  # padded and batched: must not change a score
    nll, pmax = direct(model, ids, window, stride)
    assert len(s.nll) == len(ids) - 1  # every token but the first, once
    np.testing.assert_allclose(s.nll, nll, atol=1e-4)
    np.testing.assert_allclose(s.pmax, pmax, atol=1e-5)
    assert s.perplexity == pytest.approx(math.exp(nll.mean()), rel=1e-5)
    if window >= len(ids):  # one window: the plain language-model loss of the whole stream
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0]
        ce = F.cross_entropy(logits[:-1], torch.tensor(ids[1:]))
        assert s.perplexity == pytest.approx(math.exp(ce.item()), rel=1e-5)


def test_windows_cover_every_token_once_with_context():
    for n, w, st in [(100, 16, 8), (17, 16, 15), (50, 7, 3), (5, 10, 4), (2, 2, 1)]:
        scored = []
        for b, e, first in P.windows(n, w, st):
            assert b < first < e <= n and e - b <= w
            if b > 0:
                assert first - b >= w - st  # the context a scored token has at least
            scored += range(first, e)
        assert scored == list(range(1, n))


def test_stream_joins_texts_with_eos():
    tok = tiny_tokenizer()
    assert P.stream(tok, ["w3 w4", "w5"]) == [3, 4, 1, 5, 1]


def test_policy_limits_are_the_two_models(pair):
    tok = tiny_tokenizer()
    ids = P.stream(tok, TEXTS)
    small, large = (P.score(m, ids, 32, 16) for m in pair)
    assert small.perplexity != pytest.approx(large.perplexity)
    assert small.pmax.max() < 1  # so α_FB = 1 sends every token to the large model
    lo, hi = P.policy(small, large, 0.0), P.policy(small, large, 1.0)
    assert lo.perplexity == pytest.approx(small.perplexity) and lo.fallback_pct == 0
    assert hi.perplexity == pytest.approx(large.perplexity) and hi.fallback_pct == 100 and hi.p_one == 0
    mid = P.policy(small, large, float(np.median(small.pmax)))
    fb = small.pmax < mid.fallback
    expect = np.exp(np.where(fb, large.nll, small.nll).mean())  # token by token, the model asked
    assert 0 < mid.fallback_pct < 100 and mid.perplexity == pytest.approx(expect)


def test_policy_keeps_a_certain_small_token_at_one():
    s = P.Scores(np.array([0.1, 0.2]), np.array([1.0, 0.5]))
    lg = P.Scores(np.array([1.0, 1.0]), np.array([0.9, 0.9]))
    r = P.policy(s, lg, 1.0)  # p_S = 1 is not below α_FB = 1: decoding.bild keeps that token too
    assert r.p_one == 1 and r.fallback_pct == 50 and r.perplexity == pytest.approx(math.exp(0.55))


def test_errors(pair):
    tok, model = tiny_tokenizer(), pair[0]
    with pytest.raises(ValueError, match="texts is empty"):
        P.stream(tok, [])
    with pytest.raises(ValueError, match="texts is empty"):
        P.stream(tok, ["", "  "])
    ids = P.stream(tok, TEXTS)
    with pytest.raises(ValueError, match="window=300 is larger than the model's 256 positions"):
        P.score(model, ids + ids, 300, 100)
    with pytest.raises(ValueError, match="window must be an integer >= 2"):
        P.score(model, ids, 1, 1)
    with pytest.raises(ValueError, match=r"stride must be in \[1, window = 16\], got 17"):
        P.score(model, ids, 16, 17)
    with pytest.raises(ValueError, match="stride must be an integer >= 1"):
        P.score(model, ids, 16, 0)
    with pytest.raises(ValueError, match="has 1 token"):
        P.score(model, [5], 16, 8)
    s = P.score(model, ids, 16, 8)
    with pytest.raises(ValueError, match="fallback must be in"):
        P.policy(s, s, 1.5)
    with pytest.raises(ValueError, match="different streams"):
        P.policy(s, P.Scores(s.nll[:-1], s.pmax[:-1]), 0.5)


def test_chunks_that_do_not_overlap(pair):
    """stride = window (arXiv v1's 512-token chunks, make reproduce's table2_lm): each chunk is scored
    alone, its first token context only, as one forward of the chunk scores it."""
    assert P.windows(10, 4, 4) == [(0, 4, 1), (4, 8, 5), (8, 10, 9)]
    tok, model = tiny_tokenizer(), pair[0]
    ids = P.stream(tok, TEXTS)
    s = P.score(model, ids, 8, 8)
    assert len(s.nll) == len(ids) - math.ceil(len(ids) / 8)  # every token but each chunk's first
    with torch.inference_mode():
        x = torch.tensor(ids[8:16])[None]
        lp = torch.log_softmax(model(input_ids=x).logits.float(), -1)[0, :-1]
        want = -lp.gather(1, x[0, 1:, None])[:, 0].double().numpy()
    np.testing.assert_allclose(s.nll[7:14], want, rtol=1e-5, atol=1e-6)  # chunk 2: its 7 scored tokens
