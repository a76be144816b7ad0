"""What every decoder checks: the end of the sequence and its length argument."""

from __future__ import annotations

import math
import numbers


def finished(seq: list[int], eos: int, max_new_tokens: int) -> bool:
    """seq = [bos] + output (bos may equal eos: a decoder-only prompt can end with it)."""
    return len(seq) > 1 and seq[-1] == eos or len(seq) - 1 >= max_new_tokens


def check_count(name: str, value, minimum: int = 1, optional: bool = False) -> None:
    """An integer argument >= minimum (or None where optional); the error names the argument."""
    if optional and value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        what = f"an integer >= {minimum}" + (" or None" if optional else "")
        raise ValueError(f"{name} must be {what}, got {value!r}")


def check_threshold(name: str, value, lo: float, hi: float = math.inf, optional: bool = False) -> None:
    """A number in [lo, hi] (or None where optional); NaN is refused."""
    if optional and value is None:
        return
    # numbers.Real: Python's and numpy's ints and floats alike (np.float32 as np.float64)
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and lo <= value <= hi
    if not ok:  # NaN fails every comparison, so it lands here too
        span = f"in [{lo:g}, {hi:g}]" if hi < math.inf else f">= {lo:g}"
        raise ValueError(
            f"{name} must be a number {span}" + (" or None" if optional else "") + f", got {value!r}"
        )
