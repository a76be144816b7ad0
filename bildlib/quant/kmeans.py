"""Weighted k-means in one dimension, every row of a matrix at once (SqueezeLLM's centroids).

For each row r: centroids c (k,) minimising sum_j w[r, j] (x[r, j] - c[code[r, j]])^2. Lloyd's
iterations; in one dimension the nearest centroid is found by a binary search among the midpoints
of the sorted centroids. As scikit-learn's KMeans (which SqueezeLLM's code calls): seeded
k-means++ starts (each next centre drawn with probability w D^2), several of them, and per row the
run of least weighted error is kept. The first start is the weighted quantiles, deterministic.
"""

from __future__ import annotations

import torch


def assign(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """Index of the nearest centroid: x (R, n), c (R, k) sorted ascending -> (R, n) int64."""
    mid = (c[:, 1:] + c[:, :-1]) / 2  # (R, k - 1)
    return torch.searchsorted(mid.contiguous(), x.contiguous())


def weighted_quantiles(x: torch.Tensor, w: torch.Tensor, k: int) -> torch.Tensor:
    """(R, k): for each row, the values at weighted quantiles (j + 0.5) / k, ascending."""
    xs, order = x.sort(dim=1)
    cw = torch.gather(w, 1, order).cumsum(1)  # (R, n)
    total = cw[:, -1:].clamp(min=1e-30)
    q = (torch.arange(k, dtype=x.dtype, device=x.device) + 0.5) / k  # (k,)
    at = torch.searchsorted(cw / total, q.expand(x.shape[0], k).contiguous()).clamp(max=x.shape[1] - 1)
    return torch.gather(xs, 1, at)


def plus_plus(x: torch.Tensor, w: torch.Tensor, k: int, g: torch.Generator) -> torch.Tensor:
    """(R, k) k-means++ starts: the first centre drawn with probability w, each next one with
    probability w D^2 (D: the distance to the nearest centre drawn so far)."""
    R = x.shape[0]
    rows = torch.arange(R)
    c = x[rows, torch.multinomial(w.float() + 1e-30, 1, generator=g)[:, 0]].unsqueeze(1)  # (R, 1)
    for _ in range(1, k):
        d2 = (x.unsqueeze(2) - c.unsqueeze(1)).pow(2).amin(2)  # (R, n)
        p = (w * d2).float()
        p = torch.where(p.sum(1, keepdim=True) > 0, p, w.float())  # every point is a centre already
        c = torch.cat([c, x[rows, torch.multinomial(p + 1e-30, 1, generator=g)[:, 0]].unsqueeze(1)], 1)
    return c


def lloyd(x: torch.Tensor, w: torch.Tensor, c: torch.Tensor, iters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(centroids ascending, weighted squared error per row) after Lloyd's iterations from c.
    A centroid that loses every point keeps its place."""
    for _ in range(iters):
        c, _ = c.sort(dim=1)
        codes = assign(x, c)
        num = torch.zeros_like(c).scatter_add_(1, codes, w * x)
        den = torch.zeros_like(c).scatter_add_(1, codes, w)
        new = torch.where(den > 0, num / den.clamp(min=1e-300), c)
        if torch.allclose(new, c, rtol=0, atol=1e-12):
            break
        c = new
    c, _ = c.sort(dim=1)
    err = (w * (x - torch.gather(c, 1, assign(x, c))) ** 2).sum(1)  # (R,)
    return c, err


def kmeans(x: torch.Tensor, w: torch.Tensor | None, k: int, iters: int = 25, starts: int = 4,
           seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """(centroids (R, k) ascending, codes (R, n) int64) of each row of x (R, n) with weights w
    (R, n) >= 0 (None: all 1): the best of `starts` runs per row (module docstring)."""
    x = x.double()
    w = torch.ones_like(x) if w is None else w.double().clamp(min=0)
    w = torch.where(w.sum(1, keepdim=True) > 0, w, torch.ones_like(w))  # a row of zero weight: plain
    g = torch.Generator().manual_seed(seed)
    best, best_err = lloyd(x, w, weighted_quantiles(x, w, k), iters)
    for _ in range(starts - 1):
        c, err = lloyd(x, w, plus_plus(x, w, k, g), iters)
        better = (err < best_err).unsqueeze(1)
        best, best_err = torch.where(better, c, best), torch.minimum(err, best_err)
    return best.float(), assign(x, best)
