"""Early-exit BiLD's two models from one (paper §4.4): the small view is the decoder's first `e`
layers, the final norm and the shared head; the large view is the whole decoder. Both run on one
lean engine (models.lean_t5), so they share

- the encoder and the cross-attention K/V: one begin() per source (two-model BiLD encodes twice);
- the caches of layers < e: written once, by whichever view runs a position first;
- the exit layer's output h per position, from which the large view continues through layers
  e..n-1, so those layers' caches hold real hidden states, never copies of the exit's.

Both views' caches are prefixes of one decoder sequence (BiLD's seq): a position the small view
ran holds the same tokens when the large view reaches it. `n` counts the positions whose shared
part (layers < e and h) is valid; a crop of either view lowers it.

    small, large = early_exit_pair("data/checkpoints/multi30k-ee", exit_layer=1)
    ids, trace = bild(small, large, src, fallback=0.5, rollback=1.0)
"""

from __future__ import annotations

from pathlib import Path

import torch

from bildlib.models.engine import check_engine, make
from bildlib.models.lean_t5 import LeanT5
from bildlib.models.lm import LM, check_pair
from bildlib.models.load import load_model


def check_exit_layer(exit_layer, n_layers: int) -> None:
    """An exit below the last of the decoder's n_layers layers (1-based); the error names it."""
    if not isinstance(exit_layer, int) or isinstance(exit_layer, bool) or not 1 <= exit_layer < n_layers:
        raise ValueError(f"exit_layer must be an integer in [1, {n_layers - 1}] (the decoder has "
                         f"{n_layers} layers), got {exit_layer!r}")  # fmt: skip


class Shared:
    """The one engine both views drive, and the state they share."""

    def __init__(self, t5: LeanT5, exit_layer: int):
        check_exit_layer(exit_layer, t5.n_layers)
        self.t5, self.e = t5, exit_layer
        self.h = torch.empty(0, t5.d, dtype=t5.emb.dtype, device=t5.emb.device)  # (T, d) exit outputs
        self.n = 0  # positions [0, n) have valid caches below the exit and valid h
        self.src = None  # the source encoded by begin(), None after reset()

    def reset(self) -> None:
        self.n, self.src = 0, None

    def begin(self, src: torch.Tensor) -> None:
        if self.src is None:
            self.t5.begin(src)
            self.src = src
        elif not torch.equal(self.src, src):
            raise ValueError("the two views of one early-exit model decode one source at a time")

    def shallow(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        """Layers [0, e) on tokens (k,) at positions [pos, pos + k); returns and keeps h (k, d)."""
        if pos > self.n:
            raise RuntimeError(f"early exit: position {pos} asked, but the shared layers hold only "
                               f"{self.n}; crop both views of the pair together")  # fmt: skip
        x = self.t5.embed(tokens)
        for i in range(self.e):
            x = self.t5.layer(i, x, pos)
        k = x.shape[0]
        if self.h.shape[0] < pos + k:  # grow by doubling, keeping what is there
            h = self.h.new_empty(max(2 * (pos + k), 64), self.h.shape[1])
            h[: self.h.shape[0]] = self.h
            self.h = h
        self.h[pos : pos + k] = x
        self.n = pos + k
        return x


class View:
    """One view as an engine (begin / forward / crop, see models.engine): deep=False the small
    model (layers < e, head), deep=True the large one (all layers, head)."""

    arch = "t5-exit"

    def __init__(self, shared: Shared, deep: bool):
        self.s, self.deep, self.len = shared, deep, 0

    def begin(self, src: torch.Tensor) -> None:
        self.s.begin(src)
        self.len = 0

    def forward(self, tokens: torch.Tensor, pos: int) -> torch.Tensor:
        s, t5, k = self.s, self.s.t5, tokens.shape[0]
        if not self.deep:
            x = s.shallow(tokens, pos)
        else:
            m = max(pos, min(s.n, pos + k))  # h is there for [pos, m): the small view ran them
            if m < pos + k:
                s.shallow(tokens[m - pos :], m)
            x = s.h[pos : pos + k]
            for i in range(s.e, t5.n_layers):  # the deep layers' caches from real hidden states
                x = t5.layer(i, x, pos)
        self.len = pos + k
        return t5.head(x)  # (k, V)

    def crop(self, drop: int) -> None:
        self.len -= drop
        self.s.n = min(self.s.n, self.len)  # past it, the shared layers may hold discarded tokens


class ExitLM(LM):
    """An LM over one view; start() resets the shared state (both views start each source)."""

    def __init__(self, model, tokenizer, view: View, name: str):
        super().__init__(model, tokenizer, name, engine=view)

    def start(self, source_ids) -> int:
        self.impl.s.reset()
        return super().start(source_ids)


def exit_views(model, tok, name: str, exit_layer: int = 1) -> tuple[ExitLM, ExitLM]:
    """(small view, large view) of a loaded T5 / mT5 on one lean engine, for bild(small, large)."""
    t5 = make(model, "lean", name)
    if not isinstance(t5, LeanT5):
        raise ValueError(f"{name}: early exit needs a T5 / mT5 encoder-decoder, got {t5.arch}")
    shared = Shared(t5, exit_layer)
    small = ExitLM(model, tok, View(shared, deep=False), f"{name}@layer{exit_layer}")
    large = ExitLM(model, tok, View(shared, deep=True), name)
    check_pair(small, large)
    return small, large


def early_exit_pair(
    path: str | Path, exit_layer: int = 1, device="cpu", dtype="default", engine: str = "lean"
) -> tuple[ExitLM, ExitLM]:
    """exit_views of one checkpoint (a folder or hub id, loaded as models.load_model does)."""
    check_engine(engine)
    if engine == "hf":
        raise ValueError("engine: early exit runs the lean engine (a layer at a time); 'hf' cannot")
    model, tok = load_model(path, device, dtype)
    return exit_views(model, tok, str(path), exit_layer)
