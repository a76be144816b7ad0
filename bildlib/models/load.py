"""Loading models: where a checkpoint is (one resolver), the device and dtype it runs in, and the
checks that a tokenizer fits its model and that two models share one vocabulary."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer
from transformers.utils import logging as hf_logging

from bildlib import REPO_ROOT, data, where
from bildlib.data import shipped
from bildlib.models.layout import column_major


class ModelUnavailableError(FileNotFoundError):
    """A hub model that is neither cached locally nor reachable."""


def locate(name: str | Path) -> str:
    """Where a model is: a folder (as given, i.e. from the working directory, or from the
    repository root), a `$BILD_MODELS/<owner>/<name>` mirror of a hub id, or the hub id itself.
    Hub ids are `name` or `owner/name`; anything else that is not a folder is an error."""
    s = str(name)
    for p in (Path(s), REPO_ROOT / s):
        if p.is_dir():
            return str(p.resolve())
    mirror = os.environ.get("BILD_MODELS")
    if mirror and (Path(mirror) / s).is_dir():
        return str(Path(mirror) / s)
    if Path(s).is_absolute() or s.startswith(".") or s.count("/") > 1:
        raise FileNotFoundError(f"cannot load model {s!r}: no such folder; {where()}")
    return s


def resolve_device(device: str | torch.device) -> torch.device:
    """ "auto" -> cuda when available, else cpu; asking for cuda without it is an error."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = device if isinstance(device, torch.device) else torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto; got {device!r}") from e
    if dev.type not in ("cpu", "cuda"):  # meta holds no weights; mps, xpu, ... are untested here
        raise ValueError(f"device must be cpu, cuda, cuda:N or auto; got {device!r} (bildlib runs on "
                         "CPUs and CUDA GPUs)")  # fmt: skip
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available")
    return dev


def native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX); without it bf16
    matmuls are emulated and slower than fp32."""
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
POLICIES = ("default", "auto", "mixed", *DTYPES, "int8")
# "int8": the weights in float32, every weight product of the native engine in int8 (models.linear.NativeInt8)


def check_dtype(dtype: str | torch.dtype) -> None:
    if not isinstance(dtype, torch.dtype) and dtype not in POLICIES:
        raise ValueError(f"dtype must be one of {', '.join(POLICIES)}; got {dtype!r}")


def small_policy(dtype: str | torch.dtype, small: bool) -> str | torch.dtype:
    """The policy a model runs under in a run of policy `dtype`: "mixed" is float32 for BiLD's
    small models and "auto" for the others -- on a CPU a small model's matrices are too small for
    bf16 to pay (docs/data-and-models.md, Students: the measured steps); every other policy is
    the same for all models."""
    if dtype == "mixed":
        return "float32" if small else "auto"
    return dtype


def resolve_dtype(dtype: str | torch.dtype, device: torch.device, stored: torch.dtype) -> torch.dtype:
    """The dtype a model runs in. "auto": the stored dtype, except half precision on a CPU without
    hardware bf16 (fp16 always; bf16 unless `native_bf16()`), which runs in fp32. "default" is
    "auto", chosen by measurement (docs/results.md, *Which dtype*): on this project's CPU the
    shipped bf16 pair keeps vanilla large's BLEU on all of val within 0.1 of fp32 and decodes
    faster, and its large model's multi-token call is relatively cheaper, which BiLD needs.
    "float32" and "bfloat16" force one (tests that compare with HF to 1e-4 use float32). "mixed"
    is "auto" here; a run (experiments.Models, small_policy) runs its small models in float32 under
    it. "int8" is float32 weights on a CPU whose products the native engine runs in int8
    (models.engine.make). A torch.dtype is kept."""
    check_dtype(dtype)
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "int8":
        if device.type != "cpu":
            raise ValueError("dtype='int8' runs on a CPU (the native engine's int8 products); "
                             f"got device={str(device)!r}")
        return torch.float32
    if dtype in ("default", "auto", "mixed"):
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

    try:
        with safe_open(str(files[0]), "pt") as f:
            return f.get_tensor(next(iter(f.keys()))).dtype
    except Exception as e:
        if type(e).__name__ != "SafetensorError":
            raise
        raise damaged(path, e) from e


def _hub_kwargs(path: str) -> dict:
    """Hub ids only: when the Hub cannot be reached, use the local cache (or fail at once)."""
    if Path(path).exists() or data._offline() or data.hub_reachable():
        return {}
    return {"local_files_only": True}


def damaged(path: str | Path, e: Exception) -> ValueError:
    """A checkpoint folder whose weights cannot be read, its files named."""
    files = ", ".join(str(f) for f in sorted(Path(path).glob("*.safetensors"))) or str(path)
    return ValueError(f"cannot read the weights of {str(path)!r} ({files}): {type(e).__name__}: {e}. "
                      "The file is damaged or cut short: build the checkpoint again (its make target)")


def _unavailable(path: str, e: Exception) -> Exception:
    if Path(path).exists():
        return FileNotFoundError(f"cannot load model {path!r} (local folder): {e}")
    return ModelUnavailableError(
        f"cannot load model {path!r}: it is not a local folder and not in the Hugging Face cache, "
        "and the Hub is not reachable from here (or the name is wrong). On a machine with internet run "
        f'`python -c "import transformers as t; t.AutoModel.from_pretrained({path!r})"` and copy '
        f"~/.cache/huggingface (or $HF_HOME) here, or pass a local folder. ({type(e).__name__}: {e})"
    )


def load_tokenizer(name: str | Path):
    path = locate(name)
    shipped.verify(path)  # a shipped folder's files against data/checkpoints/SHA256SUMS, once
    try:
        return AutoTokenizer.from_pretrained(path, **_hub_kwargs(path))
    except (OSError, ValueError) as e:
        raise _unavailable(path, e) from e


@contextmanager
def quiet_loading() -> Iterator[None]:
    """transformers' "Loading weights" bars off while bildlib loads a model (a notebook shows them
    in red for every model of a sweep), and back as they were afterwards."""
    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load_model(name: str | Path, device: str | torch.device = "cpu", dtype: str | torch.dtype = "default"):
    """(model, tokenizer) for an encoder-decoder or a decoder-only checkpoint (a folder or a hub
    id, see `locate`), in eval mode, on `device`, in `dtype` (see resolve_dtype). On a CPU in
    float32 its linear weights are stored column-major (models.layout.column_major)."""
    check_dtype(dtype)
    dev = resolve_device(device)
    path = locate(name)
    tok = load_tokenizer(path)
    try:
        cfg = AutoConfig.from_pretrained(path, **_hub_kwargs(path))
        auto = AutoModelForSeq2SeqLM if cfg.is_encoder_decoder else AutoModelForCausalLM
        with quiet_loading():
            model = auto.from_pretrained(path, dtype="auto", **_hub_kwargs(path))
    except (OSError, ValueError) as e:
        raise _unavailable(path, e) from e
    except Exception as e:  # safetensors' own error, over a truncated or damaged file: name the file
        if type(e).__name__ != "SafetensorError":
            raise
        raise damaged(path, e) from e
    check_vocab(tok, model.config, path)
    stored = stored_dtype(path) or model.dtype
    model = model.to(dev, resolve_dtype(dtype, dev, stored)).eval()
    column_major(model)  # CPU float32, every engine, HF's too: faster one-row products (docs/engines.md)
    keep_int8(model, path)  # an int8 checkpoint's codes, for the lean engine's int8 products
    model.bild_int8 = dtype == "int8"  # the engine quantizes its products (models.engine.make)
    return model, tok


def keep_int8(model, path: str | Path) -> int:
    """For an int8 checkpoint (bildlib.quant's quant.json says int8), each quantized layer's int8
    codes and scale kept on its weight (`weight._bild_int8`), where models.linear.Int8 finds them.
    Read here from quant.safetensors' layout (quant.weights: int8 codes one byte each, shifted by
    128; table[j] = (j - 128) scale), so models does not import quant. Returns how many layers."""
    import json

    from safetensors.torch import load_file

    f = Path(path) / "quant.json"
    meta = json.loads(f.read_text()) if f.is_file() else {}
    if meta.get("config", {}).get("method") != "int8":
        return 0
    try:
        t = load_file(str(Path(path) / "quant.safetensors"))
    except Exception as e:
        if type(e).__name__ != "SafetensorError":
            raise
        raise ValueError(f"cannot read {Path(path) / 'quant.safetensors'}: {e}; build it again "
                         "(python -m bildlib.quant.build)") from e  # fmt: skip
    mods = dict(model.named_modules())
    layers = meta["layers"]
    for n in layers:
        p = mods[n].weight
        codes = t[f"{n}.codes"][: p.numel()].view(p.shape)
        q = (codes.to(torch.int16) - 128).to(torch.int8)
        p._bild_int8 = (q.to(p.device), t[f"{n}.table"][:, 0, 129].to(p.device))
    return len(layers)


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
