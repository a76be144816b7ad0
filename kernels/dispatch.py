"""Where each kernel runs: the Triton kernel for CUDA tensors when Triton is installed, its torch
reference (reference.py) otherwise. The package bildlib.kernels re-exports these."""

import torch

try:  # Triton is optional: without it every function runs its torch reference
    from . import triton_attention, triton_lut, triton_policy, triton_rowinv

    HAS_TRITON = True
except ImportError:
    triton_policy = triton_lut = triton_rowinv = triton_attention = None
    HAS_TRITON = False

from . import reference as ref
from .reference import argmax_rows as argmax  # noqa: F401 - numpy's on a CPU, torch's elsewhere
from .reference import nucleus_ref as nucleus  # noqa: F401 - a sort; no kernel of ours beats torch.sort here
from .reference import saturation_ref as saturation  # noqa: F401 - one d-long dot product: torch's is enough


def _triton(*xs: torch.Tensor) -> bool:
    """Triton for CUDA tensors when it is installed; the torch reference otherwise."""
    return HAS_TRITON and all(x.is_cuda for x in xs)


def _native(x: torch.Tensor):
    """The native engine's module (bildlib.kernels.cpu) for logits x on a CPU in float32 or bf16,
    where a native engine loaded it in this process, else None (the torch reference): its policy
    reductions (cpu_policy.h) are the ones the native draft loop runs, so bild()'s Python loop and
    the C++ one read the same confidence bits. Never a build: a process with no native engine (a
    grading sandbox, the lean or hf engine alone) keeps torch's reductions."""
    if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.bfloat16) or x.dim() != 2:
        return None
    if not x.shape[1]:
        return None
    from . import cpu

    return cpu.loaded()


def max_prob(logits: torch.Tensor, margin: bool = False):
    """(max softmax probability (k,), argmax (k,)) of logits (k, V); with margin=True also
    top1 - top2 probability (k,), CALM's softmax confidence, from the same pass."""
    if _triton(logits):
        p, idx, m = triton_policy.max_prob(logits)
        return (p, idx, m) if margin else (p, idx)
    if not margin and (mod := _native(logits)) is not None:
        return mod.max_prob(logits.detach().contiguous())
    return ref.max_prob_ref(logits, margin)


def rollback_distance(logits: torch.Tensor, tokens: torch.Tensor):
    """(-log p(tokens) (k,), argmax (k,)) per row of logits (k, V): BiLD's rollback distance."""
    if _triton(logits, tokens):
        return triton_policy.rollback_distance(logits, tokens)
    if (mod := _native(logits)) is not None and logits.shape[:-1] == tokens.shape:
        return mod.rollback_distance(logits.detach().contiguous(), tokens.long().cpu())
    return ref.rollback_distance_ref(logits, tokens)


def sample(logits: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """One token per row of logits (k, V), by inverse CDF at uniforms (k,) in [0, 1)."""
    if _triton(logits, uniforms):
        return triton_policy.sample(logits, uniforms)
    return ref.sample_ref(logits, uniforms)


def speculative_accept(logits_large, logits_small, draft, uniforms):
    """Speculative sampling's acceptance step: (n accepted, next token); see reference.py."""
    if _triton(logits_large, logits_small, draft, uniforms):
        return triton_policy.speculative_accept(logits_large, logits_small, draft, uniforms)
    return ref.speculative_accept_ref(logits_large, logits_small, draft, uniforms)


def lut_matvec(x, packed, table, n, sparse_idx=None, sparse_val=None):
    """x (k, n) @ W^T (k, out) float32 for a SqueezeLLM weight: nibble codes into per-row
    tables, plus a sparse part (reference.lut_matvec_ref)."""
    if _triton(x, packed, table):
        return triton_lut.lut_matvec(x, packed, table, n, sparse_idx, sparse_val)
    return ref.lut_matvec_ref(x, packed, table, n, sparse_idx, sparse_val)


# The static engine's step (models.static_t5): row-invariant kernels on a GPU, whose result a
# row has alone or among up to 16 (triton_rowinv); their torch references elsewhere.
def mm(x, w, epilogue: str = "none", other=None, norm=None, eps: float = 1e-6, scale: float = 1.0):
    """x (M, K) @ w (N, K)^T times scale, with an epilogue ("add" / "mul" other, "relu",
    "gelu_tanh"); norm (K,): of T5's RMS norm of x by norm, fused (reference.mm_ref)."""
    if _triton(x, w):
        return triton_rowinv.mm(x, w, epilogue, other, norm=norm, eps=eps, scale=scale)
    return ref.mm_ref(x, w, epilogue, other, norm, eps, scale)


def rms_norm(x, w, eps: float):
    """T5's RMS norm of each row of x (M, K) by w (K,)."""
    if _triton(x, w):
        return triton_rowinv.rms_norm(x, w, eps)
    return ref.rms_norm_ref(x, w, eps)


def attention(q, k, v, pos, n_keys=None, bias=None):
    """q (H, M, dh) at positions pos + [0, M) over k, v (H, T, dh): causal, or over n_keys."""
    if _triton(q, k, v):
        return triton_attention.attention(q, k, v, pos, n_keys, bias)
    return ref.attention_ref(q, k, v, pos, n_keys, bias)
