"""The paper's datasets on the Hugging Face Hub (IWSLT 2017, WMT 2014, XSUM, CNN/DailyMail), read
through `datasets.load_dataset` into a bildlib.data.Split. Without network they fail at once with
a message that names the dataset and says how to get it. $BILD_HUB_DATA points at local parquet
copies in the hub's schema instead (the dry run's fixtures, bildlib.experiments.paper.fixtures); the same
column checks run on both.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from bildlib.data.splits import DataError, DatasetUnavailableError, Split, Task


@dataclass(frozen=True)
class HubDataset:
    task: Task
    path: str  # hub repository id for datasets.load_dataset
    config: str | None
    source_field: str  # for translation: the field holding the {lang: text} dict
    target_field: str | None = None  # summarization only


HUB_DATASETS = {
    "iwslt2017": HubDataset(
        Task("iwslt2017", "translation", "de", "en"), "IWSLT/iwslt2017", "iwslt2017-de-en", "translation"
    ),
    "wmt14": HubDataset(Task("wmt14", "translation", "de", "en"), "wmt/wmt14", "de-en", "translation"),
    "xsum": HubDataset(
        Task("xsum", "summarization", "en", "en", "summarize: "),
        "EdinburghNLP/xsum",
        None,
        "document",
        "summary",
    ),
    "cnn_dailymail": HubDataset(
        Task("cnn_dailymail", "summarization", "en", "en", "summarize: "),
        "abisee/cnn_dailymail",
        "3.0.0",
        "article",
        "highlights",
    ),
}
# language modelling (arXiv v1 Table 2): perplexity over every line; generation from the first
# PROMPT_WORDS words of each paragraph of at least 2 * PROMPT_WORDS words, against the rest
HUB_DATASETS["wikitext2"] = HubDataset(
    Task("wikitext2", "language_modeling", "en", "en"), "Salesforce/wikitext", "wikitext-2-raw-v1", "text"
)
PROMPT_WORDS = 24
HUB_SPLITS = {"train": "train", "val": "validation", "validation": "validation", "test": "test"}


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub answers a TCP connection (behind a proxy we cannot tell: True)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    url = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _offline() -> bool:
    return any(
        os.environ.get(v, "").upper() in {"1", "ON", "YES", "TRUE"}
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


def load_hub(name: str, split: str = "val", n: int | None = None) -> Split:
    """A paper dataset from the Hugging Face Hub (or its local cache), as a Split.

    name: one of HUB_DATASETS; split: train | val | test; n: keep only the first n examples.
    """
    if name not in HUB_DATASETS:
        raise ValueError(f"name must be one of {sorted(HUB_DATASETS)}, got {name!r}")
    if split not in HUB_SPLITS:
        raise ValueError(f"split must be one of {sorted(HUB_SPLITS)}, got {split!r}")
    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1 or None, got {n}")
    spec = HUB_DATASETS[name]
    what = f"hub dataset {spec.path!r}" + (f" (config {spec.config!r})" if spec.config else "")
    how = (
        f'Run `python -c "import datasets; datasets.load_dataset({spec.path!r}'
        + (f", {spec.config!r}" if spec.config else "")
        + ')"` once on a machine with internet and copy its Hugging Face cache (~/.cache/huggingface, '
        "or $HF_HOME) here; then set HF_HUB_OFFLINE=1 to use the cached copy."
    )
    lm = spec.task.kind == "language_modeling"  # n counts prompts, not lines: the whole split is read
    hf_split = HUB_SPLITS[split] + (f"[:{n}]" if n and not lm else "")
    local = _local_copy(spec, HUB_SPLITS[split])
    if local is None and not _offline() and not hub_reachable():
        raise DatasetUnavailableError(f"Cannot load {what}: the Hugging Face Hub is not reachable. {how}")
    import datasets  # heavy import, only needed here

    try:
        if local is not None:  # $BILD_HUB_DATA: parquet files in the hub's schema (paper.fixtures)
            ds = datasets.load_dataset("parquet", data_files={HUB_SPLITS[split]: str(local)}, split=hf_split)
        else:
            ds = datasets.load_dataset(spec.path, spec.config, split=hf_split)
    except (ConnectionError, OSError, FileNotFoundError) as e:
        raise DatasetUnavailableError(f"Cannot load {what}: {e}. {how}") from e
    check_schema(ds.column_names, ds[0] if len(ds) else {}, spec, what)
    t = spec.task
    texts = None
    if t.kind == "translation":
        pairs = [(ex[t.source_lang], ex[t.target_lang]) for ex in ds[spec.source_field]]
    elif t.kind == "language_modeling":
        texts, pairs = lm_split(ds[spec.source_field])
    else:
        pairs = list(zip(ds[spec.source_field], ds[spec.target_field], strict=True))
    if not pairs:
        raise DataError(f"{what} split {hf_split!r} is empty")
    s = Split(t, split, pairs, texts)
    return s.head(n) if lm and n else s


def lm_split(lines: list[str]) -> tuple[list[str], list[tuple[str, str]]]:
    """WikiText's lines as (texts, pairs): the texts are its non-empty lines, stripped (headings
    included); each paragraph of >= 2 * PROMPT_WORDS words gives a (prompt, continuation) pair."""
    texts = [x.strip() for x in lines if x.strip()]
    pairs = []
    for x in texts:
        w = x.split()
        if not x.startswith("=") and len(w) >= 2 * PROMPT_WORDS:
            pairs.append((" ".join(w[:PROMPT_WORDS]), " ".join(w[PROMPT_WORDS:])))
    return texts, pairs


def local_file(root: Path | str, spec: HubDataset, hf_split: str) -> Path:
    """Where a local copy of one split lives under root: <hub id>/<config or default>/<split>.parquet."""
    return Path(root) / spec.path / (spec.config or "default") / f"{hf_split}.parquet"


def _local_copy(spec: HubDataset, hf_split: str) -> Path | None:
    """The split's local_file under $BILD_HUB_DATA, where that variable is set (the dry run's
    fixtures, or a reviewer's own export); else None."""
    root = os.environ.get("BILD_HUB_DATA")
    if not root:
        return None
    f = local_file(root, spec, hf_split)
    if not f.is_file():
        raise DatasetUnavailableError(f"BILD_HUB_DATA={root} is set but has no {f.relative_to(root)}")
    return f


def check_schema(columns: list[str], first: dict, spec: HubDataset, what: str) -> None:
    """The columns bildlib reads are there: translation {source_field: {src, tgt}}, summarization
    source_field and target_field. The error names the dataset, the column and what was found."""
    t = spec.task
    need = [spec.source_field] + ([spec.target_field] if t.kind == "summarization" else [])
    for col in need:
        if col not in columns:
            raise DataError(f"{what}: expected column {col!r} ({t.kind}), found columns {columns}")
    if t.kind == "language_modeling" and first and not isinstance(first.get(spec.source_field), str):
        raise DataError(f"{what}: expected column {spec.source_field!r} to hold text")
    if t.kind == "translation" and first:
        pair = first[spec.source_field]
        keys = sorted(pair) if isinstance(pair, dict) else type(pair).__name__
        if not isinstance(pair, dict) or {t.source_lang, t.target_lang} - set(pair):
            raise DataError(f"{what}: expected column {spec.source_field!r} to hold "
                            f"{{{t.source_lang!r}, {t.target_lang!r}}}, found {keys}")  # fmt: skip


