"""Torch references for the policy reductions; fp32 accumulation for any input dtype."""

import torch


def max_prob_ref(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Max softmax probability and argmax of each row of logits (k, V), without a softmax tensor."""
    x = logits.float()
    m, idx = x.max(dim=-1)  # (k,), first maximum on ties like torch.argmax
    return torch.exp(m - torch.logsumexp(x, dim=-1)), idx


def rollback_distance_ref(logits: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """BiLD's rollback distance -log p(tokens) per row of logits (k, V), and the rows' argmax."""
    if logits.shape[:-1] != tokens.shape:
        raise ValueError(f"tokens has shape {tuple(tokens.shape)}, expected {tuple(logits.shape[:-1])}")
    x = logits.float()
    picked = x.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1)  # (k,)
    return torch.logsumexp(x, dim=-1) - picked, x.argmax(dim=-1)
