"""Any dataset bildlib knows by name: Multi30k (bildlib.data.multi30k) or one of the paper's hub
datasets (bildlib.data.hub)."""

from __future__ import annotations

from bildlib.data.multi30k import load_multi30k
from bildlib.data.splits import Split


def load(name: str, split: str = "val", n: int | None = None) -> Split:
    """Any dataset bildlib knows: "multi30k" or one of HUB_DATASETS."""
    if name == "multi30k":
        s = load_multi30k(split)
        return s.head(n) if n else s
    from bildlib.data import hub

    if name in hub.HUB_DATASETS:
        return hub.load_hub(name, split, n)
    raise ValueError(f"name must be 'multi30k' or one of {sorted(hub.HUB_DATASETS)}, got {name!r}")
