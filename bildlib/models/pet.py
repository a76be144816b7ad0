"""PET's parameter-shared student (Jeon, Park, Kim, Kang, *PET: Parameter-efficient Knowledge
Distillation on Transformer*, PLoS ONE 18(7): e0288060, 2023) as a T5 with tied weights.

Three kinds of sharing, each optional, as this project reads the paper's description:
- **layer pairs**: in the pair (a, b) the later block b runs block a's weights, in the encoder
  and in the decoder; PET pairs (L1, L3) and (L2, L4), `pairs=[[0, 2], [1, 3]]` (0-based).
  The decoder's encoder-decoder attention keeps its own K and V in every block: the paper found
  that sharing them destroyed quality.
- **encoder Q/K** (`encoder_qk`): in each pair, the query of one block is the key of the other
  (Q_a = K_b and Q_b = K_a; with the layer pairs on, a block's query and key are then one matrix).
- **decoder queries** (`decoder_q`): each decoder block's self-attention query is its
  encoder-decoder attention's query.

The ties are transformers' own (`_tied_weights_keys`, target -> source), so `save_pretrained`
writes each shared tensor once and `from_pretrained` ties them again: one storage, not copies.
The model is a `T5ForConditionalGeneration` in every other way, registered with the Auto classes
under model_type "bild-pet-t5", and the lean engine runs it as a T5.
"""

from __future__ import annotations

from transformers import AutoConfig, AutoModelForSeq2SeqLM, T5Config, T5ForConditionalGeneration

# each block's attentions, by HF T5's parameter names (an encoder block has the first only)
ATTN = {"self": "layer.0.SelfAttention", "cross": "layer.1.EncDecAttention"}


class PetConfig(T5Config):
    model_type = "bild-pet-t5"

    def __init__(self, pet_pairs=(), pet_encoder_qk: bool = False, pet_decoder_q: bool = False, **kw):
        self.pet_pairs = [list(p) for p in pet_pairs]  # [[a, b], ...]: block b runs block a's weights
        self.pet_encoder_qk = bool(pet_encoder_qk)
        self.pet_decoder_q = bool(pet_decoder_q)
        super().__init__(**kw)


def check(config: PetConfig) -> None:
    """A clear error for a pair that names a missing block, a block in two pairs, or a pair (a, b)
    with a >= b."""
    seen: set[int] = set()
    n = min(config.num_layers, config.num_decoder_layers)
    for p in config.pet_pairs:
        if len(p) != 2 or not all(isinstance(i, int) for i in p):
            raise ValueError(f"pet_pairs: each pair is two block indices [a, b], got {p!r}")
        a, b = p
        if not 0 <= a < b < n:
            raise ValueError(f"pet_pairs: pair {p} names a missing block or is not a < b "
                             f"(blocks 0..{n - 1} in both the encoder and the decoder)")  # fmt: skip
        if seen & {a, b}:
            raise ValueError(f"pet_pairs: block {sorted(seen & {a, b})[0]} is in two pairs")
        seen |= {a, b}
    if config.pet_encoder_qk and not config.pet_pairs:
        raise ValueError("pet_encoder_qk ties queries and keys within pairs: it needs pet_pairs")
    if not config.tie_word_embeddings:
        raise ValueError("tie_word_embeddings: transformers ties nothing without it, PET's weights included")


def ties(config: PetConfig, names: list[str]) -> dict[str, str]:
    """{target parameter: source parameter} of PET's sharing (module docstring) among a model's
    parameter names, each target tied straight to its final source."""
    check(config)
    out: dict[str, str] = {}
    for a, b in config.pet_pairs:
        for stack in ("encoder", "decoder"):
            at = f"{stack}.block.{b}."
            for name in (n for n in names if n.startswith(at)):
                rel = name[len(at) :]
                if rel.startswith(ATTN["cross"]) and rel.split(".")[-2] in ("k", "v"):
                    continue  # encoder-decoder K and V stay per block
                if f"{stack}.block.{a}.{rel}" in names:
                    out[name] = f"{stack}.block.{a}.{rel}"
    enc = "encoder.block.{}." + ATTN["self"] + ".{}.weight"
    for a, _ in config.pet_pairs if config.pet_encoder_qk else ():
        out[enc.format(a, "q")] = enc.format(a, "k")  # Q_a = K_a = K_b (tied above), and Q_b = Q_a
    for i in range(config.num_decoder_layers) if config.pet_decoder_q else ():
        out[f"decoder.block.{i}.{ATTN['cross']}.q.weight"] = f"decoder.block.{i}.{ATTN['self']}.q.weight"
    roots = {}
    for t, s in out.items():
        while s in out:  # a chain target -> source -> source: transformers ties one step only
            s = out[s]
        roots[t] = s
    return roots


class PetT5(T5ForConditionalGeneration):
    config_class = PetConfig

    @property
    def _tied_weights_keys(self) -> dict[str, str]:  # T5's embedding ties, then PET's
        names = [n for n, _ in self.named_parameters(remove_duplicate=False)]
        return {**T5ForConditionalGeneration._tied_weights_keys, **ties(self.config, names)}


AutoConfig.register(PetConfig.model_type, PetConfig)
AutoModelForSeq2SeqLM.register(PetConfig, PetT5)
