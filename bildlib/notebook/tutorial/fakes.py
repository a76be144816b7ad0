"""Fake models with known logits, for the tutorial's checks and the project's own tests.

Each fake has the interface the decoders drive (`bildlib.models.LM`: start / forward / crop, with
`ids`, `eos`, `device`, `width`, `tok`, `name`, `is_encoder_decoder`), so `decoding.bild` runs on
them as on the real pair. Token ids are small integers; 0 is bos and 1 is EOS.

    small = Scripted([5, 6, 7, 1], p=[0.9, 0.9, 0.3, 0.9])   # unsure of its third token
    large = Scripted([5, 6, 8, 1])                             # writes 8 there
    out, trace = decoding.bild(small, large, [3], fallback=0.5, rollback=1.0)   # [5, 6, 8, 1]
"""

from __future__ import annotations

import math
import weakref

import torch

BOS, EOS, V = 0, 1, 16  # bos, EOS and the vocabulary size of every fake


class Vocab:
    """The tokenizer part the pair check reads: token i is the string "t<i>"."""

    eos_token_id, pad_token_id, bos_token_id = EOS, None, None

    def __init__(self, size: int = V):
        self.size = size

    def get_vocab(self) -> dict[str, int]:
        return {f"t{i}": i for i in range(self.size)}

    def __len__(self) -> int:
        return self.size

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return " ".join(f"t{i}" for i in ids if not (skip_special_tokens and i in (BOS, EOS)))


class FakeLM:
    """A stand-in for `bildlib.models.LM` whose next-token logits are a function of the decoder
    sequence: next_logits(seq) -> (V,), seq = [bos] + the tokens so far. The cache is `ids`, as
    in LM: forward(tokens) scores each of them after ids (so a decoder that forgets to crop
    after a rollback gets logits for the wrong prefix, as with a real model)."""

    is_encoder_decoder = True

    def __init__(self, next_logits, name: str = "fake", vocab: int = V):
        self.next_logits, self.name = next_logits, name
        self.tok, self.width, self.eos = Vocab(vocab), vocab, EOS
        self.device = torch.device("cpu")
        self.partners = weakref.WeakSet()  # what decoding's pair check reads and fills
        self.ids: list[int] = []
        self.source = None

    def start(self, source_ids) -> int:
        self.ids, self.source = [], list(source_ids)
        return BOS

    def forward(self, tokens: list[int]) -> torch.Tensor:
        if not tokens:
            raise ValueError("forward() needs at least one token")
        rows = [self.next_logits(self.ids + list(tokens[: i + 1])) for i in range(len(tokens))]
        self.ids += list(tokens)
        return torch.stack(rows)  # (k, V)

    def crop(self, n: int) -> None:
        if not 0 <= n <= len(self.ids):
            raise ValueError(f"{self.name}: cannot crop to {n} tokens, the cache holds {len(self.ids)}")
        del self.ids[n:]


def peaked(token: int, p: float, vocab: int = V) -> torch.Tensor:
    """Logits (V,) whose softmax gives `token` probability p and spreads 1 - p evenly."""
    q = (1 - p) / (vocab - 1)
    x = torch.full((vocab,), math.log(q))
    x[token] = math.log(p)
    return x


class Scripted(FakeLM):
    """A model that writes `script` one position at a time, whatever came before: at output
    position i it puts probability p[i] on script[i] (p: one number for all, or one per
    position; default 0.95). Past the script it writes EOS."""

    def __init__(self, script: list[int], p: float | list[float] = 0.95, name: str = "scripted"):
        ps = [p] * len(script) if isinstance(p, int | float) else list(p)
        if len(ps) != len(script):
            raise ValueError(f"p must be one number or one per script token ({len(script)}), got {len(ps)}")
        self.script, self.p = list(script), ps

        def next_logits(seq):
            i = len(seq) - 1  # the output position predicted
            return peaked(*((self.script[i], self.p[i]) if i < len(self.script) else (EOS, 0.95)))

        super().__init__(next_logits, name)


class Markov(FakeLM):
    """A model whose next-token logits depend on the previous token only: table[prev] (V, V)."""

    def __init__(self, table: torch.Tensor, eos: int = -1, name: str = "markov"):
        self.table = table
        super().__init__(lambda seq: table[seq[-1]], name, table.shape[1])
        self.eos = eos  # -1: never ends (decoders stop at max_new_tokens)
