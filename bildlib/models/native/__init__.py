"""The native engine: lean T5 with its pieces between products as C++ calls, and the small
model's run of Algorithm 1 as one C++ call (bildlib.kernels.cpu builds the C++)."""

from bildlib.models.native.t5 import NativeT5

__all__ = ["NativeT5"]
