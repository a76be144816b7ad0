"""How a decoder picks tokens: greedy, or nucleus sampling with a seed."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from bildlib import kernels


@dataclass(frozen=True)
class Sampling:
    """Nucleus sampling (temperature, top-p) with a seed; temperature 0 is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0

    def __post_init__(self):
        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature)):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not (isinstance(self.top_p, int | float) and 0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")


class Policy:
    """Greedy or nucleus sampling over rows of logits, with one generator per decode."""

    def __init__(self, sampling: Sampling | None, device: torch.device):
        self.s = sampling
        self.g = None
        if sampling is not None and sampling.temperature > 0:
            self.g = torch.Generator(device=device).manual_seed(sampling.seed)

    @property
    def greedy(self) -> bool:
        return self.g is None

    def scaled(self, logits: torch.Tensor) -> torch.Tensor:
        """Logits of the distribution the models sample from, before the top-p cut (confidence,
        distance)."""
        if self.s is None or self.s.temperature in (0, 1):
            return logits
        return logits.float() / self.s.temperature

    def filtered(self, scaled: torch.Tensor) -> torch.Tensor:
        """(k, V) scaled logits with the nucleus kept (greedy: the argmax) and the rest at -inf."""
        if self.greedy:
            return kernels.nucleus(scaled, 0.0)
        return kernels.nucleus(scaled, 1.0, self.s.top_p)

    def uniforms(self, k: int, device) -> torch.Tensor:
        if self.greedy:
            return torch.zeros(k, device=device)
        return torch.rand(k, generator=self.g, device=device)

    def pick(self, scaled: torch.Tensor) -> torch.Tensor:
        """One token per row (k,) of scaled logits: argmax, or a draw from the nucleus."""
        if self.greedy:
            return kernels.argmax(scaled)  # the first maximum, as kernels.max_prob's index
        return kernels.sample(self.filtered(scaled), self.uniforms(scaled.shape[0], scaled.device))

    def propose(self, scaled: torch.Tensor) -> tuple[float, int]:
        """(max probability, token) of one row (1, V) of scaled logits, in one host sync: the
        small model's confidence and its token (greedy: the argmax; sampling: a draw)."""
        p, y = kernels.max_prob(scaled)
        if not self.greedy:
            y = self.pick(scaled)
        p, y = torch.cat((p, y.to(p.dtype))).tolist()
        return p, int(y)
