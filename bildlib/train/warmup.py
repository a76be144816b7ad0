"""PET's warm-up on a simplified task (Jeon et al., PLoS ONE 2023), before knowledge distillation.

Each target position gets one of four classes from the teacher's prediction there:

    0 confidently correct   argmax p_L = label, max p_L >= ε_correct
    1 correct, unsure       argmax p_L = label, max p_L <  ε_correct
    2 confidently wrong     argmax p_L != label, max p_L >= ε_wrong
    3 wrong, unsure         argmax p_L != label, max p_L <  ε_wrong

The student keeps its vocabulary-sized output. Its four-class probabilities take P(correct) =
p_S(label) and P(confident) = max p_S as independent, and the loss is the cross-entropy of the
teacher's class under them. The task teaches the student where the teacher is right and how sure
it is, which is what BiLD asks of a small model's max probability.
"""

from __future__ import annotations

import torch


def check(eps_correct: float, eps_wrong: float) -> None:
    for name, v in (("warmup_eps_correct", eps_correct), ("warmup_eps_wrong", eps_wrong)):
        if not isinstance(v, int | float) or not 0 < v <= 1:
            raise ValueError(f"{name} must be a number in (0, 1], got {v!r}")


def classes(teacher: torch.Tensor, labels: torch.Tensor, eps_correct: float, eps_wrong: float):
    """The teacher's class (0-3, module docstring) at each position: logits (B, n, V), labels
    (B, n) with -100 at padding, where the class is -100 too."""
    check(eps_correct, eps_wrong)
    p_max, top = teacher.float().softmax(-1).max(-1)  # (B, n)
    correct = top == labels
    confident = torch.where(correct, p_max >= eps_correct, p_max >= eps_wrong)
    c = 2 * (~correct).long() + (~confident).long()
    return c.masked_fill(labels == -100, -100)


def class_log_probs(student: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log P of the four classes under the student (B, n, 4), from P(correct) = p_S(label) and
    P(confident) = max p_S taken as independent; padded positions read label 0 (ignored later)."""
    p = student.float().softmax(-1)  # (B, n, V)
    right = p.gather(-1, labels.clamp_min(0).unsqueeze(-1)).squeeze(-1)  # (B, n)
    sure = p.max(-1).values
    four = torch.stack([right * sure, right * (1 - sure), (1 - right) * sure, (1 - right) * (1 - sure)], -1)
    return four.clamp_min(1e-12).log()


def loss(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, eps_correct: float = 0.5,
         eps_wrong: float = 0.5) -> torch.Tensor:  # fmt: skip
    """Mean cross-entropy of the teacher's classes under the student's, over non-padding positions."""
    c = classes(teacher, labels, eps_correct, eps_wrong)
    logp = class_log_probs(student, labels).flatten(0, 1)  # (B n, 4)
    return torch.nn.functional.nll_loss(logp, c.flatten(), ignore_index=-100)
