"""dtype "int8": the native engine with every weight product in int8 (models.linear.NativeInt8):
chosen for each product and the head, logits within int8's error of float32's, the load-time
whole-call check passing, lossless BiLD equal to int8 vanilla on the shipped pair, and a clear
error for every combination that cannot run it."""

from __future__ import annotations

import pytest
import torch
from test_engine import tiny

from bildlib import decoding as D
from bildlib.kernels import cpu
from bildlib.models import LM, linear, load_model, rowinv
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
    with pytest.raises(UnsupportedArchitectureError, match="dtype='int8' runs T5 and mT5"):
        LM(int8(tiny("gpt2")), tiny_tokenizer(), "m", engine="auto")
    with pytest.raises(ValueError, match="dtype='int8' runs on a CPU"):
        resolve_dtype("int8", torch.device("cuda"), torch.bfloat16)
    assert resolve_dtype("int8", torch.device("cpu"), torch.bfloat16) == torch.float32


def test_the_shipped_pair_in_int8_is_lossless_and_checked(multi30k_dir):
    """Both shipped models load in int8 (their whole-call checks pass), lossless BiLD over them
    equals int8 vanilla greedy on 12 held-out sentences, and int8 vanilla keeps float32's output
    on most of them."""
    from bildlib import data

    ck = REPO / "data" / "checkpoints"
    (ms, tok), (ml, _) = (load_model(ck / f"multi30k-{m}", dtype="int8") for m in ("small-aligned", "large"))
    s, lg = LM(ms, tok, "aligned", "auto"), LM(ml, tok, "large", "auto")
    assert s.call_check.passed and lg.call_check.passed and lg.impl.int8
    f32 = LM(*load_model(ck / "multi30k-large", dtype="float32"), "large32", "auto")
    same = 0
    for x in [tok(t)["input_ids"] for t in data.load("multi30k", "val", 12).sources]:
        y, _ = D.vanilla(lg, x, max_new_tokens=64)
        assert D.bild(s, lg, x, 0.5, 1.0, distance="exact", max_new_tokens=64)[0] == y
        same += D.vanilla(f32, x, max_new_tokens=64)[0] == y
    assert same >= 8, f"int8 kept float32's output on {same} of 12"
