"""dtype "int8": the native engine with every weight product in int8 (models.linear.NativeInt8):
chosen for each product and the head, logits within int8's error of float32's, the load-time
whole-call check passing, lossless BiLD equal to int8 vanilla on the shipped pair, and a clear
error for every combination that cannot run it."""

from __future__ import annotations

import os

import pytest
import torch
from test_engine import tiny
from transformers import BartConfig, BartForConditionalGeneration

from bildlib import decoding as D
from bildlib.kernels import cpu
from bildlib.models import LM, linear, load_model, rowinv
from bildlib.models.lean_causal import Affine
from bildlib.models.lean_common import UnsupportedArchitectureError
from bildlib.models.load import resolve_dtype
from conftest import REPO, tiny_tokenizer

pytestmark = pytest.mark.skipif(cpu.load() is None, reason=f"no native engine here: {cpu.why()}")


def int8(model):
    model.bild_int8 = True  # as models.load does for dtype "int8"
    return model


@pytest.mark.parametrize("kind", ["t5", "t5-tied", "mt5"])
def test_every_product_in_int8_and_logits_near_float32(kind):
    ref = LM(tiny(kind), tiny_tokenizer(), "f32", engine="native")
    lm = LM(int8(tiny(kind)), tiny_tokenizer(), "int8", engine="auto")
    impl = lm.impl
    assert lm.engine == "native" and impl.int8 and lm.call_check.passed
    assert lm.call_check.dtype == "int8" and ref.call_check.dtype == "float32"  # as a checks file names them
    kinds = {type(p).__name__ for w in impl.enc + impl.dec for n, p in w.items() if n.endswith("_l")}
    assert kinds | {type(impl.lm_l).__name__} == {"NativeInt8"}
    src, toks = [5, 9, 11, 3, 1], [0, 7, 8, 9, 10, 11]
    for m in (ref, lm):
        m.start(src)
    a, b = ref.forward(toks), lm.forward(toks)
    assert not torch.equal(a, b)  # quantized: other values
    assert (a - b).abs().max() <= 0.1 * a.abs().max()  # tiny random models: a few per cent


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_decoder_only_models_run_int8_and_stay_lossless(kind):
    """The decoder-only engines (models.lean_causal) take the same int8 products: every product and
    the head in int8, the whole-call check passing, logits near float32's, and lossless BiLD over
    an int8 pair equal to int8 vanilla."""
    ref = LM(tiny(kind), tiny_tokenizer(), "f32", engine="native")
    lm = LM(int8(tiny(kind)), tiny_tokenizer(), "int8", engine="auto")
    assert lm.engine == "native" and lm.precision == "int8" and lm.call_check.passed
    kinds = {type(a.p).__name__ for w in lm.impl.w for a in w.values() if isinstance(a, Affine)}
    assert kinds | {type(lm.impl.lm.p).__name__} == {"NativeInt8"}
    src, toks = [5, 9, 11, 3], [7, 8, 9, 10, 11]
    for m in (ref, lm):
        m.start(src)
    a, b = ref.forward(toks), lm.forward(toks)
    assert not torch.equal(a, b) and (a - b).abs().max() <= 0.1 * a.abs().max()
    small = LM(int8(tiny(kind, seed=7)), tiny_tokenizer(), "small8", engine="auto")
    for x in ([5, 9, 11, 3], [4, 4, 8]):
        y, _ = D.vanilla(lm, x, max_new_tokens=12)
        assert D.bild(small, lm, x, 0.5, 1.0, distance="exact", max_new_tokens=12)[0] == y


def test_the_choice_is_int8_and_row_invariant():
    w = torch.randn(70, 129, generator=torch.Generator().manual_seed(0))
    p = linear.linear(w, "int8")
    assert isinstance(p, linear.NativeInt8)
    assert rowinv.CHOSEN[("linear", (70, 129), "float32", "int8")].invariant
    assert isinstance(linear.once(w, "int8"), linear.NativeInt8)


def test_combinations_that_cannot_run_int8_are_named():
    with pytest.raises(ValueError, match="dtype='int8' runs on engine 'native'.*engine='lean'"):
        LM(int8(tiny("t5")), tiny_tokenizer(), "m", engine="lean")
    with pytest.raises(ValueError, match="engine='hf'"):
        LM(int8(tiny("t5")), tiny_tokenizer(), "m", engine="hf")
    bart = int8(BartForConditionalGeneration(BartConfig(vocab_size=64, d_model=16, encoder_layers=1,
                                                         decoder_layers=1, encoder_attention_heads=2,
                                                         decoder_attention_heads=2, encoder_ffn_dim=32,
                                                         decoder_ffn_dim=32)))  # fmt: skip
    with pytest.raises(UnsupportedArchitectureError, match="dtype='int8' runs what the native engine runs"):
        LM(bart, tiny_tokenizer(), "m", engine="auto")
    with pytest.raises(ValueError, match="dtype='int8' runs on a CPU"):
        resolve_dtype("int8", torch.device("cuda"), torch.bfloat16)
    assert resolve_dtype("int8", torch.device("cpu"), torch.bfloat16) == torch.float32


@pytest.mark.timeout(7200)  # under qemu (make test-cpus) about 300 times slower than natively
def test_the_shipped_pair_in_int8_is_lossless_and_checked(multi30k_dir):
    """Both shipped models load in int8 (their whole-call checks pass), lossless BiLD over them
    equals int8 vanilla greedy on 12 held-out sentences (2 under an emulated CPU, make test-cpus),
    and int8 vanilla keeps float32's output on most of them."""
    from bildlib import data

    ck = REPO / "data" / "checkpoints"
    (ms, tok), (ml, _) = (load_model(ck / f"multi30k-{m}", dtype="int8") for m in ("small-aligned", "large"))
    s, lg = LM(ms, tok, "aligned", "auto"), LM(ml, tok, "large", "auto")
    assert s.call_check.passed and lg.call_check.passed and lg.impl.int8
    f32 = LM(*load_model(ck / "multi30k-large", dtype="float32"), "large32", "auto")
    same, n = 0, 2 if os.environ.get("BILD_EMULATED") else 12
    for x in [tok(t)["input_ids"] for t in data.load("multi30k", "val", n).sources]:
        y, _ = D.vanilla(lg, x, max_new_tokens=64)
        assert D.bild(s, lg, x, 0.5, 1.0, distance="exact", max_new_tokens=64)[0] == y
        same += D.vanilla(f32, x, max_new_tokens=64)[0] == y
    assert same >= 2 * n // 3, f"int8 kept float32's output on {same} of {n}"
