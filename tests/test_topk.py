"""train.topk: the teacher's cached top k, against the teacher's own log-probabilities on a tiny
model; the losses it feeds; and a distillation run that computes the cache once and reuses it."""

import dataclasses

import pytest
import torch

from bildlib import train as T
from bildlib.models import load_tokenizer
from bildlib.train import distill, topk, warmup
from test_train import tiny


@pytest.fixture(scope="module")
def tiny_batch(tmp_path_factory, multi30k_dir):
    tmp = tmp_path_factory.mktemp("topk")
    tok = load_tokenizer(T.checkpoint_path(T.TrainConfig.tokenizer))
    student = T.build_model(tiny(tmp), tok).eval()
    teacher = T.build_model(tiny(tmp, seed=1), tok).eval()
    src, tgt = T.encode(tok, T.data.load_multi30k("val").pairs[:5])
    return student, teacher, src, tgt


def test_all_of_the_vocabulary_is_the_teachers_distribution(tiny_batch):
    student, teacher, src, tgt = tiny_batch
    V = teacher.config.vocab_size
    full = topk.compute(teacher, src, tgt, V, bf16=False, progress=False)
    idx = [3, 0, 4]  # out of order, three lengths
    batch = T.collate(src, tgt, idx, "cpu")
    with torch.no_grad():
        logits, s = teacher(**batch).logits, student(**batch).logits
    keep = batch["labels"] != -100
    got = full.dense(idx, batch["labels"].shape)
    assert torch.allclose(got[keep], logits.log_softmax(-1)[keep], atol=1e-5)
    assert (got[~keep] == 0).all()
    for lam, temp in [(0.5, 1.0), (1.0, 2.0)]:
        a, b = (distill.kd_loss(s, t, batch["labels"], lam, temp).item() for t in (got, logits))
        assert a == pytest.approx(b, rel=1e-5)


def test_top_k_keeps_the_argmax_max_p_and_the_mass(tiny_batch):
    _, teacher, src, tgt = tiny_batch
    small = topk.compute(teacher, src, tgt, 4, bf16=False, progress=False)
    assert small.ids.dtype == torch.int16 and small.ids.shape == (sum(map(len, tgt)), 4)
    idx = [1, 2]
    batch = T.collate(src, tgt, idx, "cpu")
    with torch.no_grad():
        ref = teacher(**batch).logits.log_softmax(-1)  # (B, n, V)
    got = small.dense(idx, batch["labels"].shape)
    keep = batch["labels"] != -100
    assert torch.allclose(got[keep].exp().sum(-1), torch.ones(int(keep.sum())), atol=1e-5)  # a distribution
    assert torch.equal(got[keep].argmax(-1), ref[keep].argmax(-1))
    assert torch.allclose(got[keep].max(-1).values, ref[keep].max(-1).values, atol=1e-6)
    top4 = ref[keep].topk(4, -1).values
    assert torch.allclose(got[keep].topk(4, -1).values, top4, atol=1e-6)  # the top 4 exact
    # the tail: the mass left over, evenly; warm-up classes read only argmax and max p
    lab = batch["labels"]
    assert torch.equal(warmup.classes(got, lab, 0.3, 0.3), warmup.classes(ref, lab, 0.3, 0.3))
    with pytest.raises(ValueError, match=r"teacher_topk must be in \[1, 8000\]"):
        topk.compute(teacher, src, tgt, 0)


def test_a_cached_run_computes_the_teacher_once(tmp_path, multi30k_dir, monkeypatch):
    teacher = tiny(tmp_path, "teacher", epochs=1)
    T.train(teacher, progress=False)
    monkeypatch.setattr(topk, "CACHE_DIR", tmp_path / "cache")
    calls = []
    real = topk.compute
    monkeypatch.setattr(topk, "compute", lambda *a, **k: calls.append(1) or real(*a, **k))
    kd = tiny(tmp_path, "kd", epochs=1, teacher=teacher.out, teacher_topk=16)
    log = T.train(kd, progress=False)
    assert log["config"]["teacher_topk"] == 16 and len(calls) == 1
    assert len(list((tmp_path / "cache").glob("top16-*.pt"))) == 1
    T.train(dataclasses.replace(kd, out=str(tmp_path / "again")), progress=False)
    assert len(calls) == 1  # the second student read the cache

    # its card (make models-student writes one for the shipped student): what BiLD asks of it
    from bildlib.bench import models as measured
    from bildlib.reports import modelcard

    m = measured.measure_student(kd.out, n=3, rounds=1)
    text = modelcard.card("student", m)
    assert m["profile"]["positions"] > 3 and 0 <= m["profile"]["agreement"] <= 1
    assert f"**{m['val']['bleu']:.2f}**" in text and "teacher top-k 16" in text
    assert f"{m['step_ms']['student_bfloat16']:.3f} ms bf16" in text
    with pytest.raises(ValueError, match="teacher_topk caches a teacher's outputs: give teacher"):
        T.train(dataclasses.replace(kd, teacher=None), progress=False)
    with pytest.raises(ValueError, match="teacher_topk must be an integer >= 0, got -1"):
        T.train(dataclasses.replace(kd, teacher_topk=-1), progress=False)
