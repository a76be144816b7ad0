"""Evaluation and training data: one interface for translation and summarization splits. A `Split`
is a list of (source, reference) pairs plus the `Task` it belongs to; `load(name, split, n)` gives
any dataset bildlib knows.

`splits` (Task, Split, the errors), `datasets` (load by name), `multi30k` (the embedded default,
read from its raw files: $BILD_DATA_DIR, data/multi30k/, or a checked download), `hub` (the
paper's hub datasets: IWSLT 2017, WMT 2014, XSUM, CNN/DailyMail), `files` (SHA-256, atomic writes,
checked downloads), `tokenizer` (Multi30k's), `artifacts` (built folders sealed with their files'
hashes and verified before reuse), `shipped` (the shipped checkpoints' sums, checked at first load).
"""

from bildlib.data.datasets import load
from bildlib.data.files import atomic_path, sha256
from bildlib.data.hub import HUB_DATASETS, _offline, hub_reachable, load_hub
from bildlib.data.multi30k import MULTI30K_SPLITS, load_multi30k
from bildlib.data.splits import ChecksumError, DataError, DatasetUnavailableError, Split, Task

__all__ = [
    "HUB_DATASETS", "MULTI30K_SPLITS", "ChecksumError", "DataError", "DatasetUnavailableError", "Split",
    "Task", "_offline", "atomic_path", "hub_reachable", "load", "load_hub", "load_multi30k", "sha256",
]  # fmt: skip
