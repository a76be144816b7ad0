"""The paper checkpoints' architectures (shapes.json beside this file) as random-init models: the same
config fields (activation, tying, relative-attention buckets, vocabulary, special ids) at the
real size or a reduced width, saved under their hub ids with a tokenizer of the same size and
special tokens, so that $BILD_MODELS finds them where `from_pretrained` would find the hub's.

    mirror(Path("build/dryrun/models"), ["iwslt2017-mt5"], Scale())   # reduced width
    model_for("mt5-large", dtype=torch.bfloat16)                        # the real size, in memory
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, PreTrainedTokenizerFast

from bildlib.experiments import presets

SHAPES_FILE = Path(__file__).with_name("shapes.json")  # package data: an installed bildlib has it


def shapes() -> dict:
    return json.loads(SHAPES_FILE.read_text())


@dataclass(frozen=True)
class Scale:
    """A reduced size: width d_model, d_kv per head, heads, feed-forward d_ff, and layers (the
    large model gets `large_layers`). Everything else stays as the real config has it."""

    d_model: int = 32
    d_kv: int = 8
    heads: int = 4
    d_ff: int = 64
    layers: int = 2
    large_layers: int = 3


def config(shape: str, scale: Scale | None = None):
    """The transformers config of `shape` ("t5-small", "mt5-large", "gpt2", ...), reduced by `scale`."""
    s = shapes()["shapes"]
    if shape not in s:
        raise ValueError(f"shape must be one of {sorted(s)}, got {shape!r}")
    fields = {k: v for k, v in s[shape].items() if k not in ("architectures", "model_type")}
    if scale is not None:
        n = scale.large_layers if shape.endswith("large") else scale.layers
        if s[shape]["model_type"] == "gpt2":
            fields |= {"n_embd": scale.d_model, "n_head": scale.heads, "n_inner": scale.d_ff, "n_layer": n}
        else:
            fields |= {"d_model": scale.d_model, "d_kv": scale.d_kv, "num_heads": scale.heads,
                       "d_ff": scale.d_ff, "num_layers": n, "num_decoder_layers": n}  # fmt: skip
    return AutoConfig.for_model(s[shape]["model_type"], **fields)


def model_for(shape: str, scale: Scale | None = None, seed: int = 0, dtype: torch.dtype = torch.float32,
              device: str | torch.device = "cpu"):  # fmt: skip
    """A random-init model of `shape`. An untied shape (mT5) gets its own lm_head, as the real
    checkpoints have (transformers 5 ties mT5 at init; it keeps a checkpoint's own lm_head).
    device: where the weights are drawn (a GPU draws mT5-large in seconds; its draws differ)."""
    torch.manual_seed(seed)
    cfg = config(shape, scale)
    if not cfg.is_encoder_decoder:  # GPT-2: transformers' own init (N(0, 0.02), tied head)
        return AutoModelForCausalLM.from_config(cfg).to(device=device, dtype=dtype).eval()
    with torch.device("meta"):
        m = AutoModelForSeq2SeqLM.from_config(cfg)
    m = m.to_empty(device=device)  # float32 here, dtype at the end: the same draws in every dtype
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():  # layer norms at 1, the rest N(0, 1/sqrt(fan_in))
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5, generator=g)  # in place: 1.2 B values, no copy
        m.encoder.set_input_embeddings(m.shared)  # one embedding, as in every T5 checkpoint
        m.decoder.set_input_embeddings(m.shared)
        if shapes()["shapes"][shape].get("tie_word_embeddings") is False:
            w = torch.empty(m.lm_head.weight.shape, device=device).normal_(0.0, 0.05, generator=g)
            m.lm_head.weight = torch.nn.Parameter(w)
        else:
            m.lm_head.weight = m.shared.weight
        m.decoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.mul_(0.1)
        m.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.mul_(0.1)
    return m.to(dtype).eval()


def tokenizer(kind: str, words: list[str]) -> PreTrainedTokenizerFast:
    """A sentencepiece-style (Unigram, "▁" word marks) tokenizer of the real size and special ids
    of `kind` ("t5" or "mt5"): <pad> 0, </s> 1, <unk> 2, then `words`, then filler pieces. For
    "gpt2": `words` and filler, <|endoftext|> last (50256), no pad, nothing appended."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    t = shapes()["tokenizers"][kind]
    if kind == "gpt2":
        pieces = ["<unk>"] + [f"▁{w}" for w in dict.fromkeys(words)]
        pieces += [f"▁x{i}" for i in range(t["size"] - 1 - len(pieces))] + ["<|endoftext|>"]
        tk = Tokenizer(models.Unigram([(p, -5.0) for p in pieces], unk_id=0))
        tk.pre_tokenizer, tk.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
        eos = "<|endoftext|>"
        return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=eos, bos_token=eos, unk_token="<unk>")
    pieces = ["<pad>", "</s>", "<unk>"] + [f"▁{w}" for w in dict.fromkeys(words)]
    pieces += [f"▁x{i}" for i in range(t["size"] - len(pieces))]
    tk = Tokenizer(models.Unigram([(p, -1.0 if i < 3 else -5.0) for i, p in enumerate(pieces)], unk_id=2))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    special = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, **special)
    tok._tokenizer.post_processor = _eos_after()  # T5 appends </s> to every input
    return tok


def _eos_after():
    from tokenizers import processors

    return processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B </s>",
                                         special_tokens=[("</s>", 1)])  # fmt: skip


def save(model, tok, path: Path, shape: str) -> Path:
    """model and tok under path, with config.json as the real checkpoint serializes it."""
    model.save_pretrained(path)
    tok.save_pretrained(path)
    real = shapes()["shapes"][shape]
    cfg = json.loads((path / "config.json").read_text())
    cfg |= {k: real[k] for k in ("tie_word_embeddings",) if k in real}
    (path / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    if real.get("tie_word_embeddings") is False:
        from safetensors.torch import load_file, save_file

        f = path / "model.safetensors"
        sd = load_file(f)
        if "lm_head.weight" not in sd:  # transformers drops it as tied: the real checkpoint has it
            sd["lm_head.weight"] = model.lm_head.weight.detach().contiguous()
            save_file(sd, f, metadata={"format": "pt"})
    return path


def mirror(root: Path, names: list[str], scale: Scale | None = Scale(), words: list[str] = ()) -> Path:
    """Random models of the presets `names`, under root/<hub id> (pass root as $BILD_MODELS)."""
    s = shapes()
    for i, name in enumerate(names):
        p = presets.get(name)
        for j, which in enumerate(("large", "small", "aligned")):
            hub = getattr(p, which)
            if hub is None:  # the LM presets have no aligned model
                continue
            shape = s["checkpoints"][hub]
            path = root / hub
            if (path / "model.safetensors").is_file():
                continue
            tok = tokenizer(shape.split("-")[0], list(words))
            save(model_for(shape, scale, seed=10 * i + j), tok, path, shape)
    return root
