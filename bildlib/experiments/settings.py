"""RunSettings: what a run takes besides its configurations and examples, checked once when
made and passed whole (run, plan, sweep, its shards, a Ray worker), as decoding.BildSettings is
for bild(). Frozen, so nothing on the way can change a run's settings; Ray ships it pickled.

    from bildlib import experiments as X
    s = X.RunSettings(dtype="bfloat16", threads=2, results="data/results")
    df = X.sweep("multi30k", X.bild_grid("multi30k"), n_examples=100, settings=s)

What a sweep loads on the way (the models, the examples) is not a setting: it travels as
`Loaded` (experiments.shards), a value of its own.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from bildlib.decoding.common import check_count
from bildlib.experiments import presets
from bildlib.models import check_dtype, check_engine

DEVICES = ("cpu", "cuda", "auto")  # or "cuda:N" (models.resolve_device)


@dataclass(frozen=True)
class RunSettings:
    """device: "cpu", "cuda", "cuda:N" or "auto" (cuda when available; resolved once by Models).
    dtype: "default" (fp32 on CPU as the model cards, the stored dtype on GPU), "auto", "float32",
    "bfloat16", "mixed" (models.resolve_dtype, small_policy) or "int8" (float32 weights, the
    native engine's products in int8, on a CPU; models.linear.NativeInt8). engine: models.engine's auto,
    native, lean, hf or static. threads: torch threads, fixed for the whole run. warmup: examples
    each configuration decodes untimed first. checkpoints: replace some of the preset's models
    ({"aligned": folder}, "student:<label>" for a candidate small model; what-if runs), kept as
    sorted (key, value) pairs. results: the cache folder (None: experiments.cache.RESULTS).
    batch_size: examples per decode call (decoding.batch; 1 is the paper's setting)."""

    device: str = "cpu"
    dtype: str = "default"
    engine: str = "auto"
    threads: int = 2
    warmup: int = 2
    checkpoints: tuple[tuple[str, str], ...] = ()
    results: Path | None = None
    batch_size: int = 1

    def __post_init__(self):
        device = str(self.device) if isinstance(self.device, torch.device) else self.device
        if not isinstance(device, str) or device not in DEVICES and not device.startswith("cuda:"):
            raise ValueError(f"device must be one of {', '.join(DEVICES)} or 'cuda:N', got {self.device!r}")
        check_dtype(self.dtype)
        check_engine(self.engine)
        check_count("threads", self.threads)
        check_count("warmup", self.warmup, minimum=0)
        check_count("batch_size", self.batch_size)
        pairs = checkpoint_pairs(self.checkpoints)
        results = None if self.results is None else Path(self.results)
        for name, value in (("device", device), ("checkpoints", pairs), ("results", results)):
            object.__setattr__(self, name, value)  # normalised once, in the frozen object

    def replace(self, **changes) -> RunSettings:
        """A copy with some fields changed, checked again."""
        return dataclasses.replace(self, **changes)


def checkpoint_pairs(checkpoints) -> tuple[tuple[str, str], ...]:
    """checkpoints (a dict, pairs or None) as sorted (key, folder or hub id) pairs; a key that names
    no model of a preset is a ValueError naming it."""
    if checkpoints is None:
        return ()
    if not isinstance(checkpoints, dict | tuple | list):
        raise TypeError(f"checkpoints must be a dict such as {{'aligned': folder}}, got {checkpoints!r}")
    pairs = dict(checkpoints)
    bad = [k for k in pairs if k not in presets.MODEL_NAMES and not presets.is_candidate(k)]
    if bad:
        names = ", ".join(presets.MODEL_NAMES)
        raise ValueError(f"checkpoints: keys must be {names} or 'student:<label>' (a candidate small "
                         f"model), got {sorted(map(str, bad))}")  # fmt: skip
    return tuple(sorted((k, str(v)) for k, v in pairs.items()))
