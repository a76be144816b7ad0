"""Decoder-only training (arXiv v1 Table 2's language modelling): a GPT-2 language model
of Multi30k written as prompt-style translation, one text per pair,

    "de: <German> en: <English></s>"

packed GPT-2 style: each epoch, the texts in a new random order are joined into one stream and
cut into chunks of WINDOW tokens, so the model sees texts after other texts, as a perplexity
stream has them (bildlib.analysis.perplexity). The same model gives a perplexity (of those texts) and
translations (the prompt "de: <German> en:", decoded by bildlib.decoding like the T5 pair). The
loss covers every token, German included: it is a language model, not a translator with a mask.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel

from bildlib.analysis import perplexity

POSITIONS = 256  # GPT-2 positions: the longest prompt is about 70 tokens, plus 64 generated
WINDOW, STRIDE = 128, 64  # training chunks; validation perplexity (bildlib.analysis.perplexity.windows)


def lm_tokenizer(tok):
    """The shipped tokenizer without its T5 post-processor (which appends EOS to every text): a
    prompt must end where the text goes on, as GPT-2's tokenizer does."""
    tok.backend_tokenizer.post_processor = None
    return tok


def text(prefix: str, suffix: str, source: str, target: str) -> str:
    """One training text; the prompt is its part up to and including `suffix`."""
    return f"{prefix}{source}{suffix} {target}"


def encode(tok, pairs: list[tuple[str, str]], prefix: str, suffix: str) -> list[list[int]]:
    """Token ids of each pair's text, EOS-terminated, cut to POSITIONS."""
    ids = tok([text(prefix, suffix, s, t) for s, t in pairs], add_special_tokens=False).input_ids
    return [(x + [tok.eos_token_id])[:POSITIONS] for x in ids]


def pack(texts: list[list[int]], seed: int, length: int = WINDOW) -> list[list[int]]:
    """The texts (EOS-terminated ids) in a seeded random order, joined and cut into chunks of
    `length` tokens (the last one shorter)."""
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()
    stream = [t for i in order for t in texts[i]]
    return [stream[i : i + length] for i in range(0, len(stream), length)]


def build(model: dict, tok) -> GPT2LMHeadModel:
    """A fresh GPT-2 (seeded by the caller) over the tokenizer's vocabulary, EOS as BOS and
    separator."""
    eos = tok.eos_token_id
    cfg = GPT2Config(
        vocab_size=len(tok), n_positions=POSITIONS, bos_token_id=eos, eos_token_id=eos,
        pad_token_id=tok.pad_token_id, tie_word_embeddings=True, **model,
    )  # fmt: skip
    return GPT2LMHeadModel(cfg)


def collate(seqs: list[list[int]], idx: list[int], pad: int, device) -> dict:
    n = max(len(seqs[i]) for i in idx)
    x = torch.tensor([seqs[i] + [pad] * (n - len(seqs[i])) for i in idx], device=device)  # (B, T)
    mask = torch.tensor([[1] * len(seqs[i]) + [0] * (n - len(seqs[i])) for i in idx], device=device)
    return {"input_ids": x, "attention_mask": mask}


def loss(model, b: dict, label_smoothing: float = 0.0) -> torch.Tensor:
    """Mean next-token cross-entropy over the real tokens of the batch."""
    logits = model(**b).logits[:, :-1].float()  # (B, T-1, V): row t predicts token t + 1
    y = b["input_ids"][:, 1:].masked_fill(b["attention_mask"][:, 1:] == 0, -100)
    return F.cross_entropy(
        logits.flatten(0, 1), y.flatten(), ignore_index=-100, label_smoothing=label_smoothing
    )


def kd_loss(model, teacher, b: dict, lam: float, temperature: float = 1.0,
            label_smoothing: float = 0.0) -> torch.Tensor:  # fmt: skip
    """Word-level KD on the same chunks (train.distill): (1 - λ) CE + λ T² KL(teacher ‖ student)
    at every next-token position of the batch's real tokens."""
    from bildlib.train import distill

    with torch.no_grad():
        t = teacher(**b).logits[:, :-1]  # (B, T-1, V)
    s = model(**b).logits[:, :-1]
    y = b["input_ids"][:, 1:].masked_fill(b["attention_mask"][:, 1:] == 0, -100)
    return distill.kd_loss(s, t, y, lam, temperature, label_smoothing)


def val_perplexity(model, tok, pairs: list[tuple[str, str]], prefix: str, suffix: str) -> float:
    """Perplexity of the val texts as one stream (bildlib.analysis.perplexity, WINDOW / STRIDE)."""
    ids = perplexity.stream(tok, [text(prefix, suffix, s, t) for s, t in pairs])
    return perplexity.score(model, ids, WINDOW, STRIDE).perplexity
