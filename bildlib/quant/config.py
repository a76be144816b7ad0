"""What a quantization is: `QuantConfig`, and its label ("rtn4", "squeeze3-s0.45%", "int8").

Methods (docs/quantization.md):
- `none`: the model as stored (bf16 here);
- `int8`: symmetric 8-bit per output channel (scale = max |w| / 127), the CPU int8 product's weights;
- `rtn`: uniform round-to-nearest, asymmetric, per output channel or per `group` input columns;
- `squeeze`: SqueezeLLM (Kim, Hooper, Gholami et al., ICML 2024): per output channel, 2^bits
  centroids from a k-means weighted by the Fisher information (`fisher=False`: unweighted, the
  label "kmeans"), and the `outliers` share of weights, the largest in magnitude, kept exactly in
  a sparse part (dense-and-sparse).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

METHODS = ("none", "int8", "rtn", "squeeze")


@dataclass(frozen=True)
class QuantConfig:
    method: str = "none"
    bits: int = 16  # per weight of the dense part (none: the stored dtype's)
    group: int | None = None  # rtn: input columns sharing a scale; None: one per output channel
    outliers: float = 0.0  # squeeze: share of each matrix's weights kept in the sparse part
    fisher: bool = True  # squeeze: weight the k-means by the Fisher information

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.method == "int8" and self.bits != 8:
            raise ValueError(f"bits must be 8 for method 'int8', got {self.bits}")
        if self.method in ("rtn", "squeeze") and not 2 <= self.bits <= 8:
            raise ValueError(f"bits must be in 2..8 for method {self.method!r}, got {self.bits}")
        if not 0.0 <= self.outliers < 0.1:
            raise ValueError(f"outliers (the sparse share) must be in [0, 0.1), got {self.outliers}")
        if self.outliers and self.method != "squeeze":
            raise ValueError(f"outliers apply to method 'squeeze' only, got method {self.method!r}")
        if self.group is not None and (self.method != "rtn" or self.group < 1):
            raise ValueError(f"group must be a positive width, for method 'rtn' only; got {self.group}")

    @property
    def label(self) -> str:
        if self.method in ("none", "int8"):
            return "bf16" if self.method == "none" else "int8"
        name = "kmeans" if self.method == "squeeze" and not self.fisher else self.method
        s = f"{name}{self.bits}"
        if self.group:
            s += f"-g{self.group}"
        if self.outliers:
            s += f"-s{100 * self.outliers:g}%"
        return s

    def to_dict(self) -> dict:
        return asdict(self)


_LABEL = re.compile(r"^(rtn|squeeze|kmeans)(\d+)(?:-g(\d+))?(?:-s([\d.]+)%)?$")


def parse(label: str) -> QuantConfig:
    """The QuantConfig of a label: bf16 (or none), int8, rtn<bits>[-g<group>],
    squeeze<bits>[-s<percent>%], kmeans<bits>[-s<percent>%]."""
    if label in ("bf16", "none"):
        return QuantConfig()
    if label == "int8":
        return QuantConfig("int8", 8)
    m = _LABEL.match(label)
    if m is None:
        raise ValueError(
            f"quantization label {label!r}: expected bf16, int8, rtn<bits>[-g<group>], "
            "squeeze<bits>[-s<percent>%] or kmeans<bits>[-s<percent>%], e.g. squeeze3-s0.45%"
        )
    name, bits, group, pct = m.groups()
    return QuantConfig("rtn" if name == "rtn" else "squeeze", int(bits), int(group) if group else None,
                       float(pct) / 100 if pct else 0.0, fisher=name != "kmeans")  # fmt: skip
