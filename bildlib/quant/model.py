"""Quantizing a model's linear layers, and quantized checkpoints on disk.

Every nn.Linear of the large model except its output head (SqueezeLLM keeps embeddings and head in
16 bits) is quantized; the model then runs the dequantized weights, so both engines (the lean one
and transformers') and every decoder run the quantized model, and lossless BiLD over it equals its
own greedy output (tests/test_quant.py). A quantized checkpoint is a checkpoint folder like any
other (config, tokenizer, model.safetensors with the dequantized weights: what both engines load,
so the experiment harness runs it as it runs any checkpoint), plus quant.safetensors, the compact
form whose bytes a kernel reads (codes packed, tables, sparse parts), and quant.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bildlib import data
from bildlib.data import artifacts
from bildlib.quant.config import QuantConfig
from bildlib.quant.squeeze import squeeze
from bildlib.quant.uniform import int8, int8_parts, is_int8, rtn
from bildlib.quant.weights import QWeight

META = "quant.json"


def quantizable(model) -> list[str]:
    """Names of the linear layers to quantize: every nn.Linear but the output head."""
    head = model.get_output_embeddings()
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and m is not head]


def quantize_weight(w: torch.Tensor, cfg: QuantConfig, fisher: torch.Tensor | None = None,
                    name: str = "weight") -> QWeight:  # fmt: skip
    if cfg.method == "int8":
        return int8(w)
    if cfg.method == "rtn":
        return rtn(w, cfg.bits, cfg.group, name)
    if cfg.method == "squeeze":
        if cfg.fisher and fisher is None:
            raise ValueError(f"{cfg.label}: fisher weights are needed for {name} (fisher.fisher)")
        return squeeze(w, cfg.bits, fisher if cfg.fisher else None, cfg.outliers)
    raise ValueError(f"method {cfg.method!r} quantizes nothing")


def quantize(model, cfg: QuantConfig, fisher: dict | None = None) -> dict[str, QWeight]:
    """Quantizes model's linear layers (quantizable) in place, returning {name: QWeight}; int8's
    codes are kept on the weights for the lean engine's int8 products (put)."""
    if cfg.method == "none":
        return {}
    mods, q = dict(model.named_modules()), {}
    for n in quantizable(model):
        q[n] = quantize_weight(mods[n].weight, cfg, None if fisher is None else fisher[n], n)
    put(model, q)
    return q


@torch.no_grad()
def put(model, q: dict[str, QWeight]) -> None:
    """The dequantized weights into the model, in its dtype and memory layout; an int8 weight's
    codes and scale kept on it for the lean engine's int8 products (models.linear.Int8, as
    models.load.keep_int8 does for a loaded int8 checkpoint), any other's earlier codes dropped."""
    mods = dict(model.named_modules())
    for n, w in q.items():
        p = mods[n].weight
        if tuple(p.shape) != w.shape:
            raise ValueError(f"quantized weight {n}: shape {w.shape}, the model's is {tuple(p.shape)}")
        p.copy_(w.dequant(p.dtype).to(p.device))
        if is_int8(w):
            p._bild_int8 = tuple(t.to(p.device) for t in int8_parts(w))
        elif hasattr(p, "_bild_int8"):  # an earlier int8 quantization's codes: stale now
            del p._bild_int8


def _linear_bytes(model, names: list[str], q: dict[str, QWeight], dtype_bytes: int) -> int:
    """Bytes of the named linear layers: as q stores them, the others at dtype_bytes a weight."""
    mods = dict(model.named_modules())
    return sum(q[n].nbytes() if n in q else dtype_bytes * mods[n].weight.numel() for n in names)


def nbytes(model, q: dict[str, QWeight], dtype_bytes: int = 2) -> dict:
    """{"linear": bytes of the quantized layers as stored, "rest": every other parameter at
    dtype_bytes each (bf16), "total"}; without q, the linear layers at dtype_bytes too."""
    names = quantizable(model)
    lin = _linear_bytes(model, names, q, dtype_bytes)
    mods = dict(model.named_modules())
    seen, rest = {id(mods[n].weight) for n in names}, 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            rest += dtype_bytes * p.numel()
    return {"linear": lin, "rest": rest, "total": lin + rest}


def step_bytes(model, q: dict[str, QWeight], dtype_bytes: int = 2) -> int:
    """Bytes one decoder step reads: the decoder's linear layers (quantized where q has them) and the
    output head (dtype_bytes a weight). The encoder runs once per sentence and the embedding gives
    one row per token, so neither counts (an encoder-decoder; a decoder-only model has no prefix)."""
    names = quantizable(model)
    dec = [n for n in names if n.startswith("decoder.")] or names
    head = dtype_bytes * model.get_output_embeddings().weight.numel()
    return _linear_bytes(model, dec, q, dtype_bytes) + head


def save(out: Path, model, tok, cfg: QuantConfig, q: dict[str, QWeight], dtype: torch.dtype,
         meta: dict | None = None) -> None:  # fmt: skip
    """A quantized checkpoint in out/: the model with its dequantized weights in `dtype` (the base's
    stored dtype), which every loader and engine reads as any checkpoint; quant.safetensors, the
    compact form (packed codes, tables, sparse parts); quant.json, written last."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = model.to(dtype)
    with torch.no_grad():
        for p in model.parameters():  # a CPU float32 model's column-major weights (models.load_model)
            if not p.is_contiguous():
                p.data = p.data.contiguous()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    t: dict[str, torch.Tensor] = {}
    for n, w in q.items():
        t.update(w.tensors(n))
    with data.atomic_path(out / "quant.safetensors") as tmp:
        save_file({k: v.contiguous() for k, v in t.items()}, str(tmp))
    m = {"config": cfg.to_dict(), "label": cfg.label, "layers": list(q), **(meta or {})}
    m["file_bytes"] = (out / "quant.safetensors").stat().st_size  # on disk, beside `bytes`, the packed size
    with data.atomic_path(out / META) as tmp:
        tmp.write_text(json.dumps(m, indent=1) + "\n")
    artifacts.seal(out)  # every file's size and hash: a later build reuses it only while they match


def is_quantized(path: str | Path) -> bool:
    return (Path(path) / META).is_file()


def read_meta(path: str | Path) -> dict:
    f = Path(path) / META
    if not f.is_file():
        raise FileNotFoundError(f"{f}: not a quantized checkpoint (make quantized builds them)")
    return json.loads(f.read_text())


def load_quantized(path: str | Path) -> tuple[QuantConfig, dict[str, QWeight], dict]:
    """(config, {name: QWeight}, quant.json) of a quantized checkpoint's compact form."""
    m = read_meta(path)
    f = Path(path) / "quant.safetensors"
    try:
        t = load_file(str(f))
    except Exception as e:
        if type(e).__name__ != "SafetensorError":
            raise
        raise ValueError(f"cannot read {f}: {e}; build it again (python -m bildlib.quant.build)") from e
    return QuantConfig(**m["config"]), {n: QWeight.from_tensors(t, n) for n in m["layers"]}, m
