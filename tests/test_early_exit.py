"""Early-exit BiLD (one model's first layer as the small model) and CALM, on tiny random T5s:
the views' logits against truncated HF models, caches after every rollback, state propagation,
the threshold schedule, the multi-exit training loss, and their errors."""

import copy
import math
import subprocess

import pytest
import torch
import torch.nn.functional as F
import transformers as tf
from test_decoding import sources

from bildlib import decoding as D
from bildlib.decoding.trace import Trace
from bildlib.models import LM, early_exit_pair
from bildlib.train import TrainConfig
from bildlib.train.exits import exit_weights, multi_exit_loss
from conftest import REPO, TINY_VOCAB, save_tiny, tiny_tokenizer

LAYERS = 4  # decoder layers of the tiny model


def tiny_t5(seed=1):
    """A tied T5 (scaled head, like the shipped pair) with 4 decoder layers."""
    torch.manual_seed(seed)
    cfg = tf.T5Config(vocab_size=TINY_VOCAB, d_model=48, d_ff=96, d_kv=24, num_heads=2, num_layers=2,
                      num_decoder_layers=LAYERS, decoder_start_token_id=0, eos_token_id=1,
                      pad_token_id=0)  # fmt: skip
    return tf.T5ForConditionalGeneration(cfg).eval()  # its layer-1 exit falls back and rolls back


def truncated(model, layers: int):
    """The same model with only its first `layers` decoder layers (final norm and head kept)."""
    m = copy.deepcopy(model)
    m.decoder.block = m.decoder.block[:layers]
    m.config.num_decoder_layers = layers
    return m.eval()


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return save_tiny(tiny_t5(), tmp_path_factory.mktemp("ee") / "tiny-ee")


@pytest.fixture(scope="module")
def hf(ckpt):
    return tf.T5ForConditionalGeneration.from_pretrained(ckpt).eval()


def fresh(model, src, ids) -> torch.Tensor:
    """Logits (V,) after decoder tokens ids, from a no-cache HF forward."""
    with torch.no_grad():
        return model(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([ids])).logits[0, -1]


def test_small_view_equals_the_model_truncated_to_its_exit_layer(ckpt, hf):
    for e in (1, 2):
        small, large = early_exit_pair(ckpt, exit_layer=e)
        ref = truncated(hf, e)
        src = sources(1, seed=e)[0]
        seq = [small.start(src)]
        large.start(src)
        for step in ([], [3], [4, 5], [6], [7, 8, 9]):  # one token and several, as BiLD calls
            seq += step
            got = small.forward(seq[len(small.ids) :])  # (k, V): row r predicts after seq[: n - k + r + 1]
            k = got.shape[0]
            for r in range(k):
                want = fresh(ref, src, seq[: len(seq) - k + r + 1])
                torch.testing.assert_close(got[r], want, atol=1e-4, rtol=0)
        seq += [10, 11]  # the large view reuses the small view's exit states and runs the rest
        got = large.forward(seq[len(large.ids) :])
        for r in range(len(seq)):
            torch.testing.assert_close(got[r], fresh(hf, src, seq[: r + 1]), atol=1e-4, rtol=0)


def test_early_exit_bild_caches_after_every_rollback_match_a_fresh_forward(ckpt, hf, monkeypatch):
    small, large = early_exit_pair(ckpt, exit_layer=1)
    ref = {small: truncated(hf, 1), large: hf}
    checked = []

    def probe(lm):  # the next call's logits, the shared state put back as it was
        v = lm.impl
        saved = v.len, v.s.n
        p = copy.copy(lm)
        p.ids = list(lm.ids)
        out = p.forward([7])[-1]
        v.len, v.s.n = saved
        return out

    def rewind_and_check(self, seq, pos, *models, _rewind=Trace.rewind):
        _rewind(self, seq, pos, *models)
        for lm in reversed(models):  # large first: it must not reuse the small view's stale states
            assert lm.ids == seq[: len(lm.ids)]
            want = fresh(ref[lm], lm.source[0].tolist(), lm.ids + [7])
            torch.testing.assert_close(probe(lm), want, atol=1e-4, rtol=0)
        checked.append(pos)

    monkeypatch.setattr(Trace, "rewind", rewind_and_check)
    rollbacks = small_tokens = 0
    for i, src in enumerate(sources(20)):  # the authors' rules run the large view first after a rollback
        rules = "authors" if i % 2 else "ours"
        out, tr = D.bild(small, large, src, fallback=0.3, rollback=0.5, max_new_tokens=24, rules=rules)
        assert len(out) == len(tr.source)
        rollbacks += tr.rollbacks
        small_tokens += tr.n_small
    assert rollbacks > 0 and small_tokens > 0 and len(checked) == rollbacks


def test_exact_early_exit_bild_is_the_full_models_greedy_output(ckpt, hf):
    small, large = early_exit_pair(ckpt, exit_layer=1)
    full = LM(hf, tiny_tokenizer(), "full", engine="hf")
    kept = 0
    for src in sources(20, seed=4):
        want, _ = D.vanilla(full, src, max_new_tokens=24)
        out, tr = D.bild(small, large, src, fallback=0.3, rollback=1.0, distance="exact", max_new_tokens=24)
        assert out == want
        kept += tr.n_small
    assert kept > 0  # the small view wrote some of them


@pytest.mark.parametrize("measure", ["state", "softmax"])
def test_calm_that_never_exits_is_the_full_models_greedy_output(ckpt, hf, measure):
    lean = LM(hf, tiny_tokenizer(), "full", engine="lean")
    full = LM(hf, tiny_tokenizer(), "full", engine="hf")
    for src in sources(15, seed=5):
        out, tr = D.calm(lean, src, threshold=1.0, tau=0.0, measure=measure, max_new_tokens=24)
        assert out == D.vanilla(full, src, max_new_tokens=24)[0]
        assert tr.exits == [LAYERS] * len(out) and tr.n_small == 0


@pytest.mark.parametrize("measure", ["state", "softmax"])
def test_calm_at_threshold_zero_is_the_first_layers_greedy_output(ckpt, hf, measure):
    lean = LM(hf, tiny_tokenizer(), "full", engine="lean")
    layer1 = LM(truncated(hf, 1), tiny_tokenizer(), "layer-1", engine="hf")
    for src in sources(15, seed=6):
        out, tr = D.calm(lean, src, threshold=0.0, measure=measure, min_exit=1, max_new_tokens=24)
        assert out == D.vanilla(layer1, src, max_new_tokens=24)[0]
        assert tr.exits == [1] * len(out)


def test_calm_state_propagation_fills_skipped_layers_from_the_exited_state(ckpt, hf):
    lean = LM(hf, tiny_tokenizer(), "full", engine="lean")
    src = sources(1, seed=7)[0]
    out, tr = D.calm(lean, src, threshold=0.0, min_exit=2, max_new_tokens=12)  # every token exits at 2
    assert tr.exits == [2] * len(out)
    T = len(lean.ids)
    with torch.no_grad():  # layer 2's output at every position, from a no-cache forward of the full model
        h = hf(input_ids=torch.tensor([src]), decoder_input_ids=torch.tensor([lean.ids]),
               output_hidden_states=True).decoder_hidden_states[2][0]  # fmt: skip
    buf = lean.impl.kv.buf  # (L, 2, H, T, dh)
    H, dh = hf.config.num_heads, hf.config.d_kv
    for j in range(2, LAYERS):  # the skipped layers
        sa = hf.decoder.block[j].layer[0]
        x = sa.layer_norm(h)
        for which, lin in ((0, sa.SelfAttention.k), (1, sa.SelfAttention.v)):
            want = lin(x).view(T, H, dh).transpose(0, 1)  # (H, T, dh)
            torch.testing.assert_close(buf[j, which, :, :T], want, atol=1e-5, rtol=0)


def test_calm_threshold_schedule():
    assert D.calm_threshold(0.9, 0.0, 30, 128) == pytest.approx(0.9)
    assert D.calm_threshold(0.8, 4.0, 0, 128) == pytest.approx(0.8)
    assert D.calm_threshold(0.8, 4.0, 64, 128) == pytest.approx(0.8 * (0.9 + 0.1 * math.exp(-2.0)))
    assert D.calm_threshold(0.98, 8.0, 128, 128) == pytest.approx(0.98 * (0.9 + 0.1 * math.exp(-8.0)))
    assert D.calm_threshold(0.0, 2.0, 5, 128) == 0.0


@pytest.mark.parametrize("kind", ["ee", "calm"])
def test_multi_exit_loss_is_the_weighted_sum_of_per_layer_cross_entropies(kind):
    model = tiny_t5(seed=3)
    batch = {"input_ids": torch.tensor([[5, 6, 7, 1], [8, 9, 1, 0]]),
             "attention_mask": torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
             "labels": torch.tensor([[10, 11, 12, 1], [13, 1, -100, -100]])}  # fmt: skip
    w = exit_weights(kind, LAYERS, exit_layer=2)
    assert sum(w.values()) == pytest.approx(1.0)
    assert w == ({2: 0.5, 4: 0.5} if kind == "ee" else {i: i / 10 for i in range(1, 5)})
    want = 0.0
    for layer, wi in w.items():  # each exit as its own truncated model
        logits = truncated(model, layer)(**batch).logits
        want += wi * F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100,
                                     label_smoothing=0.1)  # fmt: skip
    got = multi_exit_loss(model, batch, w, label_smoothing=0.1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    got.backward()  # it trains: every decoder layer up to the deepest exit gets a gradient
    assert model.decoder.block[0].layer[0].SelfAttention.q.weight.grad.abs().sum() > 0


def test_bad_early_exit_input_is_a_clear_error(ckpt, hf):
    for e in (0, LAYERS, 1.5):
        with pytest.raises(ValueError, match="exit_layer"):
            early_exit_pair(ckpt, exit_layer=e)
    with pytest.raises(ValueError, match="exit_layer"):
        exit_weights("ee", LAYERS, exit_layer=LAYERS)
    with pytest.raises(ValueError, match="exits"):
        TrainConfig(out="x", init_from="y", exits="early").validate()
    with pytest.raises(ValueError, match="engine"):
        early_exit_pair(ckpt, engine="hf")
    lean = LM(hf, tiny_tokenizer(), "full", engine="lean")
    src = sources(1)[0]
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="threshold"):
            D.calm(lean, src, threshold=bad)
    with pytest.raises(ValueError, match="measure"):
        D.calm(lean, src, measure="entropy")
    with pytest.raises(ValueError, match="min_exit"):
        D.calm(lean, src, min_exit=LAYERS + 1)
    with pytest.raises(ValueError, match="lean engine"):
        D.calm(LM(hf, tiny_tokenizer(), "full", engine="hf"), src)


def test_tracked_files_stay_under_63_mb():
    """The device machine refuses a working tree over 64 MiB, so the tree keeps under 63 MB; the
    early-exit models and the students are therefore built by make targets, not committed."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    total = sum((REPO / f).stat().st_size for f in files.decode().split("\0") if f and (REPO / f).exists())
    assert total < 63_000_000, f"tracked files total {total / 1e6:.1f} MB"


def test_early_exit_configurations_and_their_errors():
    import dataclasses

    from bildlib.experiments import presets
    from bildlib.experiments.config import Config

    c = Config("calm", "calm", threshold=0.9, tau=4.0, measure="state")
    assert c.label == "calm-state-l0.9-tau4" and c.needs() == ["calm"]
    assert Config("bild", "ee", fallback=0.5, rollback=1.0).needs() == ["ee"]
    assert Config("vanilla", "ee").needs() == ["ee"]
    for bad, match in (
        (dict(method="calm", model="small", threshold=0.9, tau=0.0, measure="state"), "calm"),
        (dict(method="bild", model="calm", fallback=0.5, rollback=1.0), "calm"),
        (dict(method="calm", model="calm", threshold=1.2, tau=0.0, measure="state"), "threshold"),
        (dict(method="calm", model="calm", threshold=0.9, tau=-1.0, measure="state"), "tau"),
        (dict(method="calm", model="calm", threshold=0.9, tau=0.0, measure="entropy"), "measure"),
        (dict(method="speculative", model="ee", window=4), "ee"),
    ):
        with pytest.raises(ValueError, match=match):
            Config(**bad)
    p = dataclasses.replace(presets.get("multi30k"), ee="data/checkpoints/not-built-ee")
    with pytest.raises(FileNotFoundError, match="make models-ee"):
        p.model("ee")
    with pytest.raises(ValueError, match="no ee model"):
        presets.get("xsum-t5").model("ee")


def test_early_exit_model_card_measures_every_exit(tmp_path, multi30k_dir):
    import json

    from bildlib.bench import models as measured
    from bildlib.reports import modelcard

    save_tiny(tiny_t5(), tmp_path / "multi30k-ee")
    cfg = {"exits": "ee", "exit_layer": 1, "optimizer": "adafactor", "lr": 0.01, "n_val": 300}
    mach = {"processor": "x86_64", "threads": 2, "cuda": None}
    log = {"command": "python -m bildlib.train multi30k-ee", "wall_s": 60.0, "machine": mach, "config": cfg,
           "best": {"epoch": 1, "val_bleu": 1.0}, "epochs": [{"epoch": 1}]}  # fmt: skip
    (tmp_path / "multi30k-ee" / "train_log.json").write_text(json.dumps(log))
    m = measured.measure_ee("multi30k-ee", n=4, threads=1, folder=tmp_path)
    assert sorted(m["exits"]) == list(range(1, LAYERS + 1)) and m["n_val"] == 4
    assert all(e["ms_per_token"] > 0 and 0 <= e["bleu"] <= 100 for e in m["exits"].values())
    text = modelcard.card("ee", m)
    assert "½(L_1 + L_4)" in text and f"| {LAYERS} (full model) |" in text
    with pytest.raises(FileNotFoundError, match="make models-ee"):
        measured.measure_ee("multi30k-calm", folder=tmp_path)


def test_models_load_more_after_the_early_exit_views(ckpt):
    """Models keeps the views apart from its (model, engine) table: every later get() still works."""
    import dataclasses

    from bildlib.experiments import Models, presets

    m = Models(dataclasses.replace(presets.get("multi30k"), ee=str(ckpt), calm=str(ckpt)), engine="auto")
    small, large = m.views()
    assert m.views() == (small, large) and small.impl.s is large.impl.s
    assert m.get("calm", "hf").engine == "hf" and m.get("ee", "hf").model is large.model
    assert m.dtype("ee") == large.model.dtype
