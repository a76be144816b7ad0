"""`LM`: one model at batch 1, the interface every decoder in bildlib.decoding drives
(start / forward / crop), and `load_pair`, the two models of BiLD checked to fit together."""

from __future__ import annotations

import collections.abc
import numbers
import weakref
from pathlib import Path

import torch

from bildlib.models import wholecall
from bildlib.models.engine import HF, check_engine, make
from bildlib.models.load import check_same_vocab, load_model, small_policy


class LM:
    """One model at batch 1, as BiLD's decoders drive it.

    The decoder sequence is [bos] + output, where bos is the decoder start token of an
    encoder-decoder model, or the last prompt token of a decoder-only one (start() prefills the
    rest of the prompt). `ids` are the decoder tokens in the KV cache. forward(tokens) runs
    exactly the tokens the cache has not seen, in one call, appends them to the cache and
    returns their logits (k, V): row i predicts the token after tokens[i]. crop(n) rolls the
    cache back to its first n decoder tokens (cross-attention and prompt stay).

    `engine` runs the calls (models.engine): "lean" (plain tensor ops on the model's weights,
    a preallocated cache), "native" (lean T5 with C++ pieces between its products, on a CPU),
    "hf" (the model's own forward), "static" (T5 at fixed shapes, CUDA graphs on a GPU;
    models.static_t5), or "auto": native, else lean, where supported.
    `impl` is the engine object; a lean one also runs a layer at a time (embed / layer / head).
    """

    def __init__(self, model, tokenizer, name: str = "model", engine: str = "auto"):
        self.model, self.tok, self.name = model.eval(), tokenizer, name
        # runs the calls (models.engine); an engine object is taken as is (models.early_exit's views)
        self.impl = make(self.model, engine, name) if isinstance(engine, str) else engine
        self.engine = "hf" if isinstance(self.impl, HF) else getattr(self.impl, "engine", "lean")
        self.is_encoder_decoder = bool(model.config.is_encoder_decoder)
        self.device = model.device
        self.width = model.config.get_text_config(decoder=True).vocab_size  # logits columns returned
        self.vocab = len(tokenizer)  # source ids must lie in [0, vocab)
        self.max_source = max_source(model.config)  # the longest source (or prompt) start() takes
        self.partners = weakref.WeakSet()  # large models check_pair accepted this one with
        self.eos = tokenizer.eos_token_id
        self.ids: list[int] = []
        self.source = None  # (1, S): the current source (or prompt); None before start()
        self._source = None  # (1, S) source or prompt not yet encoded / prefilled
        # a lean engine's whole decoder call checked here, op families switched where it needs
        # (models.wholecall); None for engines that cannot switch (hf, static)
        self.call_check = wholecall.settle(self)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | torch.device = "cpu",
        dtype: str | torch.dtype = "default",
        engine: str = "auto",
    ) -> LM:
        """A folder or hub id (see models.load.locate) on `device` in `dtype` (resolve_dtype),
        run by `engine` ("auto": native or lean where supported, "lean", "native", "hf"; models.engine)."""
        check_engine(engine)  # before loading anything
        model, tok = load_model(path, device, dtype)
        return cls(model, tok, str(path), engine)

    @property
    def precision(self) -> str:
        """What the model computes in, as results name it: "int8" (dtype "int8": the native engine's
        int8 products over float32 weights), else its dtype ("float32", "bfloat16", ...)."""
        if getattr(self.impl, "int8", False):
            return "int8"
        return str(self.model.dtype).removeprefix("torch.")

    def encode(self, text: str, max_tokens: int | None = None) -> list[int]:
        """text's token ids, truncated to max_tokens (the tokenizer's own truncation) where given."""
        if max_tokens is None:
            return self.tok(text)["input_ids"]
        return self.tok(text, truncation=True, max_length=max_tokens)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    @torch.inference_mode()
    def start(self, source_ids) -> int:
        """Take a new source; returns bos, the first decoder token. The encoder (or the prompt
        prefill) runs at the first forward(), so a model the decoder never calls costs nothing."""
        x = check_source(source_ids, self.vocab, self.max_source, self.name).to(self.device)  # (1, S)
        wholecall.recheck(self)  # threads changed since
        self.ids, self.source, self._source = [], x, x
        if self.is_encoder_decoder:
            return int(self.model.config.decoder_start_token_id)
        return int(x[0, -1])

    @property
    def pending(self) -> bool:
        """Whether the current source waits for the first forward() to be encoded (or prefilled)."""
        return self._source is not None

    @torch.inference_mode()
    def begin(self) -> None:
        """Encode (or prefill) the source now if it waits; forward() calls it. A decoder that
        drives the engine a layer at a time (decoding.calm) calls it first."""
        if self.source is None:
            raise RuntimeError(f"{self.name}: call start() before forward()")
        if self._source is not None:
            self.impl.begin(self._source)
            self._source = None

    @torch.inference_mode()
    def forward(self, tokens: list[int]) -> torch.Tensor:
        if not tokens:
            raise ValueError("forward() needs at least one token")
        if self._source is not None or self.source is None:
            self.begin()
        x = torch.tensor(tokens, dtype=torch.long, device=self.device)  # (k,)
        logits = self.impl.forward(x, len(self.ids))
        self.ids += tokens
        return logits if logits.shape[1] == self.width else logits[:, : self.width]  # (k, V)

    @torch.inference_mode()
    def draft(self, seq: list[int], run):
        """The small model's run (models.native.plan.Run) from seq, whose first len(ids) tokens
        the cache holds, as one engine call where the engine has one (models.native.NativeT5);
        returns its plan.Drafted, the tokens kept (not yet in seq), or None: the caller's loop
        runs (decoding.draft). The cache then holds every token a step ran."""
        f = getattr(self.impl, "draft", None)
        if f is None:
            return None
        self.begin()  # encodes a pending source; refuses before start()
        tokens = seq[len(self.ids) :]
        out = f(tokens, len(self.ids), self.width, run)
        if out is not None:  # step 1 ran tokens, step j > 1 the token step j - 1 wrote
            self.ids += tokens + out.tokens[: out.steps - 1]
        return out

    def crop(self, n: int) -> None:
        if not 0 <= n <= len(self.ids):
            raise ValueError(f"{self.name}: cannot crop to {n} tokens, the cache holds {len(self.ids)}")
        if n < len(self.ids):
            self.impl.crop(len(self.ids) - n)
            del self.ids[n:]


def load_pair(
    small: str | Path,
    large: str | Path,
    device: str | torch.device = "cpu",
    dtype: str = "default",
    engine: str = "auto",
) -> tuple[LM, LM]:
    """The two models of BiLD, checked to share one vocabulary and one architecture kind; dtype
    "mixed" runs the small one in float32 (models.small_policy)."""
    s = LM.from_pretrained(small, device, small_policy(dtype, True), engine)
    lg = LM.from_pretrained(large, device, small_policy(dtype, False), engine)
    check_pair(s, lg)
    return s, lg


MAX_SOURCE = 4096  # tokens: an encoder-decoder's longest source (max_source)


def max_source(config) -> int:
    """The most source (or prompt) tokens a model takes: a decoder-only model's positions, less
    one for the first new token; else MAX_SOURCE (T5's relative positions set no limit, but a
    source of thousands of tokens runs for minutes; set an LM's max_source to change it)."""
    if config.is_encoder_decoder:
        return MAX_SOURCE
    positions = getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)
    return positions - 1 if isinstance(positions, int) and positions > 1 else MAX_SOURCE


def check_source(source_ids, vocab: int, limit: int | None = None, model: str = "the model") -> torch.Tensor:
    """One source as a (1, S) long tensor. Every decoder is batch 1: a nested list or a 2-D
    tensor with more than one row is an error (reshaping would decode the concatenation), as are
    non-integer ids (a cast would truncate them), ids outside the vocabulary [0, vocab) and more
    than limit ids (LM.max_source)."""
    if isinstance(source_ids, torch.Tensor) or hasattr(source_ids, "__array__"):
        x = torch.as_tensor(source_ids)
        if x.dim() > 2 or x.dim() == 2 and x.shape[0] != 1:
            raise ValueError(f"source_ids must be one sequence (batch 1), got shape {tuple(x.shape)}")
        if x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
            raise TypeError(f"source_ids must be integer token ids, got a {x.dtype} tensor")
        x = x.reshape(1, -1).long()
    else:
        if isinstance(source_ids, collections.abc.Iterator):  # the second model would find it empty
            raise TypeError(f"source_ids must be a sequence (a list or a tensor), got a "
                            f"{type(source_ids).__name__}: each model reads it, and an iterator is empty "
                            "after the first; pass list(...)")  # fmt: skip
        ids = list(source_ids)
        if any(isinstance(i, list | tuple) or getattr(i, "ndim", 0) > 0 for i in ids):
            raise ValueError("source_ids must be one sequence of ids (batch 1), got a nested sequence")
        bad = [i for i in ids if not isinstance(i, numbers.Integral) or isinstance(i, bool)]
        if bad:
            raise TypeError(f"source_ids must be integer token ids, got {bad[0]!r}")
        x = torch.tensor([ids], dtype=torch.long)  # (1, S)
    if x.shape[1] == 0:
        raise ValueError("source_ids is empty")
    if limit is not None and x.shape[1] > limit:
        raise ValueError(f"source_ids has {x.shape[1]} tokens; {model} takes at most {limit} (its "
                         "max_source: models.lm.max_source); shorten or split the source")  # fmt: skip
    lo, hi = x.min().item(), x.max().item()
    if lo < 0 or hi >= vocab:
        bad = lo if lo < 0 else hi
        raise ValueError(f"source_ids must lie in [0, {vocab}) (the tokenizer's vocabulary), got {bad}")
    return x


def check_pair(s: LM, lg: LM) -> None:
    """s and lg fit together as BiLD's small and large model: one vocabulary, one architecture
    kind. Remembered on s (s.partners), so decoders check every call at no cost."""
    if lg in s.partners:
        return
    if s is lg:
        raise ValueError(f"small and large are the same model ({s.name}): BiLD needs two, each with its own "
                         "cache (load_pair, or LM.from_pretrained twice)")  # fmt: skip
    check_same_vocab(s.tok, lg.tok, s.name, lg.name)
    if s.is_encoder_decoder != lg.is_encoder_decoder:
        raise ValueError(f"{s.name} and {lg.name}: one is an encoder-decoder, the other decoder-only")
    s.width = lg.width = min(s.width, lg.width)  # padded embedding rows past the tokenizer never win
    s.partners.add(lg)
