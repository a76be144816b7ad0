"""Loading checkpoints: local folders or hub names, with clear errors and vocabulary checks."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer


def resolve_device(device: str) -> torch.device:
    """ "auto" -> cuda when available, else cpu; asking for cuda without it is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available")
    return torch.device(device)


def _where(path: str | Path) -> str:
    return "local folder" if Path(path).exists() else "hub model (not a local folder)"


def _must_exist_locally(path: str | Path) -> None:
    """Hub ids are `name` or `owner/name`; anything else is a folder, and must exist."""
    p = str(path)
    if not Path(p).exists() and (Path(p).is_absolute() or p.startswith(".") or p.count("/") > 1):
        raise FileNotFoundError(f"cannot load model {p!r}: no such folder")


def load_tokenizer(path: str | Path):
    _must_exist_locally(path)
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"cannot load the tokenizer of {str(path)!r} ({_where(path)}): {e}") from e


def load_seq2seq(path: str | Path, device: str = "cpu"):
    """(model, tokenizer) in eval mode; fp32 on CPU whatever dtype the weights are stored in."""
    dev = resolve_device(device)
    tok = load_tokenizer(path)
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(
            str(path), dtype=torch.float32 if dev.type == "cpu" else "auto"
        )
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"cannot load model {str(path)!r} ({_where(path)}): {e}") from e
    check_vocab(tok, model.config, str(path))
    return model.to(dev).eval(), tok


def check_vocab(tok, config, name: str = "model") -> None:
    """The tokenizer must fit the model: every id inside the embedding (which T5/mT5 pad beyond
    the tokenizer), and the same pad and EOS ids."""
    if len(tok) > config.vocab_size:
        raise ValueError(
            f"{name}: tokenizer has {len(tok)} entries but the model's vocabulary has {config.vocab_size}"
        )
    for what in ("pad_token_id", "eos_token_id"):
        t, m = getattr(tok, what), getattr(config, what)
        if m is not None and t != m:
            raise ValueError(f"{name}: tokenizer {what}={t} but model config {what}={m}")
