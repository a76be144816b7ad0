"""Models: `load` finds and loads checkpoints (folder or hub id, device and dtype policy,
vocabulary checks); `lm` is the batch-1 adapter the decoders drive; `engine` picks what runs its
calls: the HF forward, or the lean engines `lean_t5` / `lean_causal` on the same weights.

    from bildlib.models import load_pair
    small, large = load_pair("data/checkpoints/multi30k-small", "data/checkpoints/multi30k-large")
"""

from bildlib.models import pet  # registers PET's student (model_type "bild-pet-t5") with the Auto classes
from bildlib.models.early_exit import early_exit_pair
from bildlib.models.engine import ENGINES, auto_engine, check_engine, why_not_lean
from bildlib.models.lean_common import UnsupportedArchitectureError
from bildlib.models.lm import LM, check_pair, load_pair
from bildlib.models.load import (
    ModelUnavailableError,
    check_dtype,
    check_same_vocab,
    check_vocab,
    load_model,
    load_tokenizer,
    locate,
    native_bf16,
    resolve_device,
    resolve_dtype,
    small_policy,
    stored_dtype,
)

__all__ = [
    "ENGINES", "LM", "auto_engine", "ModelUnavailableError", "UnsupportedArchitectureError",
    "early_exit_pair",
    "why_not_lean", "check_dtype", "check_engine", "check_pair", "check_same_vocab", "check_vocab",
    "load_model", "load_pair", "load_tokenizer", "locate", "native_bf16", "resolve_device",
    "pet", "resolve_dtype", "small_policy", "stored_dtype",
]  # fmt: skip
