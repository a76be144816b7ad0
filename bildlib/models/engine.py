"""Engines: what runs a model's calls behind models.lm.LM. "hf" is the Hugging Face model's own
forward with its DynamicCache (the reference, and the path for every architecture); "lean" is
models.lean_t5 / models.lean_causal on the same weights; "native" (on a CPU) is a lean engine with
pieces between its weight products as C++ calls (bildlib.kernels.cpu: T5's norms, self- and
cross-attention, models.native.NativeT5, with the small model's run as one C++ call; the
decoder-only models' self-attention), built once per machine. "auto" (the
default) is native where it runs (a lean architecture on a CPU where the C++ builds), else lean
where the architecture is supported, else hf with a logged note. "static" (T5 and mT5) is models.static_t5:
fixed shapes, one CUDA graph per call length and row-invariant Triton kernels on a GPU.

An engine is begin(src) (encode, or prefill a prompt), forward(tokens, pos) -> logits (k, V) for
decoder positions [pos, pos + k), and crop(n) (the LM's ids are the lengths: lean engines only
overwrite, so their crop does nothing)."""

from __future__ import annotations

import logging

import torch
from transformers import DynamicCache, EncoderDecoderCache

from bildlib.kernels import cpu
from bildlib.models.layout import column_major
from bildlib.models.lean_causal import LeanGPT2, LeanLlama
from bildlib.models.lean_common import UnsupportedArchitectureError, native_pieces
from bildlib.models.lean_t5 import LeanT5
from bildlib.models.native import NativeT5
from bildlib.models.static_t5 import StaticT5

ENGINES = ("auto", "lean", "native", "hf", "static")
# model_type -> engine; PET's student is a T5 with tied weights (models.pet)
LEAN = {"t5": LeanT5, "mt5": LeanT5, "bild-pet-t5": LeanT5, "gpt2": LeanGPT2, "llama": LeanLlama}
log = logging.getLogger("bildlib.models")


class HF:
    """The model's own forward with a DynamicCache, as transformers' generate runs it."""

    arch = "hf"

    def __init__(self, model):
        self.model, self.enc_dec = model, bool(model.config.is_encoder_decoder)

    def begin(self, src: torch.Tensor) -> None:
        m = self.model
        if self.enc_dec:
            self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            self.enc = m.get_encoder()(input_ids=src)
            return
        self.cache = DynamicCache(config=m.config)
        if src.shape[1] > 1:
            m(input_ids=src[:, :-1], past_key_values=self.cache, use_cache=True, logits_to_keep=1)

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        x = tokens[None]  # (1, k)
        if self.enc_dec:
            out = self.model(
                encoder_outputs=self.enc, decoder_input_ids=x, past_key_values=self.cache, use_cache=True
            )
        else:
            out = self.model(input_ids=x, past_key_values=self.cache, use_cache=True)
        return out.logits[0]

    def crop(self, drop: int) -> None:
        self.cache.crop(-drop)  # a negative argument removes that many tokens (self-attention only)


def why_not_lean(config, dtype: torch.dtype, arch: str | None = None) -> str | None:
    """Why the lean engine cannot run a model of this config in this dtype (a sentence naming
    the architecture `arch`, by default the config's), or None when it can. Needs no weights."""
    c, kind = config, config.model_type
    arch = arch or (c.architectures or [kind])[0]
    if kind not in LEAN:
        return f"architecture {arch} (model_type {kind!r}); lean runs {', '.join(LEAN)}"
    if dtype not in (torch.float32, torch.bfloat16):
        return f"{kind} in {dtype} (lean runs float32 and bfloat16; HF clamps float16 activations)"
    if kind == "gpt2" and (
        c.scale_attn_by_inverse_layer_idx or c.reorder_and_upcast_attn or not c.scale_attn_weights
    ):
        return "a GPT-2 with non-default attention scaling (scale_attn_*, reorder_and_upcast_attn)"
    if kind == "llama":
        rope = (getattr(c, "rope_parameters", None) or {}).get("rope_type", "default")
        if rope != "default" or getattr(c, "mlp_bias", False):
            return f"a Llama with rope_type {rope!r} or MLP biases (lean runs default RoPE, no MLP bias)"
    return None


NATIVE = tuple(LEAN)  # model types engine "native" runs: every lean one, with its C++ pieces


def runs_native(config, dtype: torch.dtype, device) -> bool:
    """Whether engine "native" can run this model: one the lean engine runs, on a CPU."""
    return (config.model_type in NATIVE and why_not_lean(config, dtype) is None
            and torch.device(device).type == "cpu")  # fmt: skip


def auto_engine(config, dtype: torch.dtype, device) -> str:
    """What engine "auto" runs a model of this config on: "native" where it runs and its C++
    builds here (bildlib.kernels.cpu), else "lean" where supported, else "hf"."""
    if runs_native(config, dtype, device) and cpu.load() is not None:
        return "native"
    return "hf" if why_not_lean(config, dtype) else "lean"


def cls_of(model):
    """The lean engine class for a model's type, or None."""
    return LEAN.get(model.config.model_type)


def check_engine(engine) -> None:
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}; got {engine!r}")


def make(model, engine: str = "auto", name: str = "model"):
    """The engine object for `model` as asked ("auto": native, else lean, where supported)."""
    check_engine(engine)
    int8 = bool(getattr(model, "bild_int8", False))  # dtype "int8" (models.load): native int8 products
    if int8 and engine not in ("auto", "native"):
        raise ValueError(f"{name}: dtype='int8' runs on engine 'native' (its int8 products), "
                         f"not engine={engine!r}")
    if engine == "hf":
        return HF(model)
    why = why_not_lean(model.config, model.dtype, type(model).__name__)
    if engine == "static":
        if why is None and model.config.model_type in ("t5", "mt5"):
            return StaticT5(model)
        raise UnsupportedArchitectureError(f"{name}: engine='static' runs T5 and mT5 in float32 or bfloat16, "
                                           f"not {why or model.config.model_type}; use engine='lean' or 'hf'")
    native = engine in ("auto", "native") and runs_native(model.config, model.dtype, model.device)
    if int8 and not native:
        raise UnsupportedArchitectureError(f"{name}: dtype='int8' runs what the native engine runs ("
                                           f"{', '.join(LEAN)}) on a CPU, not "
                                           f"{why or model.config.model_type} on {model.device.type}")
    if engine == "native" and not native:
        raise UnsupportedArchitectureError(f"{name}: engine='native' runs what lean runs ({', '.join(LEAN)}) "
                                           f"on a CPU, not {why or model.config.model_type} on "
                                           f"{model.device.type}; use engine='lean' or 'hf'")
    if why is None:
        column_major(model)  # CPU float32: faster one-row products (layout.column_major)
        cls = LEAN[model.config.model_type]
        if native:
            cpp = native_pieces(model)
            if cpp is None and (engine == "native" or int8):
                what = " (dtype int8)" if int8 else ""
                raise RuntimeError(f"{name}: engine='native'{what}: {cpu.why()}")
            if cpp is not None:
                kind = "int8" if int8 else True  # the causal engines take their products' kind
                return NativeT5(model, cpp, int8) if cls is LeanT5 else cls(model, native=kind)
        return cls(model)  # lean, also where the C++ could not be built (cpu.load logged why)
    if engine == "lean":
        raise UnsupportedArchitectureError(f"{name}: engine='lean' does not support {why}; use engine='hf'")
    log.info("%s: the lean engine does not support %s; using engine='hf'", name, why)
    return HF(model)
