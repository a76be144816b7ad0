"""The decoder-only pair (docs/language-modelling.md):
training a GPT-2 on packed Multi30k texts (train.causal),
the multi30k-lm and wikitext2-gpt2 presets, notebooks/table2_lm's pieces (bildlib.bench.table2), and,
where `make models-lm` has built it, the trained pair itself."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
import torch

from bildlib import REPO_ROOT
from bildlib import decoding as D
from bildlib import train as T
from bildlib.analysis import perplexity
from bildlib.bench import table2
from bildlib.experiments import presets
from bildlib.models import LM, load_model
from bildlib.train import causal

TINY_LM = dict(n_embd=32, n_layer=1, n_head=2, n_inner=64)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory, multi30k_dir):
    out = tmp_path_factory.mktemp("lm") / "m"
    kw = dict(out=str(out), model=TINY_LM, n_train=96, n_val=8, epochs=2, batch_size=4, warmup_steps=2)
    cfg = dataclasses.replace(T.PRESETS["multi30k-lm-small"], device="cpu", lr=3e-3, **kw)
    return cfg, T.train(cfg, progress=False)


def test_training_a_language_model(tiny_lm):
    cfg, log = tiny_lm
    e1, e2 = log["epochs"]
    assert (e1["epoch"], e2["epoch"]) == (1, 2) and e2["train_loss"] < e1["train_loss"]
    best = min(log["epochs"], key=lambda e: e["val_ppl"])  # the lowest val perplexity is the saved one
    assert log["best"] == best and math.isfinite(best["val_ppl"])
    model, tok = load_model(cfg.out, dtype="float32")
    assert model.config.model_type == "gpt2" and model.config.n_positions == causal.POSITIONS
    assert tok("de: Ein Hund en:")["input_ids"][-1] != tok.eos_token_id  # no EOS appended to a prompt
    ppl = causal.val_perplexity(model, tok, T.data.load_multi30k("val").head(8).pairs, cfg.prefix, cfg.suffix)
    assert ppl == pytest.approx(best["val_ppl"], rel=1e-3)  # the log's number is the saved model's
    lm = LM(model, tok, "tiny", "lean")
    assert lm.engine == "lean"
    ids, _ = D.vanilla(lm, lm.encode("de: Ein Hund en:"), max_new_tokens=5)
    assert 1 <= len(ids) <= 5


def test_pack_keeps_every_token_once_in_a_seeded_order():
    texts = [[i] * (1 + i % 5) + [1] for i in range(2, 40)]
    a, b, c = causal.pack(texts, 3, 16), causal.pack(texts, 3, 16), causal.pack(texts, 4, 16)
    assert a == b and a != c
    assert all(len(x) == 16 for x in a[:-1]) and 0 < len(a[-1]) <= 16
    flat = [t for x in a for t in x]
    assert sorted(flat) == sorted(t for x in texts for t in x)


def test_gpt2_config_refuses_what_it_cannot_do(tmp_path):
    with pytest.raises(ValueError, match="arch must be 't5' or 'gpt2'"):
        T.TrainConfig(out="x", model=TINY_LM, arch="bert").validate()
    with pytest.raises(ValueError, match="no init_from, exits or targets"):
        T.TrainConfig(out="x", model=TINY_LM, arch="gpt2", exits="ee").validate()


def test_lm_presets():
    p = presets.get("multi30k-lm")
    assert p.prompt("Ein Hund.") == "de: Ein Hund. en:" and p.aligned is None
    assert causal.text(p.prefix, p.suffix, "Ein Hund.", "A dog.").startswith(p.prompt("Ein Hund."))
    trained = T.PRESETS["multi30k-lm-large"]
    assert (trained.prefix, trained.suffix) == (p.prefix, p.suffix)
    with pytest.raises(ValueError, match="multi30k-lm has no aligned model"):
        p.model("aligned")
    assert presets.get("wikitext2-gpt2").dataset == "wikitext2"


def test_missing_lm_pair_says_how_to_build_it(monkeypatch):
    p = dataclasses.replace(presets.get("multi30k-lm"), small="data/checkpoints/multi30k-lm-nothing")
    monkeypatch.setattr(presets, "LM_BUILT", (p.small, p.large))
    with pytest.raises(FileNotFoundError, match="make models-lm"):
        p.model("small")


def test_table2_texts_are_the_training_format(multi30k_dir):
    t = table2.texts("multi30k-lm", "val", 3)
    src, ref = T.data.load_multi30k("val").pairs[0]
    assert len(t) == 3 and t[0] == f"de: {src} en: {ref}" == causal.text("de: ", " en:", src, ref)
    with pytest.raises(ValueError, match="decoder-only"):
        table2.texts("multi30k", "val")
    with pytest.raises(ValueError, match="n_texts must be >= 1"):
        table2.texts("multi30k-lm", "val", -1)


def test_table2_grid_and_table():
    g = table2.grid([0.3, 0.5], [1.0], [4])
    labels = [c.label for c in g]
    assert len(labels) == len(set(labels))
    want = {"bild-small-fb0.3-norb", "bild-small-fb0.5-norb", "bild-small-fb0.3-rb1.0"}
    want |= {"speculative-small-w4"}
    assert want | {table2.EXACT.label, table2.SMALL_ONLY.label} <= set(labels)
    small = perplexity.Scores(np.log([2.0, 4.0, 8.0]), np.array([0.9, 0.4, 0.2]))
    large = perplexity.Scores(np.log([2.0, 2.0, 2.0]), np.array([0.9, 0.9, 0.9]))
    ppl = table2.perplexity_table(small, large, [0.3, 0.5])
    # α_FB 0.3: the third token (p_S 0.2) goes to the large model; 0.5: the second and the third
    assert ppl["perplexity"].tolist() == pytest.approx([4.0, 2.0, 16 ** (1 / 3), 2.0])
    assert ppl["fallback_pct"].tolist() == pytest.approx([0, 100, 100 / 3, 200 / 3])
    s = pd.DataFrame({
        "label": ["vanilla-large", "vanilla-small", "bild-small-fb0.3-norb", "bild-small-fb0.5-norb",
                  table2.SMALL_ONLY.label, "bild-small-fb0.3-rb1.0"],
        "method": ["vanilla", "vanilla", "bild", "bild", "bild", "bild"],
        "model": ["large", "small", "small", "small", "small", "small"],
        "fallback": [np.nan, np.nan, 0.3, 0.5, 0.0, 0.3], "rollback": [np.nan] * 5 + [1.0],
        "speedup": [1.0, 4.0, 2.0, 1.5, 4.0, 1.8], "norm_latency": [1.0, 0.25, 0.5, 0.67, 0.25, 0.55],
        "score": [30.0, 20.0, 25.0, 28.0, 20.0, 29.0], "fallback_pct": [0, 0, 10.0, 30.0, 0, 11.0],
    })  # fmt: skip
    t = table2.table(ppl, s)
    assert t["row"].tolist() == ["vanilla small", "vanilla large", "BiLD", "BiLD"]
    assert t["gen_speedup"].tolist() == [4.0, 1.0, 2.0, 1.5]  # fallback only: not the rollback row
    assert t["gen_score"].tolist() == [20.0, 30.0, 25.0, 28.0]


PAIR = [REPO_ROOT / "data" / "checkpoints" / n for n in ("multi30k-lm-small", "multi30k-lm-large")]


@pytest.mark.skipif(not all((p / "model.safetensors").is_file() for p in PAIR),
                    reason="the decoder-only pair is built by `make models-lm`, not shipped")  # fmt: skip
def test_trained_pair_equivalences(multi30k_dir):
    """On the trained pair, float32, the first 40 val prompts: exact BiLD writes large greedy's
    tokens, α_FB = 0 without the step limit writes small greedy's, and the policy perplexity
    at α_FB = 0 and 1 is the small and the large model's."""
    torch.set_num_threads(2)
    (s, tok), (lg, _) = (load_model(p, dtype="float32") for p in PAIR)
    small, large = LM(s, tok, "small"), LM(lg, tok, "large")
    p = presets.get("multi30k-lm")
    for src in T.data.load_multi30k("val").head(40).sources:
        x = small.encode(p.prompt(src))
        n = dict(max_new_tokens=64)
        want_l, want_s = D.vanilla(large, x, **n)[0], D.vanilla(small, x, **n)[0]
        assert D.bild(small, large, x, fallback=0.5, rollback=1.0, distance="exact", **n)[0] == want_l
        got, tr = D.bild(small, large, x, fallback=0.0, rollback=None, max_small_steps=None, **n)
        assert got == want_s and tr.counters()["large_calls"] == 0
    ids = perplexity.stream(tok, table2.texts("multi30k-lm", "val", 60))
    a, b = perplexity.score(s, ids), perplexity.score(lg, ids)
    assert a.perplexity > b.perplexity  # a clear quality gap
    assert perplexity.policy(a, b, 0.0).perplexity == pytest.approx(a.perplexity)
    hi = perplexity.policy(a, b, 1.0)
    if hi.p_one == 0:  # else those tokens stay the small model's, as decoding.bild keeps them
        assert hi.perplexity == pytest.approx(b.perplexity)


@pytest.mark.skipif(not all((p / "model.safetensors").is_file() for p in PAIR),
                    reason="the decoder-only pair is built by `make models-lm`, not shipped")  # fmt: skip
def test_trained_pair_lossless_bild_is_exact_in_bf16(multi30k_dir):
    """On the trained pair in bf16 on the lean engine, the first 40 val prompts: exact BiLD writes
    large greedy's tokens, and every product and attention path the engine chose is row-invariant
    here (models.rowinv). With torch.addmm's products it differed on 2 of 100 prompts on an Intel
    Xeon with AMX."""
    from bildlib.models import rowinv

    torch.set_num_threads(2)
    (s, tok), (lg, _) = (load_model(p, dtype="bfloat16") for p in PAIR)
    small, large = LM(s, tok, "small", "lean"), LM(lg, tok, "large", "lean")
    p = presets.get("multi30k-lm")
    for src in T.data.load_multi30k("val").head(40).sources:
        x = small.encode(p.prompt(src))
        want = D.vanilla(large, x, max_new_tokens=64)[0]
        got = D.bild(small, large, x, fallback=0.5, rollback=1.0, distance="exact", max_new_tokens=64)[0]
        assert got == want
    assert rowinv.summary()["row_invariant"] is True


def test_a_decoder_only_student_distils_from_its_teacher(tiny_lm, tmp_path):
    """causal.kd_loss: λ 0 is the LM loss; the teacher itself as the student leaves (1 - λ) CE
    (KL 0); and a run with a teacher trains through it (make models-lm's student)."""
    cfg, _ = tiny_lm
    model, tok = load_model(cfg.out, dtype="float32")
    pairs = T.data.load_multi30k("val").head(4).pairs
    texts = causal.encode(causal.lm_tokenizer(tok), pairs, cfg.prefix, cfg.suffix)
    b = causal.collate(texts, [0, 1, 2, 3], tok.pad_token_id, "cpu")
    with torch.no_grad():
        ce = causal.loss(model, b).item()
        assert causal.kd_loss(model, model, b, 0.0).item() == pytest.approx(ce, rel=1e-6)
        assert causal.kd_loss(model, model, b, 0.5).item() == pytest.approx(0.5 * ce, rel=1e-5)
    kd = dataclasses.replace(cfg, out=str(tmp_path / "kd"), epochs=1, teacher=cfg.out, kd_lambda=0.5, seed=3)
    log = T.train(kd, progress=False)
    assert log["config"]["teacher"] == cfg.out and math.isfinite(log["epochs"][0]["val_ppl"])


def test_lm_targets_read_the_fastest_point_within_half_a_bleu(tmp_path):
    """table2.targets_block: the fastest BiLD point within 0.5 BLEU of vanilla large (speculative
    rows and farther points left out), and whether some α_FB's perplexity beats the large model's."""
    pts = pd.DataFrame({
        "label": ["vanilla-large", "bild-a", "bild-b", "bild-c", "speculative-w3"],
        "method": ["vanilla", "bild", "bild", "bild", "speculative"],
        "score": [30.0, 29.6, 29.4, 29.9, 30.0], "speedup": [1.0, 1.6, 2.5, 1.2, 3.0],
        "speedup_lo": [1.0, 1.5, 2.4, 1.1, 2.9], "speedup_hi": [1.0, 1.7, 2.6, 1.3, 3.1],
        "fallback": [None, 0.3, 0.2, 0.5, None], "rollback": [None, 2.0, 1.0, None, None],
    })  # fmt: skip
    assert table2.best_within(pts)["label"] == "bild-a"  # bild-b is 0.6 below; speculative is not BiLD
    assert table2.best_within(pts, tol=0.05) is None
    t = pd.DataFrame({"row": ["vanilla large", "BiLD", "BiLD"], "perplexity": [11.0, 10.9, 12.0],
                      "fallback": [None, 0.9, 0.3]})  # fmt: skip
    (tmp_path / "f").mkdir()
    pts.to_csv(tmp_path / "f" / "table2_lm_points.csv", index=False)
    t.to_csv(tmp_path / "f" / "table2_lm.csv", index=False)
    text = table2.targets_block(tmp_path, (("student", "f"),))
    assert "1.60× [1.50, 1.70] (α_FB 0.3, α_RB 2; BLEU 29.60); target 1.5×, reached" in text
    assert "10.90 (α_FB 0.9) against vanilla large's 11.00: below" in text
