"""The teacher's soft targets computed once: its k most likely tokens and their log-probabilities
at every target position of the training set, cached on disk and read back by the training loop
instead of running the teacher in every epoch (train.distill).

Memory: 6 bytes per position and k (an int16 token id and a float32 log-probability); on the
shipped pair's alignment set (29,000 sentences, about 431,000 target positions) k = 32 takes
about 83 MB, in RAM and on disk, against a teacher forward in each epoch of every student.

The loss needs a distribution over the whole vocabulary. `dense` gives the top k their true
log-probabilities and spreads the mass left over (1 - sum of the top k) evenly over the other
V - k tokens. At k = V this is the teacher's own distribution; at k < V the argmax and max p the
warm-up's classes read are exact, and the KL is exact on the top k and approximate on the tail.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from bildlib import REPO_ROOT, data
from bildlib.train.batching import collate  # the loop's own batches: the same padding and labels

CACHE_DIR = REPO_ROOT / "build" / "teacher"  # git-ignored, rebuilt in one teacher pass when missing


@dataclass
class TopK:
    ids: torch.Tensor  # (P, k) int16: the teacher's top-k tokens at all P positions, example by example
    logp: torch.Tensor  # (P, k) float32: their log-probabilities, over the whole vocabulary
    offsets: list[int]  # example i's positions are rows offsets[i] : offsets[i + 1]
    vocab: int

    def dense(self, idx: list[int], shape: tuple[int, int]) -> torch.Tensor:
        """Teacher log-probabilities (B, n, V) for the batch of examples idx, whose labels have
        shape (B, n): top k exact, the rest of the mass spread evenly, 0 at padding."""
        k = self.ids.shape[1]
        out = torch.zeros(*shape, self.vocab)
        for row, i in enumerate(idx):
            a, b = self.offsets[i], self.offsets[i + 1]
            lp = self.logp[a:b]  # (m, k)
            if k < self.vocab:
                rest = (1 - lp.exp().sum(-1)).clamp_min(1e-12) / (self.vocab - k)  # (m,)
                out[row, : b - a] = rest.log().unsqueeze(-1)
            out[row, : b - a].scatter_(-1, self.ids[a:b].long(), lp)
        return out


def _key(teacher: str, tgt: list[list[int]], src: list[list[int]], k: int) -> str:
    """The cache's name: the teacher's weights (size and time) and config, the data, and k."""
    folder = Path(teacher)
    stamp = [(f.name, f.stat().st_size, int(f.stat().st_mtime)) for f in sorted(folder.glob("*"))
             if f.suffix in (".safetensors", ".json")]  # fmt: skip
    h = hashlib.sha256(json.dumps([str(folder.resolve()), stamp, k]).encode())
    h.update(json.dumps([src, tgt]).encode())
    return h.hexdigest()[:16]


def compute(teacher: torch.nn.Module, src, tgt, k: int, batch_size: int = 64, bf16: bool = True,
            progress: bool = True) -> TopK:  # fmt: skip
    """One teacher-forced pass over all examples (as the training loop runs the teacher: autocast
    bf16 products, log-softmax in float32), keeping the top k per position."""
    vocab = teacher.config.vocab_size
    if not 1 <= k <= vocab:
        raise ValueError(f"teacher_topk must be in [1, {vocab}] (the vocabulary), got {k}")
    device = next(teacher.parameters()).device
    order = sorted(range(len(src)), key=lambda i: len(src[i]) + len(tgt[i]))
    ids, logp = [None] * len(src), [None] * len(src)
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    for idx in tqdm(chunks, disable=not progress, desc=f"teacher top-{k}"):
        batch = collate(src, tgt, idx, device)
        with torch.no_grad(), torch.autocast(device.type, torch.bfloat16, enabled=bf16):
            logits = teacher(**batch).logits
        top = logits.float().log_softmax(-1).topk(k, -1)  # (B, n, k)
        for row, i in enumerate(idx):
            m = len(tgt[i])  # the example's positions; the rest of the row is padding
            ids[i], logp[i] = top.indices[row, :m].short().cpu(), top.values[row, :m].cpu()
    offsets = [0]
    for t in tgt:
        offsets.append(offsets[-1] + len(t))
    return TopK(torch.cat(ids), torch.cat(logp), offsets, vocab)


def load_or_compute(teacher_name: str, teacher: torch.nn.Module, src, tgt, k: int, bf16: bool = True,
                    cache_dir: Path | None = None, progress: bool = True) -> TopK:  # fmt: skip
    """The cached top k of this teacher on these examples, computed (and written atomically) if absent."""
    path = Path(cache_dir or CACHE_DIR) / f"top{k}-{_key(teacher_name, tgt, src, k)}.pt"
    if path.exists():
        saved = torch.load(path, weights_only=True)
        return TopK(saved["ids"], saved["logp"], saved["offsets"], saved["vocab"])
    out = compute(teacher, src, tgt, k, bf16=bf16, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    with data.atomic_path(path) as tmp:
        torch.save({"ids": out.ids, "logp": out.logp, "offsets": out.offsets, "vocab": out.vocab}, tmp)
    return out
