"""Weights as the engines read them: float32 linears stored column-major on a CPU, and linears that
read the same input fused into one matrix, the HF model's own parameters becoming views of it (no
weight held twice)."""

from __future__ import annotations

import torch


def column_major(model: torch.nn.Module) -> int:
    """Store every nn.Linear weight (out, in) of `model` column-major, as the contiguous (in, out)
    matrix viewed transposed; returns how many it moved. Values, shapes and the HF model's own
    forward are unchanged, but F.linear(x, w) then multiplies x @ (in, out) without a transposed
    operand, which on a CPU in float32 reads weights that sit in memory 25-45 % faster at one or
    a few rows (docs/engines-cpu.md, *Anatomy of a step*). A weight already column-major is left (a
    second call moves nothing); tied weights move once, with their embedding. Only float32
    weights on a CPU move: elsewhere (bf16, CUDA) HF's layout stays."""
    moved = 0
    with torch.no_grad():
        for m in model.modules():
            w = getattr(m, "weight", None)
            if not isinstance(m, torch.nn.Linear) or w is None or w.dim() != 2 or not w.is_contiguous():
                continue
            if w.device.type != "cpu" or w.dtype != torch.float32 or w.t().is_contiguous():
                continue  # HF's layout stays; a (n, 1) or (1, n) weight is both layouts
            w.data = w.t().contiguous().t()
            moved += 1
    return moved


def fuse(*lins: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One (sum of outs, in) weight (and bias) for linears that read the same input, in the
    linears' layout (column-major when the first is, see column_major). The HF
    linears' parameters become views of it, so the weights stay held once and the HF model keeps
    working; fusing the same linears again returns the same tensors, unless the model was moved
    or cast since (model.to() gives the linears new tensors: the old fused one is stale). The
    linears' int8 codes, if they have them, are fused likewise (_int8)."""
    done = getattr(lins[0], "_bild_fused", None)
    if done is not None and done[0].shape[0] == sum(m.weight.shape[0] for m in lins):
        w0 = lins[0].weight
        same = done[0].untyped_storage().data_ptr() == w0.untyped_storage().data_ptr()
        if same and done[0].dtype == w0.dtype:
            return _int8(done, lins)
    with torch.no_grad():
        w0 = lins[0].weight
        if not w0.is_contiguous() and w0.t().is_contiguous():  # column-major: (in, sum of outs)
            w = torch.cat([m.weight.t() for m in lins], 1).t()
        else:
            w = torch.cat([m.weight for m in lins])
        b = torch.cat([m.bias for m in lins]) if lins[0].bias is not None else None
        o = 0
        for m in lins:
            n = m.weight.shape[0]
            m.weight.data = w[o : o + n]
            if b is not None:
                m.bias.data = b[o : o + n]
            o += n
    lins[0]._bild_fused = (w, b)
    return _int8((w, b), lins)


def _int8(fused: tuple, lins) -> tuple:
    """The fused weight keeps the linears' int8 codes and scales too, concatenated as the weights
    are, when every one has them (an int8 checkpoint: models.load.keep_int8; models.linear.Int8)."""
    parts = [getattr(m.weight, "_bild_int8", None) for m in lins]
    if all(p is not None for p in parts):
        fused[0]._bild_int8 = (torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts]))
    elif hasattr(fused[0], "_bild_int8"):  # the weights were written since (quant.model.put)
        del fused[0]._bild_int8
    return fused
