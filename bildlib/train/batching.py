"""Tokenized pairs into batches: encoding, index batches of similar length in a seeded order, and
the padded tensors of one batch (the loop's, and the teacher's pass for its top k)."""

from __future__ import annotations

import torch

from bildlib.train.config import MAX_LEN


def encode(tok, pairs: list[tuple[str, str]], prefix: str = "") -> tuple[list[list[int]], list[list[int]]]:
    src = tok([prefix + s for s, _ in pairs], truncation=True, max_length=MAX_LEN).input_ids
    tgt = tok([t for _, t in pairs], truncation=True, max_length=MAX_LEN).input_ids
    return src, tgt


def batches(src: list[list[int]], tgt: list[list[int]], batch_size: int, seed: int) -> list[list[int]]:
    """Index batches of similar lengths (little padding), in a seeded random order."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.rand(len(src), generator=g).tolist()  # random order among equal lengths
    order = sorted(range(len(src)), key=lambda i: len(src[i]) + len(tgt[i]) + noise[i])
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [chunks[i] for i in torch.randperm(len(chunks), generator=g).tolist()]


def collate(src, tgt, idx, device) -> dict:
    def pad(seqs, value):
        n = max(len(s) for s in seqs)
        return torch.tensor([s + [value] * (n - len(s)) for s in seqs], device=device)

    input_ids = pad([src[i] for i in idx], 0)
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "labels": pad([tgt[i] for i in idx], -100),
    }
