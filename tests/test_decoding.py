"""bildlib.decoding on tiny random models (an encoder-decoder and two decoder-only kinds),
and on the shipped Multi30k pair."""

import random
import weakref

import pytest
import torch

from bildlib import decoding as D
from bildlib.models import LM, check_pair, load_pair
from bildlib.notebook.tutorial.fakes import Markov  # next-token logits from the previous token only
from conftest import REPO, TINY_VOCAB, perturbed, run_python, save_tiny, tiny_model, tiny_tokenizer

N_INPUTS = 50
LOGIT_SCALE = {"t5": 0.3, "gpt2": 12.0, "llama": 12.0}  # max probabilities spread over (0.2, 0.95)


def sources(n=N_INPUTS, seed=0):
    r = random.Random(seed)
    return [[r.randrange(3, TINY_VOCAB) for _ in range(r.randrange(2, 9))] + [1] for _ in range(n)]


@pytest.fixture(scope="module", params=["t5", "gpt2", "llama"])
def pair(request, tmp_path_factory):
    """(small, large): the small one is the large one with noise, so they agree often but not always."""
    d = tmp_path_factory.mktemp(request.param)
    large = tiny_model(request.param, seed=1, d=48, scale=LOGIT_SCALE[request.param])
    small = perturbed(large, seed=2, noise=0.8)
    return load_pair(save_tiny(small, d / "small"), save_tiny(large, d / "large"))


_GREEDY: dict = {}


def greedy(model, src, n=24):
    """Vanilla greedy output, memoised: several properties compare against the same runs.
    Keyed on the model object, not id(model): the dict keeps it alive, so a later fixture's
    model cannot reuse the id and read another model's outputs (CI failed that way once)."""
    key = (model, tuple(src), n)
    if key not in _GREEDY:
        _GREEDY[key] = D.vanilla(model, src, max_new_tokens=n)[0]
    return _GREEDY[key]


def fresh_logits(model: LM) -> torch.Tensor:
    """The next-token logits after model.ids, from a forward pass without any cache."""
    m, ids, src = model.model, torch.tensor([model.ids]), model.source
    with torch.no_grad():
        if model.is_encoder_decoder:
            return m(input_ids=src, decoder_input_ids=ids).logits[0, -1, : model.width]
        return m(input_ids=torch.cat([src[:, :-1], ids], dim=1)).logits[0, -1, : model.width]


def check_accounting(out, tr):
    assert tr.n_small + tr.n_large == len(out) == len(tr.source)
    assert tr.rollbacks <= tr.large_calls
    assert tr.drafted == tr.n_small + tr.discarded
    assert len(tr.large_call_tokens) == tr.large_calls == len(tr.large_times)
    assert tr.small_calls == len(tr.small_times)


def test_vanilla_greedy_is_generate(pair):
    small, _ = pair
    for src in sources(5):
        ref = small.model.generate(torch.tensor([src]), do_sample=False, num_beams=1, max_new_tokens=24)
        ref = ref[0].tolist()[1:] if small.is_encoder_decoder else ref[0].tolist()[len(src) :]
        assert greedy(small, src) == ref


def test_cached_logits_match_a_fresh_forward_after_crops(pair):
    small, _ = pair
    bos = small.start(sources(1)[0])
    small.forward([bos, 5, 6, 7, 8])
    small.crop(3)
    logits = small.forward([9, 10])[-1]
    torch.testing.assert_close(logits, fresh_logits(small), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="crop"):
        small.crop(9)


def test_never_falling_back_is_small_greedy(pair):
    small, large = pair
    for src in sources():
        out, tr = D.bild(
            small, large, src, fallback=0.0, rollback=None, max_small_steps=None, max_new_tokens=24
        )
        assert out == greedy(small, src)
        assert tr.large_calls == 0 and tr.n_large == 0
        # never called, never encoded (or prefilled): the large encoder runs at its first call
        assert large.ids == [] and large.pending  # the source is still waiting for its first call


@pytest.mark.parametrize("fallback", [0.0, 0.3, 0.6])
def test_exact_distance_is_large_greedy(pair, fallback):
    small, large = pair
    n_rollbacks = n_fallbacks = 0
    for src in sources():
        out, tr = D.bild(
            small, large, src, fallback=fallback, rollback=1.0, distance="exact", max_new_tokens=24
        )
        assert out == greedy(large, src)
        check_accounting(out, tr)
        n_rollbacks += tr.rollbacks
        n_fallbacks += tr.fallbacks
    assert n_rollbacks > 0  # the property was tested where it matters
    assert (n_fallbacks > 0) == (fallback > 0)


def test_greedy_rollback_only_where_the_large_token_differs(pair):
    """At α_RB = 0 every small token the large model does not rank first is rolled back, and no
    other: exactly the decisions of distance="exact" (a rollback that puts the same token back in
    place would discard the tokens after it for nothing)."""
    small, large = pair
    n_rollbacks = 0
    for src in sources():
        ce = D.bild(small, large, src, fallback=0.5, rollback=0.0, verify_end=True, max_new_tokens=24)
        ex = D.bild(small, large, src, fallback=0.5, rollback=1.0, distance="exact", max_new_tokens=24)
        assert ce[0] == ex[0] == greedy(large, src)
        assert (ce[1].source, ce[1].rollbacks, ce[1].large_call_tokens) == (
            ex[1].source, ex[1].rollbacks, ex[1].large_call_tokens,
        )  # fmt: skip
        n_rollbacks += ce[1].rollbacks
    assert n_rollbacks > 0


def test_verify_end(pair):
    """Algorithm 1 stops at the small model's EOS; verify_end=True has the large model check the
    unchecked tail in one last call (the default for distance="exact" only)."""
    small, large = pair
    checked = 0
    for src in sources(20):
        kw = dict(fallback=0.0, rollback=100.0, max_small_steps=None, max_new_tokens=24)
        out, tr = D.bild(small, large, src, **kw)
        assert out == greedy(small, src) and tr.large_calls == 0
        out, tr = D.bild(small, large, src, verify_end=True, **kw)
        assert tr.large_call_tokens[0] == len(greedy(small, src)) + 1  # bos + the whole output
        if tr.rollbacks == 0:
            assert out == greedy(small, src) and tr.large_calls == 1
            checked += 1
    assert checked > 0
    with pytest.raises(ValueError, match="verify_end"):
        D.bild(small, large, sources(1)[0], rollback=None, verify_end=True)


def test_always_falling_back_without_rollback_is_large_greedy(pair):
    small, large = pair
    for src in sources():
        out, tr = D.bild(small, large, src, fallback=1.0, rollback=None, max_new_tokens=24)
        assert out == greedy(large, src)
        assert tr.n_small == 0 and tr.fallbacks == len(out)


def test_caches_after_every_rollback_match_a_fresh_forward(pair, monkeypatch):
    import copy

    small, large = pair
    checked = []

    def crop_and_check(self, n, _crop=LM.crop):
        _crop(self, n)
        probe = copy.copy(self)
        probe.ids = list(self.ids)
        if self.engine == "hf":  # the lean cache is overwritten at len(ids) by the next call anyway
            probe.impl = copy.copy(self.impl)
            probe.impl.cache = copy.deepcopy(self.impl.cache)
        cached = probe.forward([7])[-1]
        probe.ids = self.ids + [7]
        torch.testing.assert_close(cached, fresh_logits(probe), atol=1e-4, rtol=0)
        checked.append(n)

    monkeypatch.setattr(LM, "crop", crop_and_check)
    rollbacks = 0
    for src in sources(15):
        out, tr = D.bild(small, large, src, fallback=0.6, rollback=0.7, max_new_tokens=24)
        check_accounting(out, tr)
        rollbacks += tr.rollbacks
    assert rollbacks > 0 and len(checked) == 2 * rollbacks


def test_trace_accounting_over_a_threshold_grid(pair):
    small, large = pair
    seen = {"fallbacks": 0, "rollbacks": 0, "small": 0}
    for fb in (0.3, 0.6, 0.9):
        for rb in (0.5, 2.0, None):
            for src in sources(8, seed=3):
                out, tr = D.bild(small, large, src, fallback=fb, rollback=rb, max_new_tokens=24)
                check_accounting(out, tr)
                assert max(_runs(tr.source, "S"), default=0) <= 10
                if rb is None:
                    assert tr.rollbacks == 0
                seen["fallbacks"] += tr.fallbacks
                seen["rollbacks"] += tr.rollbacks
                seen["small"] += tr.n_small
    assert all(seen.values())


def _runs(source, who):
    n, out = 0, []
    for s in source + ["end"]:
        if s == who:
            n += 1
        else:
            out.append(n)
            n = 0
    return out


@pytest.mark.parametrize("window", [1, 3])
def test_no_fallback_hands_over_every_window_tokens(pair, window):
    small, large = pair
    for src in sources(10):
        out, tr = D.bild(small, large, src, fallback=None, rollback=None, window=window, max_new_tokens=24)
        check_accounting(out, tr)
        assert tr.fallbacks == 0
        assert "".join(tr.source).startswith(("S" * window + "L") * (len(out) // (window + 1)))


def test_max_small_steps_bounds_small_runs(pair):
    small, large = pair
    for src in sources(10):
        out, tr = D.bild(small, large, src, fallback=0.0, rollback=None, max_small_steps=4, max_new_tokens=24)
        assert max(_runs(tr.source, "S")) <= 4


def test_greedy_speculative_decoding_is_large_greedy(pair):
    small, large = pair
    for src in sources():
        out, tr = D.speculative_sampling(small, large, src, window=4, max_new_tokens=24)
        assert out == greedy(large, src)
        check_accounting(out, tr)


def test_oracle_extremes(pair):
    small, large = pair
    for src in sources(10):
        out, tr = D.oracle(small, large, src, threshold=0.0, max_new_tokens=24)
        assert out == greedy(small, src) and tr.n_large == 0
        out, tr = D.oracle(small, large, src, threshold=1.0, max_new_tokens=24)
        assert out == greedy(large, src) and tr.n_small == 0


def test_nucleus_sampling_is_seeded_and_tiny_top_p_is_greedy(pair):
    small, _ = pair
    src = sources(1)[0]
    a = D.vanilla(small, src, D.Sampling(temperature=1.0, top_p=0.9, seed=4), max_new_tokens=24)[0]
    b = D.vanilla(small, src, D.Sampling(temperature=1.0, top_p=0.9, seed=4), max_new_tokens=24)[0]
    assert a == b
    draws = {tuple(D.vanilla(small, src, D.Sampling(seed=s), max_new_tokens=24)[0]) for s in range(8)}
    assert len(draws) > 1
    assert D.vanilla(small, src, D.Sampling(top_p=1e-6, seed=1), max_new_tokens=24)[0] == greedy(small, src)
    out, tr = D.bild(small, pair[1], src, fallback=0.5, rollback=2.0, sampling=D.Sampling(seed=3))
    check_accounting(out, tr)


# --- the authors' rules -----------------------------------------------------------------------


_ENCODED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> {src: encoder outputs}


def full_logits(lm: LM, src: list[int], ids: list[int]) -> torch.Tensor:
    """Logits (len(ids), V) of the decoder tokens ids after src, from one HF forward pass with no
    cache: row i predicts the token after ids[i]. The encoder runs once per source."""
    m, x = lm.model, torch.tensor([ids])
    with torch.no_grad():
        if lm.is_encoder_decoder:
            enc = _ENCODED.setdefault(m, {})
            if tuple(src) not in enc:
                enc[tuple(src)] = m.get_encoder()(input_ids=torch.tensor([src]))
            out = m(encoder_outputs=enc[tuple(src)], decoder_input_ids=x, use_cache=False)
            return out.logits[0, :, : lm.width]
        prompt = torch.tensor([src[:-1]], dtype=torch.long)
        out = m(input_ids=torch.cat([prompt, x], dim=1), use_cache=False)
        return out.logits[0, prompt.shape[1] :, : lm.width]


def authors_bild(small, large, src, fallback, rollback, num_small_iters=10, max_new_tokens=24):
    """T5BiLDModel._greedy_search_body (github.com/kssteven418/BigLittleDecoder, modeling_t5.py),
    restated step for step with cache-free forward passes: each model's past is only a length.
    Their loop: the large model starts (init_iters(init_with='large')); a small step below α_FB is
    dropped and hands over (schedule_iters(fall_back_to_large=True)); a large step over several
    tokens finds the first cross-entropy above α_RB and, unless its argmax is the small token
    there, cuts input_ids and `continue`s, skipping the past update, the end checks and the
    scheduler; otherwise the pasts are updated, EOS or max_length ends, and schedule_iters()."""
    bos = large.start(src)
    input_ids, past = [bos], {"large": 0, "small": 0}
    model_type, iter_count, rollback_signal = "large", 1, False
    max_length = 1 + max_new_tokens
    while True:
        if rollback_signal:  # _reset_kwargs_past_to_new_length(len(input_ids))
            past = {k: min(v, len(input_ids) - 1) for k, v in past.items()}
            rollback_signal = False
        lm = large if model_type == "large" else small
        fed = input_ids[past[model_type] :]  # prepare_inputs_for_generation: what the past lacks
        logits = full_logits(lm, src, input_ids)[past[model_type] :]  # (len(fed), V)
        score = torch.softmax(logits[-1].double(), -1)
        next_token = int(score.argmax())
        if model_type == "small" and score.max() < fallback:  # fallback_cond
            iter_count -= 1
            model_type, iter_count = "large", 1
            continue
        input_ids = input_ids + [next_token]
        if model_type == "large" and len(fed) != 1:
            loss = torch.nn.functional.cross_entropy(
                logits[:-1].double(), torch.tensor(fed[1:]), reduction="none"
            )
            above = loss > rollback
            if above.any():
                first = int(above.int().argmax())
                new_len = first + past["large"] + 1
                new_pred = int(logits[first].argmax())
                if new_pred != input_ids[new_len]:
                    input_ids = input_ids[:new_len] + [new_pred]
                    rollback_signal = True
                    continue
        past[model_type] = len(input_ids) - 1  # _update_model_kwargs_for_generation
        if next_token == lm.eos or len(input_ids) >= max_length:
            break
        iter_count -= 1  # schedule_iters()
        if iter_count == 0:
            model_type, iter_count = ("small", num_small_iters) if model_type == "large" else ("large", 1)
    return input_ids[1:]


def check_authors_rules(small, large, srcs, thresholds, max_new_tokens, differs=True):
    seen = {"rollbacks": 0, "fallbacks": 0, "differs from ours": 0 if differs else 1}
    for fb, rb in thresholds:
        for src in srcs:
            kw = dict(fallback=fb, rollback=rb, max_new_tokens=max_new_tokens)
            out, tr = D.bild(small, large, src, rules="authors", **kw)
            assert out == authors_bild(small, large, src, fb, rb, max_new_tokens=max_new_tokens)
            assert tr.source[0] == "L"  # the large model writes the first token
            check_accounting(out, tr)
            seen["rollbacks"] += tr.rollbacks
            seen["fallbacks"] += tr.fallbacks
            seen["differs from ours"] += out != D.bild(small, large, src, **kw)[0]
    assert all(seen.values()), seen  # the rules were exercised, and (tiny pairs) change outputs


def test_authors_rules_follow_their_control_flow(pair):
    small, large = pair
    check_authors_rules(small, large, sources(20), [(0.5, 0.7), (0.8, 2.0)], 24)  # each rule shows in 20


def test_authors_rules_refuse_what_their_code_lacks(pair):
    small, large = pair
    src = sources(1)[0]
    for kw, match in [
        ({"fallback": None, "window": 3}, "window"),
        ({"distance": "exact"}, "distance"),
        ({"sampling": D.Sampling(seed=1)}, "sampling"),
        ({"verify_end": True}, "verify_end"),
        ({"rules": "paper"}, "rules must be one of"),
    ]:
        with pytest.raises(ValueError, match=match):
            D.bild(small, large, src, **({"rules": "authors"} | kw))


# --- speculative sampling matches the large model's distribution -------------------------------


def chi2_pvalue(counts: torch.Tensor, probs: torch.Tensor) -> float:
    expected = probs * counts.sum()
    stat = ((counts - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((len(counts) - 1) / 2), stat / 2))


def test_speculative_sampling_follows_the_large_model():
    V, draws = 5, 20_000
    g = torch.Generator().manual_seed(0)
    big = torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5
    little = big + torch.randn(V, V, generator=g, dtype=torch.float64) * 1.5  # a worse guesser
    large, small = Markov(big), Markov(little)

    def joint(t):  # P(first, second) for tokens after bos = 0
        p = t.softmax(-1)
        return (p[0].unsqueeze(1) * p).flatten()  # (V*V,)

    counts = torch.zeros(V * V, dtype=torch.float64)
    for seed in range(draws):
        out, tr = D.speculative_sampling(
            small, large, [3], window=3, sampling=D.Sampling(seed=seed), max_new_tokens=2
        )
        counts[out[0] * V + out[1]] += 1
    assert chi2_pvalue(counts, joint(big)) > 0.001
    assert chi2_pvalue(counts, joint(little)) < 1e-6


# --- loading and bad input ------------------------------------------------------------------


def test_vocabulary_mismatch_is_an_error(tmp_path):
    from transformers import PreTrainedTokenizerFast

    a = LM(tiny_model("t5", seed=1), tiny_tokenizer(), "a")
    tok = tiny_tokenizer()
    vocab = tok.get_vocab()
    vocab["w3"], vocab["w4"] = vocab["w4"], vocab["w3"]
    from tokenizers import Tokenizer, models

    other = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="<unk>")),
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
    )
    with pytest.raises(ValueError, match="do not share a vocabulary.*2 with different ids"):
        check_pair(a, LM(tiny_model("t5", seed=2), other, "b"))
    with pytest.raises(ValueError, match="encoder-decoder"):
        check_pair(a, LM(tiny_model("gpt2", seed=2), tiny_tokenizer(), "b"))


def test_bad_decoder_arguments(pair):
    small, large = pair
    src = sources(1)[0]
    for kw, match in [
        ({"fallback": 1.5}, "fallback"),
        ({"rollback": -1}, "rollback"),
        ({"distance": "l2"}, "distance"),
        ({"rollback": None, "distance": "exact"}, "exact"),
        ({"fallback": None}, "window"),
        ({"window": 3}, "window"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_small_steps": 0}, "max_small_steps"),
    ]:
        with pytest.raises(ValueError, match=match):
            D.bild(small, large, src, **kw)
    with pytest.raises(ValueError, match="source_ids"):
        D.vanilla(small, [])
    with pytest.raises(ValueError, match="top_p"):
        D.Sampling(top_p=0)


DECODERS = {
    "vanilla": lambda s, lg, src: D.vanilla(s, src, max_new_tokens=3),
    "bild": lambda s, lg, src: D.bild(s, lg, src, max_new_tokens=3),
    "speculative": lambda s, lg, src: D.speculative_sampling(s, lg, src, max_new_tokens=3),
    "oracle": lambda s, lg, src: D.oracle(s, lg, src, 0.5, max_new_tokens=3),
}


def test_every_decoder_is_batch_one_on_integer_ids_in_the_vocabulary(pair):
    import numpy as np

    small, large = pair
    src = sources(1)[0]
    for name, run in DECODERS.items():
        for batch in ([src, src], torch.tensor([src, src]), [[3, 4], [5]]):
            with pytest.raises(ValueError, match="batch 1"):  # not decoded as one concatenated row
                run(small, large, batch)
        for ids in ([3, TINY_VOCAB + 99999], [-5, 3], torch.tensor([3, -1])):
            with pytest.raises(ValueError, match=rf"source_ids must lie in \[0, {TINY_VOCAB}\)"):
                run(small, large, ids)
        for ids in ([3.0, 4.5], torch.tensor([3.0, 4.0]), [3, True], "w3 w4"):
            with pytest.raises(TypeError, match="integer token ids"):  # not truncated to integers
                run(small, large, ids)
        want = run(small, large, src)[0]
        for same in (torch.tensor([src]), torch.tensor(src), np.array(src), tuple(src)):
            assert run(small, large, same)[0] == want, name  # one row in any form decodes alike
        with pytest.raises(ValueError, match="max_new_tokens"):
            D.vanilla(small, src, max_new_tokens=2.5)


def test_decoders_refuse_a_pair_without_one_vocabulary(tmp_path):
    """Called directly, not through load_pair: a pair whose vocabularies differ is an error in
    every two-model decoder, and the check is remembered once it passed."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    big = {"<pad>": 0, "</s>": 1, "<unk>": 2} | {f"v{i}": i for i in range(3, 2 * TINY_VOCAB)}
    other = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(big, unk_token="<unk>")),
        pad_token="<pad>", eos_token="</s>", unk_token="<unk>",
    )  # fmt: skip
    large = LM(tiny_model("t5", seed=1), tiny_tokenizer(), "large")
    stranger = LM(tiny_model("t5", seed=2, d=16), other, "stranger")
    src = sources(1)[0]
    for name, run in DECODERS.items():
        if name != "vanilla":
            with pytest.raises(ValueError, match="stranger and large do not share a vocabulary"):
                run(stranger, large, src)
    small = LM(tiny_model("t5", seed=3), tiny_tokenizer(), "small")
    assert large not in small.partners
    D.bild(small, large, src, max_new_tokens=3)
    assert large in small.partners and stranger not in small.partners


def test_missing_models_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        LM.from_pretrained(tmp_path / "nope")
    # a hub name with the Hub unreachable and nothing cached: fails at once, naming it
    proc = run_python(
        "from bildlib.models import LM, ModelUnavailableError\n"
        "try:\n    LM.from_pretrained('kssteven/mT5-large-iwslt2017-de-en')\n"
        "except ModelUnavailableError as e:\n    print(e)\n",
        cwd=tmp_path,
        env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf")},
    )
    assert "kssteven/mT5-large-iwslt2017-de-en" in proc.stdout and "not reachable" in proc.stdout


# --- the shipped Multi30k pair ----------------------------------------------------------------


@pytest.fixture(scope="module")
def shipped(multi30k_dir):
    ck = REPO / "data" / "checkpoints"
    if not (ck / "multi30k-small" / "model.safetensors").is_file():
        pytest.skip("the shipped multi30k-small checkpoint is not trained yet (make models)")
    from bildlib import data

    small, large = load_pair(ck / "multi30k-small", ck / "multi30k-large", dtype="float32")  # exactness
    return small, large, [small.encode(s) for s in data.load("multi30k", "val", N_INPUTS).sources]


def test_shipped_pair_properties(shipped):
    small, large, srcs = shipped
    rollbacks = 0
    for src in srcs:
        ref_large = greedy(large, src, 64)
        out, tr = D.bild(small, large, src, fallback=0.5, rollback=1.0, distance="exact", max_new_tokens=64)
        assert out == ref_large
        rollbacks += tr.rollbacks
        out, tr = D.bild(
            small, large, src, fallback=0.0, rollback=None, max_small_steps=None, max_new_tokens=64
        )
        assert out == greedy(small, src, 64)
    assert rollbacks > 0


def test_shipped_greedy_speculative_is_vanilla_large(shipped):
    """Paper Table 3's baseline check: greedy speculative decoding is lossless, token for token,
    at every window of the notebook's sweep (20 val sentences)."""
    small, large, srcs = shipped
    drafts_rejected = 0
    for src in srcs[:20]:
        for w in (3, 6, 10):
            out, tr = D.speculative_sampling(small, large, src, window=w, max_new_tokens=64)
            assert out == greedy(large, src, 64)
            drafts_rejected += tr.rollbacks
    assert drafts_rejected > 0  # the small model's drafts were wrong somewhere: the check did something


def test_shipped_pair_authors_rules(shipped):
    small, large, srcs = shipped
    check_authors_rules(small, large, srcs, [(0.5, 1.0)], 64, differs=False)  # same on these 50


def test_dtype_resolution_and_loading(tmp_path, monkeypatch):
    import torch

    from bildlib.models import load as M

    cpu, f32, bf16 = torch.device("cpu"), torch.float32, torch.bfloat16
    assert M.resolve_dtype("auto", cpu, f32) == f32
    assert M.resolve_dtype("auto", cpu, torch.float16) == f32
    monkeypatch.setattr(M, "native_bf16", lambda: True)
    assert M.resolve_dtype("auto", cpu, bf16) == bf16
    assert M.resolve_dtype("default", cpu, bf16) == bf16  # the default is auto, by measurement (README)
    monkeypatch.setattr(M, "native_bf16", lambda: False)
    assert M.resolve_dtype("auto", cpu, bf16) == f32  # emulated bf16 is slower than fp32
    assert M.resolve_dtype("default", cpu, bf16) == f32
    assert M.resolve_dtype("bfloat16", cpu, f32) == bf16

    path = save_tiny(tiny_model("t5", seed=1).to(bf16), tmp_path / "bf16")
    assert LM.from_pretrained(path).model.dtype == f32
    assert LM.from_pretrained(path, dtype="auto").model.dtype == f32  # native_bf16 patched off
    lm = LM.from_pretrained(path, dtype="bfloat16")
    assert lm.model.dtype == bf16
    lm.start([5, 6, 7])
    assert torch.isfinite(lm.forward([lm.model.config.decoder_start_token_id, 9]).float()).all()
    monkeypatch.setattr(M, "native_bf16", lambda: True)
    cfg = path / "config.json"  # declared fp32 as bildlib.train writes it: the stored weights decide
    cfg.write_text(cfg.read_text().replace('"bfloat16"', '"float32"'))
    assert LM.from_pretrained(path, dtype="auto").model.dtype == bf16
    with pytest.raises(ValueError, match="dtype must be one of"):
        LM.from_pretrained(path, dtype="float64")
