"""Models: loading (local folders or hub names, clear errors, vocabulary checks) and `LM`,
the batch-1 interface every decoder in bildlib.decoding drives (start / forward / crop)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    DynamicCache,
    EncoderDecoderCache,
)

from bildlib import data


class ModelUnavailableError(FileNotFoundError):
    """A hub model that is neither cached locally nor reachable."""


def resolve_device(device: str) -> torch.device:
    """ "auto" -> cuda when available, else cpu; asking for cuda without it is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available")
    return torch.device(device)


def _must_exist_locally(path: str | Path) -> None:
    """Hub ids are `name` or `owner/name`; anything else is a folder, and must exist."""
    p = str(path)
    if not Path(p).exists() and (Path(p).is_absolute() or p.startswith(".") or p.count("/") > 1):
        raise FileNotFoundError(f"cannot load model {p!r}: no such folder")


def _hub_kwargs(path: str | Path) -> dict:
    """Hub ids only: when the Hub cannot be reached, use the local cache (or fail at once)."""
    if Path(path).exists() or data._offline() or data.hub_reachable():
        return {}
    return {"local_files_only": True}


def _unavailable(path, e: Exception) -> Exception:
    if Path(path).exists():
        return FileNotFoundError(f"cannot load model {str(path)!r} (local folder): {e}")
    return ModelUnavailableError(
        f"cannot load model {str(path)!r}: it is not a local folder and not in the Hugging Face cache, "
        "and the Hub is not reachable from here (or the name is wrong). On a machine with internet run "
        f'`python -c "import transformers as t; t.AutoModel.from_pretrained({str(path)!r})"` and copy '
        f"~/.cache/huggingface (or $HF_HOME) here, or pass a local folder. ({type(e).__name__}: {e})"
    )


def load_tokenizer(path: str | Path):
    _must_exist_locally(path)
    try:
        return AutoTokenizer.from_pretrained(str(path), **_hub_kwargs(path))
    except (OSError, ValueError) as e:
        raise _unavailable(path, e) from e


def load_seq2seq(path: str | Path, device: str = "cpu"):
    """(model, tokenizer) in eval mode; fp32 on CPU whatever dtype the weights are stored in."""
    dev = resolve_device(device)
    tok = load_tokenizer(path)
    try:
        model = AutoModelForSeq2SeqLM.from_pretrained(
            str(path), dtype=torch.float32 if dev.type == "cpu" else "auto", **_hub_kwargs(path)
        )
    except (OSError, ValueError) as e:
        raise _unavailable(path, e) from e
    check_vocab(tok, model.config, str(path))
    return model.to(dev).eval(), tok


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX); without it bf16
    matmuls are emulated and slower than fp32."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | None, device: torch.device, stored: torch.dtype) -> torch.dtype:
    """The dtype a model runs in. None: fp32 on CPU, the stored dtype on GPU. "auto": the stored
    dtype, except half precision on a CPU without hardware bf16 (fp16 always; bf16 unless
    `native_bf16()`), which runs in fp32. On this project's CPU a bf16 large model's 11-token call
    costs ~1.2 single-token steps against ~1.3 in fp32 (README, Results): BiLD's parallel call
    needs the first."""
    if dtype is None:
        return torch.float32 if device.type == "cpu" else stored
    if dtype == "auto":
        if device.type == "cpu" and stored != torch.float32:
            return stored if stored == torch.bfloat16 and native_bf16() else torch.float32
        return stored
    return DTYPES[dtype]


def stored_dtype(path: str | Path) -> torch.dtype | None:
    """The dtype of the weights in a local folder's safetensors (its config may declare fp32 to
    make from_pretrained upcast, as bildlib.train does); None for a hub id or other formats."""
    files = sorted(Path(path).glob("*.safetensors")) if Path(path).is_dir() else []
    if not files:
        return None
    from safetensors import safe_open

    with safe_open(str(files[0]), "pt") as f:
        return f.get_tensor(next(iter(f.keys()))).dtype


def check_dtype(dtype: str | None) -> None:
    if dtype not in (None, "auto", *DTYPES):
        raise ValueError(f"dtype must be auto, {', '.join(DTYPES)} or None (default); got {dtype!r}")


def load_model(path: str | Path, device: str = "cpu", dtype: str | None = None):
    """(model, tokenizer) for an encoder-decoder or a decoder-only checkpoint, in eval mode, in
    `dtype` (see resolve_dtype; the default, fp32 on CPU, is what training and the cards use)."""
    check_dtype(dtype)
    dev = resolve_device(device)
    tok = load_tokenizer(path)
    try:
        cfg = AutoConfig.from_pretrained(str(path), **_hub_kwargs(path))
        auto = AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM
        model = auto.from_pretrained(str(path), dtype="auto", **_hub_kwargs(path))
    except (OSError, ValueError) as e:
        raise _unavailable(path, e) from e
    check_vocab(tok, model.config, str(path))
    stored = stored_dtype(path) or model.dtype
    return model.to(dev, resolve_dtype(dtype, dev, stored)).eval(), tok


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


def check_same_vocab(tok_small, tok_large, small: str = "small", large: str = "large") -> None:
    """BiLD compares token ids across the two models: their tokenizers must map the same strings
    to the same ids (embedding sizes alone say nothing: T5/mT5 pad their embedding matrices)."""
    vs, vl = tok_small.get_vocab(), tok_large.get_vocab()
    if vs != vl:
        only_s, only_l = len(vs.keys() - vl.keys()), len(vl.keys() - vs.keys())
        moved = sum(vs[t] != vl[t] for t in vs.keys() & vl.keys())
        raise ValueError(
            f"{small} and {large} do not share a vocabulary ({len(vs)} vs {len(vl)} entries; "
            f"{only_s} only in {small}, {only_l} only in {large}, {moved} with different ids)"
        )
    for what in ("eos_token_id", "pad_token_id", "bos_token_id"):
        a, b = getattr(tok_small, what), getattr(tok_large, what)
        if a != b:
            raise ValueError(f"{small} and {large} tokenizers differ in {what}: {a} vs {b}")


class LM:
    """One model at batch 1, as BiLD's decoders drive it.

    The decoder sequence is [bos] + output, where bos is the decoder start token of an
    encoder-decoder model, or the last prompt token of a decoder-only one (start() prefills the
    rest of the prompt). `ids` are the decoder tokens in the KV cache. forward(tokens) runs
    exactly the tokens the cache has not seen, in one call, appends them to the cache and
    returns their logits (k, V): row i predicts the token after tokens[i]. crop(n) rolls the
    cache back to its first n decoder tokens (cross-attention and prompt stay).
    """

    def __init__(self, model, tokenizer, name: str = "model"):
        self.model, self.tok, self.name = model.eval(), tokenizer, name
        self.is_encoder_decoder = bool(model.config.is_encoder_decoder)
        self.device = model.device
        self.width = model.config.get_text_config(decoder=True).vocab_size  # logits columns returned
        self.eos = tokenizer.eos_token_id
        self.ids: list[int] = []
        self.cache = None
        self.enc = None  # encoder outputs (encoder-decoder)
        self.prompt = None  # prompt tokens before bos (decoder-only)
        self._source = None  # (1, S) source or prompt not yet encoded / prefilled

    @classmethod
    def from_pretrained(cls, path: str | Path, device: str = "cpu", dtype: str | None = None) -> LM:
        model, tok = load_model(path, device, dtype)
        return cls(model, tok, str(path))

    def encode(self, text: str) -> list[int]:
        return self.tok(text)["input_ids"]

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    @torch.inference_mode()
    def start(self, source_ids) -> int:
        """Take a new source; returns bos, the first decoder token. The encoder (or the prompt
        prefill) runs at the first forward(), so a model the decoder never calls costs nothing."""
        x = torch.as_tensor(source_ids, dtype=torch.long, device=self.device).reshape(1, -1)  # (1, S)
        if x.shape[1] == 0:
            raise ValueError("source_ids is empty")
        self.ids, self.enc, self._source = [], None, x
        if self.is_encoder_decoder:
            self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
            return int(self.model.config.decoder_start_token_id)
        self.cache = DynamicCache(config=self.model.config)
        self.prompt = x[:, :-1]  # (1, S-1), prefilled at the first forward()
        return int(x[0, -1])

    def _encode(self) -> None:
        x, self._source = self._source, None
        if self.is_encoder_decoder:
            self.enc = self.model.get_encoder()(input_ids=x)
        elif x.shape[1] > 1:
            self.model(input_ids=x[:, :-1], past_key_values=self.cache, use_cache=True, logits_to_keep=1)

    @torch.inference_mode()
    def forward(self, tokens: list[int]) -> torch.Tensor:
        if self.cache is None:
            raise RuntimeError(f"{self.name}: call start() before forward()")
        if not tokens:
            raise ValueError("forward() needs at least one token")
        if self._source is not None:
            self._encode()
        x = torch.tensor([tokens], dtype=torch.long, device=self.device)  # (1, k)
        if self.is_encoder_decoder:
            out = self.model(
                encoder_outputs=self.enc, decoder_input_ids=x, past_key_values=self.cache, use_cache=True
            )
        else:
            out = self.model(input_ids=x, past_key_values=self.cache, use_cache=True)
        self.ids += tokens
        return out.logits[0, :, : self.width]  # (k, V)

    def crop(self, n: int) -> None:
        if not 0 <= n <= len(self.ids):
            raise ValueError(f"{self.name}: cannot crop to {n} tokens, the cache holds {len(self.ids)}")
        if n < len(self.ids):
            self.cache.crop(n - len(self.ids))  # a negative argument removes that many tokens
            del self.ids[n:]


def load_pair(small: str | Path, large: str | Path, device: str = "cpu") -> tuple[LM, LM]:
    """The two models of BiLD, checked to share one vocabulary and one architecture kind."""
    s, lg = LM.from_pretrained(small, device), LM.from_pretrained(large, device)
    check_pair(s, lg)
    return s, lg


def check_pair(s: LM, lg: LM) -> None:
    check_same_vocab(s.tok, lg.tok, s.name, lg.name)
    if s.is_encoder_decoder != lg.is_encoder_decoder:
        raise ValueError(f"{s.name} and {lg.name}: one is an encoder-decoder, the other decoder-only")
    s.width = lg.width = min(s.width, lg.width)  # padded embedding rows past the tokenizer never win
