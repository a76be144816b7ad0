"""The decoders a user would pick instead of ours, run as Hugging Face runs them: `generate`
(greedy, the large model alone) and assisted generation (Leviathan-style drafts from a small
model, greedy: lossless). Both use the HF model inside an LM, whatever its engine."""

from __future__ import annotations

import torch

from bildlib.decoding.common import check_count, check_threshold
from bildlib.decoding.trace import Trace
from bildlib.models.lm import check_pair, check_source

# transformers' own defaults (GenerationConfig): 20 drafts, a constant schedule, threshold 0.4
ASSISTED_DEFAULTS = {"num_assistant_tokens": 20, "assistant_confidence_threshold": 0.4}


def _generate(model, x: torch.Tensor, max_new_tokens: int, **kw) -> list[int]:
    eos = model.tok.eos_token_id
    out = model.model.generate(
        x, do_sample=False, num_beams=1, max_new_tokens=max_new_tokens, eos_token_id=eos,
        pad_token_id=model.tok.pad_token_id, **kw,
    )[0].tolist()  # fmt: skip
    out = out[1:] if model.is_encoder_decoder else out[x.shape[1] :]
    return out[: out.index(eos) + 1] if eos in out else out


@torch.inference_mode()
def hf_generate(model, source_ids, max_new_tokens: int = 128) -> tuple[list[int], Trace]:
    """`model.generate` greedy. The Trace has the tokens (all "L"); HF runs one call per token."""
    check_count("max_new_tokens", max_new_tokens)
    x = check_source(source_ids, model.vocab, model.max_source, model.name).to(model.device)
    out = _generate(model, x, max_new_tokens)
    tr = Trace(source=["L"] * len(out), large_calls=len(out))
    return out, tr


@torch.inference_mode()
def hf_assisted(
    small,
    large,
    source_ids,
    num_assistant_tokens: int | None = None,
    assistant_confidence_threshold: float | None = None,
    max_new_tokens: int = 128,
) -> tuple[list[int], Trace]:
    """`large.generate(assistant_model=small)`, greedy, with a constant schedule of
    num_assistant_tokens drafts that stop early below assistant_confidence_threshold (None:
    transformers' defaults, ASSISTED_DEFAULTS; set afresh on every call, so no state carries from
    one example to the next). The Trace has the tokens only (HF does not report its calls)."""
    check_count("max_new_tokens", max_new_tokens)
    n = ASSISTED_DEFAULTS["num_assistant_tokens"] if num_assistant_tokens is None else num_assistant_tokens
    c = assistant_confidence_threshold
    c = ASSISTED_DEFAULTS["assistant_confidence_threshold"] if c is None else c
    check_count("num_assistant_tokens", n)
    check_threshold("assistant_confidence_threshold", c, 0, 1)
    check_pair(small, large)
    gc = small.model.generation_config
    gc.num_assistant_tokens, gc.assistant_confidence_threshold = n, c
    gc.num_assistant_tokens_schedule = "constant"
    x = check_source(source_ids, large.vocab, large.max_source, large.name).to(large.device)
    out = _generate(large, x, max_new_tokens, assistant_model=small.model)
    return out, Trace(source=["L"] * len(out))
