"""Word-level knowledge distillation (Hinton et al. 2015; for translation, Kim & Rush 2016): the
small model learns the large model's next-token distribution at every target position, beside
the usual cross-entropy on the targets.

    loss = (1 - λ) CE(y, p_S) + λ T² KL(p_L^T ‖ p_S^T)

p^T is a softmax at temperature T; T² keeps the KL term's gradients at the scale of the CE's
as T grows (Hinton et al., §2). The teacher is teacher-forced on the same targets as the
student, in the training loop; its logits are not cached (on the shipped pair that doubles an
epoch of the small shape: docs/data-and-models.md, Students). On the alignment set (the large
model's greedy outputs, `train.align`) the CE term is sequence-level distillation and the KL
term word-level: BiLD needs the small model's argmax to be the large one's, and its max
probability to say when.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def check(lam: float, temperature: float) -> None:
    """A clear error for a λ outside [0, 1] or a temperature that is not positive."""
    if not isinstance(lam, int | float) or not 0 <= lam <= 1:
        raise ValueError(f"kd_lambda must be a number in [0, 1], got {lam!r}")
    if not isinstance(temperature, int | float) or not temperature > 0:
        raise ValueError(f"kd_temperature must be a number > 0, got {temperature!r}")


def kl(student: torch.Tensor, teacher: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """KL(p_teacher ‖ p_student) at `temperature`, per row: logits (N, V) -> (N,), in float32."""
    log_s = F.log_softmax(student.float() / temperature, -1)  # (N, V)
    log_t = F.log_softmax(teacher.float() / temperature, -1)
    return (log_t.exp() * (log_t - log_s)).sum(-1)  # 0 where they agree; logits must be finite


def kd_loss(student: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, lam: float,
            temperature: float = 1.0, label_smoothing: float = 0.0) -> torch.Tensor:  # fmt: skip
    """(1 - λ) CE + λ T² KL over the target positions: logits (B, n, V) of the student and the
    teacher on the same inputs, labels (B, n) with -100 at padding. Both terms are means over
    the positions that are not padding."""
    check(lam, temperature)
    if student.shape != teacher.shape:
        raise ValueError(f"student logits {tuple(student.shape)} and teacher logits {tuple(teacher.shape)} "
                         "differ: the two models need the same tokenizer and the same targets")  # fmt: skip
    ce = F.cross_entropy(student.float().flatten(0, 1), labels.flatten(), ignore_index=-100,
                         label_smoothing=label_smoothing)  # fmt: skip
    if lam == 0:
        return ce
    keep = labels != -100  # (B, n)
    d = kl(student[keep], teacher[keep], temperature).mean()
    return (1 - lam) * ce + lam * temperature**2 * d
