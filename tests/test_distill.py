"""bildlib.train.distill: the KD loss against a KL computed by hand, on two numbers and on a tiny
model; bad settings; and a distillation run that moves the student toward its teacher and
resumes to the same weights."""

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from bildlib import train as T
from bildlib.models import load_tokenizer
from bildlib.train import distill
from test_train import killed_in_epoch_2_then_rerun, tiny


def test_kl_of_two_tokens_by_hand():
    s, t = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(3), 0.0]])  # p_S (1/2, 1/2), p_L (3/4, 1/4)
    assert distill.kl(s, t).item() == pytest.approx(0.75 * math.log(1.5) + 0.25 * math.log(0.5), rel=1e-6)
    r = math.sqrt(3)  # at T = 2: p_L = (√3, 1) / (1 + √3); p_S stays uniform
    p = [r / (1 + r), 1 / (1 + r)]
    assert distill.kl(s, t, 2.0).item() == pytest.approx(sum(x * math.log(x / 0.5) for x in p), rel=1e-6)
    assert distill.kl(t, t).item() == pytest.approx(0.0, abs=1e-7)


def _by_hand(student, teacher, labels, lam, temperature):
    """(1 - λ) CE + λ T² KL as sums over Python floats, position by position."""
    kl, ce, n = 0.0, 0.0, 0
    for b, i in zip(*torch.nonzero(labels != -100, as_tuple=True), strict=True):
        s, t = student[b, i].double().tolist(), teacher[b, i].double().tolist()
        log_z = lambda x, k: math.log(sum(math.exp(v / k) for v in x))  # noqa: E731
        zs, zt = log_z(s, temperature), log_z(t, temperature)
        for sv, tv in zip(s, t, strict=True):
            lp, lq = tv / temperature - zt, sv / temperature - zs
            kl += math.exp(lp) * (lp - lq)
        ce += log_z(s, 1.0) - s[labels[b, i]]
        n += 1
    return (1 - lam) * ce / n + lam * temperature**2 * kl / n


def test_kd_loss_on_a_tiny_model_against_a_hand_computed_kl(tmp_path, multi30k_dir):
    tok = load_tokenizer(T.checkpoint_path(T.TrainConfig.tokenizer))
    student = T.build_model(tiny(tmp_path), tok).eval()
    teacher = T.build_model(tiny(tmp_path, seed=1), tok).eval()
    pairs = T.data.load_multi30k("val").pairs[:3]
    src, tgt = T.encode(tok, pairs)
    batch = T.collate(src, tgt, [0, 1, 2], "cpu")  # three lengths: padded positions in the labels
    assert (batch["labels"] == -100).any()
    with torch.no_grad():
        s, t = student(**batch).logits, teacher(**batch).logits  # (3, n, V)
    for lam, temp in [(0.5, 1.0), (0.8, 2.0), (1.0, 0.5)]:
        got = distill.kd_loss(s, t, batch["labels"], lam, temp).item()
        assert got == pytest.approx(_by_hand(s, t, batch["labels"], lam, temp), rel=1e-4), (lam, temp)
    ce = F.cross_entropy(s.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    assert distill.kd_loss(s, t, batch["labels"], 0.0).item() == ce.item()
    assert distill.kd_loss(s, s, batch["labels"], 0.5).item() == pytest.approx(0.5 * ce.item(), rel=1e-6)
    pad = batch["labels"] == -100  # the teacher's logits where the labels are padding do not count
    junk = t.masked_fill(pad.unsqueeze(-1), 0.0) + pad.unsqueeze(-1) * torch.randn_like(t) * 50
    assert distill.kd_loss(s, junk, batch["labels"], 0.7, 2.0).item() == pytest.approx(
        distill.kd_loss(s, t, batch["labels"], 0.7, 2.0).item(), rel=1e-6
    )


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("kd_lambda", 1.5, r"kd_lambda must be a number in \[0, 1\], got 1.5"),
        ("kd_lambda", -0.1, r"kd_lambda must be a number in \[0, 1\]"),
        ("kd_temperature", 0.0, "kd_temperature must be a number > 0, got 0.0"),
        ("kd_temperature", -1, "kd_temperature must be a number > 0"),
        ("kd_temperature", "2", "kd_temperature must be a number > 0"),
    ],
)
def test_bad_distillation_settings_name_the_parameter(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        tiny(tmp_path, teacher="data/checkpoints/multi30k-large", **{field: value}).validate()


def test_distillation_refuses_what_it_does_not_do(tmp_path, multi30k_dir):
    with pytest.raises(ValueError, match="teacher: distillation trains a model without exits"):
        tiny(tmp_path, teacher="data/checkpoints/multi30k-large", exits="ee").validate()
    lm = dict(arch="gpt2", model={"n_layer": 1}, teacher="data/checkpoints/multi30k-lm-large")
    for bad in ({"teacher_topk": 8}, {"pet_warmup_epochs": 1}):
        with pytest.raises(ValueError, match="arch 'gpt2' distils from its teacher in the loop"):
            tiny(tmp_path, **lm, **bad).validate()
    with pytest.raises(FileNotFoundError, match="teacher: cannot load model .*nope"):
        T.train(tiny(tmp_path, teacher=str(tmp_path / "nope")), progress=False)
    s = torch.zeros(1, 2, 5)
    with pytest.raises(ValueError, match="need the same tokenizer"):
        distill.kd_loss(s, torch.zeros(1, 2, 6), torch.zeros(1, 2, dtype=torch.long), 0.5)


def _kl_to(teacher_dir, student_dir, n=16):
    """Mean KL(teacher ‖ student) per target token on the first n val pairs (the references)."""
    from bildlib.models import load_model

    (s, tok), (t, _) = load_model(student_dir, dtype="float32"), load_model(teacher_dir, dtype="float32")
    src, tgt = T.encode(tok, T.data.load_multi30k("val").pairs[:n])
    batch = T.collate(src, tgt, list(range(n)), "cpu")
    with torch.no_grad():
        keep = batch["labels"] != -100
        return distill.kl(s(**batch).logits[keep], t(**batch).logits[keep]).mean().item()


def test_distillation_moves_the_student_toward_its_teacher(tmp_path, multi30k_dir, monkeypatch):
    """Same init, data and steps; λ = 1 (the teacher's distributions only) against λ = 0 (the
    references only): the distilled student ends nearer its teacher (0.78 against 0.93 nats a
    token here; a KL term ignored or of the wrong sign would leave it at or beyond the other)."""
    teacher = tiny(tmp_path, "teacher", epochs=3)
    T.train(teacher, progress=False)
    kd = tiny(tmp_path, "kd", seed=2, teacher=teacher.out, kd_lambda=1.0, kd_temperature=2.0)
    log = T.train(kd, progress=False)
    assert log["config"]["teacher"] == teacher.out and len(log["epochs"]) == 2
    plain = T.train(dataclasses.replace(kd, out=str(tmp_path / "plain"), teacher=None), progress=False)
    assert plain["config"]["teacher"] is None
    assert _kl_to(teacher.out, kd.out) < 0.9 * _kl_to(teacher.out, str(tmp_path / "plain"))

    # killed in epoch 2's validation, then run again: the same weights as the run never stopped
    cut = dataclasses.replace(kd, out=str(tmp_path / "cut"))
    assert [e["epoch"] for e in killed_in_epoch_2_then_rerun(cut, monkeypatch)["epochs"]] == [1, 2]
    a, b = load_file(f"{kd.out}/model.safetensors"), load_file(f"{cut.out}/model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_student_is_a_third_small_model_of_the_preset(tmp_path):
    """multi30k's student (make models-student) runs where the small and aligned models do; a
    missing one says how to build it, and a paper preset has none."""
    from bildlib import experiments as X
    from bildlib.experiments import presets
    from bildlib.experiments.runner import with_checkpoints

    p = dataclasses.replace(presets.get("multi30k"), student="data/checkpoints/not-built-student")
    with pytest.raises(FileNotFoundError, match="`make models-student` trains it"):
        p.model("student")
    with pytest.raises(ValueError, match=r"no student model \(students are trained for multi30k\)"):
        presets.get("xsum-t5").model("student")
    grid = X.bild_grid("multi30k", models=("aligned", "student"), fallbacks=[0.5], rollbacks=[1.0])
    assert [c.label for c in grid] == ["bild-aligned-fb0.5-rb1.0", "bild-student-fb0.5-rb1.0"]
    assert with_checkpoints(p, {"student": "elsewhere"}).student == "elsewhere"  # found when used
    with pytest.raises(ValueError, match="needs a small model"):
        X.bild("large", 0.5, 1.0)
