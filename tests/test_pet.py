"""models.pet: PET's parameter-shared student. Shared tensors are one storage; a save/load round
trip keeps them so; the parameter count is the plain T5's less what the sharing removes, counted
by hand; the lean engine equals HF's forward on it; bad sharing patterns are named."""

import pytest
import torch
from safetensors.torch import load_file
from transformers import T5Config, T5ForConditionalGeneration

from bildlib import decoding as D
from bildlib import train as T
from bildlib.models import LM, load_model, load_tokenizer, pet
from conftest import TINY_VOCAB, tiny_tokenizer

SHAPE = dict(vocab_size=TINY_VOCAB, d_model=16, d_ff=24, num_layers=4, num_decoder_layers=4, num_heads=2,
             d_kv=8, decoder_start_token_id=0, eos_token_id=1, pad_token_id=0,
             feed_forward_proj="relu")  # fmt: skip
PET = dict(pet_pairs=[[0, 2], [1, 3]], pet_encoder_qk=True, pet_decoder_q=True)


def student(seed=0, **kw):
    torch.manual_seed(seed)
    return pet.PetT5(pet.PetConfig(**SHAPE, **(PET | kw))).eval()


def _attn(m, stack, i, which="SelfAttention"):
    return getattr(m, stack).block[i].layer[1 if which == "EncDecAttention" else 0].__getattr__(which)


def test_shared_tensors_are_one_storage():
    m = student()
    ptr = lambda w: w.untyped_storage().data_ptr()  # noqa: E731
    for a, b in PET["pet_pairs"]:
        for stack in ("encoder", "decoder"):
            wi_a, wi_b = (getattr(m, stack).block[i].layer[-1].DenseReluDense.wi.weight for i in (a, b))
            assert ptr(wi_a) == ptr(wi_b)
            assert ptr(_attn(m, stack, a).o.weight) == ptr(_attn(m, stack, b).o.weight)
        q_a, k_b = _attn(m, "encoder", a).q.weight, _attn(m, "encoder", b).k.weight
        assert ptr(q_a) == ptr(k_b) == ptr(_attn(m, "encoder", b).q.weight)  # Q_a = K_b, Q_b = K_a
        for w in "kv":  # the encoder-decoder attention's K and V stay per block
            x, y = (getattr(_attn(m, "decoder", i, "EncDecAttention"), w).weight for i in (a, b))
            assert ptr(x) != ptr(y)
    for i in range(4):  # each decoder block's cross-attention query is its self-attention query
        assert ptr(_attn(m, "decoder", i, "EncDecAttention").q.weight) == ptr(_attn(m, "decoder", i).q.weight)
    assert ptr(_attn(m, "encoder", 0).q.weight) != ptr(_attn(m, "encoder", 1).q.weight)  # other pairs apart


def test_parameter_counts_match_the_sharing():
    d, ff, inner = SHAPE["d_model"], SHAPE["d_ff"], SHAPE["num_heads"] * SHAPE["d_kv"]
    plain = sum(p.numel() for p in T5ForConditionalGeneration(T5Config(**SHAPE)).parameters())
    enc_block = 4 * inner * d + 2 * d + 2 * ff * d  # q k v o, two norms, wi wo
    dec_block_shared = 6 * inner * d + 3 * d + 2 * ff * d  # all but the cross-attention's K and V
    pairs = len(PET["pet_pairs"])
    for kw, removed in [
        ({}, pairs * (enc_block + dec_block_shared) + pairs * inner * d + 2 * inner * d),
        ({"pet_encoder_qk": False}, pairs * (enc_block + dec_block_shared) + 2 * inner * d),
        ({"pet_encoder_qk": False, "pet_decoder_q": False}, pairs * (enc_block + dec_block_shared)),
        ({"pet_pairs": [], "pet_encoder_qk": False}, 4 * inner * d),  # decoder queries only
    ]:
        n = sum(p.numel() for p in student(**kw).parameters())
        assert n == plain - removed, (kw, n, plain - removed)


def test_a_save_load_round_trip_keeps_the_sharing(tmp_path):
    m = student()
    tok = tiny_tokenizer()
    m.save_pretrained(tmp_path / "pet")
    tok.save_pretrained(tmp_path / "pet")
    stored = load_file(tmp_path / "pet" / "model.safetensors")
    assert len(stored) == len(dict(m.named_parameters()))  # each shared tensor written once
    back, _ = load_model(tmp_path / "pet", dtype="float32")  # bildlib's loader, through the Auto classes
    assert type(back) is pet.PetT5 and back.config.pet_pairs == PET["pet_pairs"]
    assert _attn(back, "encoder", 0).q.weight is _attn(back, "encoder", 2).k.weight
    assert sum(p.numel() for p in back.parameters()) == sum(p.numel() for p in m.parameters())
    x = torch.tensor([[5, 6, 7, 1]])
    logits = [model(input_ids=x, decoder_input_ids=x).logits for model in (back, m)]
    assert torch.equal(*logits)


def test_the_lean_engine_equals_hf_on_a_shared_model():
    m, tok = student(seed=3), tiny_tokenizer()
    hf, lean = LM(m, tok, "pet", "hf"), LM(m, tok, "pet", "lean")
    assert lean.engine == "lean"
    for src in ([5, 6, 7, 8, 1], [9, 10, 1]):
        bos = hf.start(src)
        lean.start(src)
        a = torch.cat([hf.forward([bos]), hf.forward([11, 12, 13])])
        b = torch.cat([lean.forward([bos]), lean.forward([11, 12, 13])])
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)
        assert D.vanilla(lean, src, max_new_tokens=12)[0] == D.vanilla(hf, src, max_new_tokens=12)[0]
    # the lean engine's fused products left the HF model's ties in place
    assert _attn(m, "encoder", 0).q.weight is _attn(m, "encoder", 2).k.weight


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"pet_pairs": [[0, 5]]}, r"pair \[0, 5\] names a missing block"),
        ({"pet_pairs": [[2, 1]]}, r"pair \[2, 1\] names a missing block or is not a < b"),
        ({"pet_pairs": [[0, 2], [2, 3]]}, "block 2 is in two pairs"),
        ({"pet_pairs": [[0]]}, r"each pair is two block indices"),
        ({"pet_pairs": [], "pet_decoder_q": False}, "pet_encoder_qk ties queries and keys within pairs"),
    ],
)
def test_bad_sharing_patterns_name_the_parameter(kw, match):
    with pytest.raises(ValueError, match=match):
        student(**kw)


def test_training_builds_a_pet_student(tmp_path, multi30k_dir):
    tok = load_tokenizer(T.checkpoint_path(T.TrainConfig.tokenizer))
    shape = dict(d_model=32, d_ff=64, num_layers=4, num_decoder_layers=4, num_heads=2, d_kv=16)
    cfg = T.TrainConfig(out=str(tmp_path / "pet"), model=shape | {"pet_pairs": [[0, 2], [1, 3]]})
    m = T.build_model(cfg, tok)
    assert type(m) is pet.PetT5 and m.encoder.block[2].layer[0].SelfAttention.q.weight is (
        m.encoder.block[0].layer[0].SelfAttention.q.weight
    )
