"""train.warmup: PET's four-class warm-up task, labelled by a fake teacher with known probabilities,
at the ε boundaries; the student's four probabilities and the loss by hand; bad settings."""

import math

import pytest
import torch

from bildlib.train import warmup as W
from test_train import tiny

P = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.6, 0.2, 0.1], [0.25, 0.25, 0.25, 0.25]]).clamp_min(1e-9)
TEACHER = P.log().unsqueeze(0)  # (1, 3, 4): max p 0.5 at 0, 0.6 at 1, then a padded position
LABELS = torch.tensor([[0, 2, -100]])  # right at position 0, wrong at 1 (the teacher says 1)


def test_classes_at_the_boundaries():
    p_max = TEACHER.softmax(-1).max(-1).values[0]  # as classes() computes them
    right, wrong = p_max[0].item(), p_max[1].item()
    one = torch.tensor(2.0)  # the next float32 up: the probabilities and thresholds compare in float32
    above = lambda x: torch.nextafter(torch.tensor(x), one).item()  # noqa: E731
    for eps_c, eps_w, want in [
        (right, wrong, [0, 2]),  # at ε: confident
        (above(right), wrong, [1, 2]),  # just above the teacher's max p: unsure where it is right
        (right, above(wrong), [0, 3]),  # and where it is wrong
        (above(right), above(wrong), [1, 3]),
        (1.0, 1e-6, [1, 2]),  # each threshold reads only its own positions
    ]:
        c = W.classes(TEACHER, LABELS, eps_c, eps_w)
        assert c[0].tolist() == want + [-100], (eps_c, eps_w)


def test_the_students_four_probabilities_and_the_loss_by_hand():
    q = torch.tensor([[[0.7, 0.1, 0.1, 0.1], [0.2, 0.2, 0.4, 0.2], [0.25] * 4]])
    logp = W.class_log_probs(q.log(), LABELS)[0]  # (3, 4)
    right, sure = [0.7, 0.4], [0.7, 0.4]  # p_S(label), max p_S at the two positions
    for i in range(2):
        r, s = right[i], sure[i]
        want = [r * s, r * (1 - s), (1 - r) * s, (1 - r) * (1 - s)]
        assert logp[i].exp().tolist() == pytest.approx(want, rel=1e-5)
        assert logp[i].exp().sum().item() == pytest.approx(1.0, rel=1e-6)
    c = W.classes(TEACHER, LABELS, 0.5, 0.5)  # [0, 2]
    by_hand = -(math.log(0.7 * 0.7) + math.log(0.6 * 0.4)) / 2
    assert W.loss(q.log(), TEACHER, LABELS, 0.5, 0.5).item() == pytest.approx(by_hand, rel=1e-5)
    assert c[0, :2].tolist() == [0, 2]


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"warmup_eps_correct": 0.0}, r"warmup_eps_correct must be a number in \(0, 1\], got 0.0"),
        ({"warmup_eps_wrong": 1.5}, r"warmup_eps_wrong must be a number in \(0, 1\]"),
        ({"pet_warmup_epochs": 2}, r"pet_warmup_epochs must be an integer in \[0, epochs\), got 2"),
        ({"pet_warmup_epochs": 1, "teacher": None}, "the warm-up task is labelled by a teacher"),
    ],
)
def test_bad_warmup_settings_name_the_parameter(tmp_path, kw, match):
    cfg = tiny(tmp_path, **({"teacher": "data/checkpoints/multi30k-large"} | kw))
    with pytest.raises(ValueError, match=match):
        cfg.validate()


def test_a_run_warms_up_then_distils(tmp_path, multi30k_dir, monkeypatch):
    """Epoch 1 trains the four-class task, epoch 2 the KD loss: each called on its epoch only."""
    from bildlib import train as T
    from bildlib.train import loop

    teacher = tiny(tmp_path, "teacher", n_train=16, epochs=1)
    T.train(teacher, progress=False)
    seen = []
    for mod, name in ((loop.warmup, "loss"), (loop.distill, "kd_loss")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _r=real, _n=name, **k: seen.append(_n) or _r(*a, **k))
    cfg = tiny(tmp_path, "pet", n_train=16, teacher=teacher.out, pet_warmup_epochs=1)
    log = T.train(cfg, progress=False)
    per_epoch = len(seen) // 2
    assert seen == ["loss"] * per_epoch + ["kd_loss"] * per_epoch and len(log["epochs"]) == 2
