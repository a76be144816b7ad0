"""Weight-only quantization of the large model: round-to-nearest, SqueezeLLM, int8 (docs/quantization.md)."""

from bildlib.quant.config import QuantConfig, parse
from bildlib.quant.weights import QWeight

__all__ = ["QWeight", "QuantConfig", "parse"]
