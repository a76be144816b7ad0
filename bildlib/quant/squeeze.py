"""SqueezeLLM (Kim, Hooper, Gholami et al., ICML 2024) on one weight matrix: dense-and-sparse
decomposition, then sensitivity-weighted non-uniform quantization of the dense part.

1. Sparse part: the `outliers` share of the weights largest in magnitude (over the whole matrix)
   are set aside; the dense part's range then narrows to what most weights span.
2. Dense part: per output channel, 2^bits centroids by a k-means weighted by the Fisher
   information (the squared gradients of the loss, fisher.py); the outlier positions get weight 0.
3. The sparse part stores, at the outlier positions, W minus the dense part's value there, so
   dense + sparse equals W there (to float32 rounding).
"""

from __future__ import annotations

import torch

from bildlib.quant.kmeans import kmeans
from bildlib.quant.weights import QWeight


def outlier_mask(w: torch.Tensor, share: float) -> torch.Tensor:
    """(out, in) bool: the round(share * numel) weights largest in |w|."""
    n = round(share * w.numel())
    mask = torch.zeros(w.numel(), dtype=torch.bool, device=w.device)
    if n:
        mask[w.detach().abs().reshape(-1).float().topk(n).indices] = True
    return mask.view(w.shape)


def squeeze(w: torch.Tensor, bits: int, fisher: torch.Tensor | None = None, outliers: float = 0.0,
            iters: int = 25) -> QWeight:  # fmt: skip
    """w (out, in) quantized to 2^bits centroids per row (weighted by fisher (out, in), or unweighted
    when None) with the `outliers` share kept in the sparse part."""
    x = w.detach().float()
    weight = torch.ones_like(x) if fisher is None else fisher.detach().float().clamp(min=0)
    mask = outlier_mask(x, outliers)
    weight = weight.masked_fill(mask, 0.0)
    # a row whose weights are all zero (outliers only, or no gradient) falls back to plain k-means
    empty = weight.sum(1, keepdim=True) == 0
    weight = torch.where(empty & ~mask, torch.ones_like(weight), weight)
    c, codes = kmeans(x, weight, 2**bits, iters)
    q = QWeight(codes.to(torch.uint8), c.unsqueeze(1), bits)  # table (out, 1, 2^bits)
    if mask.any():
        idx = mask.nonzero().t().contiguous()  # (2, nnz)
        q.sparse_idx, q.sparse_val = idx, x[mask] - q.dense()[mask]
    return q
