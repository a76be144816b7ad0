"""The lean engine's CPU int8 products (models.linear.Int8) over an int8 checkpoint's codes
(quant.model.keep_int8): the product against its float reference on irregular shapes, each row's
bits independent of the number of rows, where it is used and where not, codes surviving fusion,
saving and loading, and lossless BiLD over the int8 large equal to its greedy output."""

import pytest
import torch

from bildlib import decoding as D
from bildlib import quant as Q
from bildlib.models.linear import Int8, linear
from bildlib.quant import model as QM
from bildlib.quant.uniform import int8, int8_parts
from conftest import save_tiny, tiny_model, tiny_tokenizer

KERNEL = hasattr(torch, "_weight_int8pack_mm")
pytestmark = pytest.mark.skipif(not KERNEL, reason="this torch has no CPU int8 kernel")


def int8_weight(out: int, n: int, seed: int = 0) -> torch.Tensor:
    """A bf16 weight (out, n) that is its own int8 quantization, with the codes kept on it."""
    w = torch.randn(out, n, generator=torch.Generator().manual_seed(seed)) * 0.05
    codes, scale = int8_parts(int8(w))
    t = (codes.float() * scale[:, None]).bfloat16()
    t._bild_int8 = (codes, scale)
    return t


@pytest.mark.parametrize("out,n", [(52, 48), (1152, 384), (37, 1024)])
def test_int8_product_is_its_reference_and_row_invariant(out, n):
    """y = x (codes * scale)^T summed in float32 and rounded once to bf16; and each row of a call
    with k rows has the bits of the same row alone or among others (what lossless BiLD needs)."""
    w = int8_weight(out, n)
    p = linear(w)
    assert isinstance(p, Int8)
    codes, scale = w._bild_int8
    x = torch.randn(11, n, generator=torch.Generator().manual_seed(1)).bfloat16()
    full = p(x)
    ref = x.float() @ (codes.float() * scale[:, None]).t()
    assert full.dtype == torch.bfloat16 and full.shape == (11, out)
    assert (full.float() - ref).abs().max() <= 2**-7 * ref.abs().max()  # one bf16 rounding
    for k in (1, 2, 3, 4, 5, 8, 11):
        for s in (0, 11 - k):
            assert torch.equal(p(x[s : s + k]), full[s : s + k]), (k, s)
    res = torch.randn(11, out).bfloat16()
    assert torch.equal(p.add(x, res), full + res) and torch.equal(p.relu(x), full.relu())


def test_an_unaligned_input_is_copied_not_misread():
    w = int8_weight(40, 64)
    x = torch.randn(3 * 64 + 1).bfloat16()[1:].view(3, 64)  # off the 64-byte boundary
    assert x.data_ptr() % 64
    assert torch.equal(linear(w)(x), linear(w)(x.clone()))


def test_int8_runs_only_where_the_kernel_fits():
    """bf16 on a CPU with a width the kernel's 16-wide loads cover, and codes of W's shape; else W's
    own values run (the dequantized weights)."""
    assert isinstance(linear(int8_weight(8, 32)), Int8)
    assert not isinstance(linear(int8_weight(8, 40)), Int8)  # 40 is no multiple of 16
    assert not isinstance(linear(int8_weight(8, 32).float()), Int8)  # a float32 copy has no codes
    w = int8_weight(8, 32)
    w32 = w.float()
    w32._bild_int8 = w._bild_int8
    assert not isinstance(linear(w32), Int8)  # float32: the kernel is bf16's
    w._bild_int8 = (w._bild_int8[0][:4], w._bild_int8[1][:4])
    assert not isinstance(linear(w), Int8)  # stale codes of another shape


def test_the_lean_engine_fuses_the_codes_and_forgets_stale_ones():
    from bildlib.models import LM

    model = tiny_model("t5", 5, d=32).bfloat16()
    QM.quantize(model, Q.parse("int8"))
    at = model.decoder.block[0].layer[0].SelfAttention
    lm = LM(model, tiny_tokenizer(), "t", "lean")
    qkv = lm.impl.dec[0]["qkv_l"]
    assert isinstance(qkv, Int8) and isinstance(lm.impl.dec[0]["wo_l"], Int8)
    want = torch.cat([m.weight._bild_int8[0] for m in (at.q, at.k, at.v)])
    assert torch.equal(qkv.q, want)
    QM.quantize(model, Q.parse("rtn4"))  # other weights written over the int8 ones
    again = LM(model, tiny_tokenizer(), "t", "lean")
    assert not any(isinstance(again.impl.dec[0][k], Int8) for k in ("qkv_l", "wo_l"))


def test_an_int8_checkpoint_loads_with_its_codes(tmp_path):
    """Saved and loaded in bf16, an int8 checkpoint's weights carry the codes it was quantized to,
    and the loaded model's lean greedy output is the in-memory quantized model's."""
    from bildlib.models import LM, load_model

    path = save_tiny(tiny_model("t5", 3, d=32, scale=4.0), tmp_path / "t5")
    model, tok = load_model(path, dtype="bfloat16")
    cfg = Q.parse("int8")
    q = QM.quantize(model, cfg)
    QM.save(tmp_path / "q", model, tok, cfg, q, torch.bfloat16)
    back, _ = load_model(tmp_path / "q", dtype="bfloat16")
    plain, _ = load_model(path, dtype="bfloat16")
    from bildlib.models.load import keep_int8

    assert keep_int8(plain, path) == 0  # not an int8 checkpoint: nothing kept
    mods = dict(back.named_modules())
    for n in q:
        codes, scale = mods[n].weight._bild_int8
        assert torch.equal(codes, int8_parts(q[n])[0]) and torch.equal(scale, int8_parts(q[n])[1])
    src = tok.encode("w5 w7 w9 w11")
    a, b = LM(model, tok, "q", "lean"), LM(back, tok, "q2", "lean")
    assert isinstance(b.impl.dec[0]["qkv_l"], Int8)
    assert D.vanilla(a, src, max_new_tokens=8)[0] == D.vanilla(b, src, max_new_tokens=8)[0]


def test_lossless_bild_over_the_int8_large_is_its_greedy(multi30k_dir):
    """The shipped large quantized to int8 and run in bf16 on torch's int8 kernel: lossless BiLD
    gives its greedy output token for token, though BiLD's large calls carry several tokens where
    vanilla's carry one."""
    from bildlib import REPO_ROOT, data
    from bildlib.models import LM, load_model

    ck = REPO_ROOT / "data" / "checkpoints"
    base, tok = load_model(ck / "multi30k-large", dtype="bfloat16")
    QM.quantize(base, Q.parse("int8"))
    large = LM(base, tok, "large-int8", "lean")
    assert isinstance(large.impl.dec[0]["qkv_l"], Int8)
    small = LM.from_pretrained(ck / "multi30k-small-aligned", dtype="float32", engine="lean")
    rollbacks = 0
    for s in data.load("multi30k", "val", 4).sources:
        src = small.encode(s)
        want = D.vanilla(large, src, max_new_tokens=48)[0]
        out, tr = D.bild(small, large, src, fallback=0.5, rollback=1.0, distance="exact", max_new_tokens=48)
        assert out == want
        rollbacks += tr.rollbacks
    assert rollbacks > 0


def test_the_products_benchmark_and_its_docs_block(tmp_path):
    """bench.int8bench times every decoder matrix of the shipped large at each row count (not timed
    here: a few calls), and docs/quantization.md's block renders what it wrote."""
    import json

    from bildlib.bench import int8bench
    from bildlib.bench import quantbench as QB

    t = int8bench.bench(rows=(1, 3), rounds=2, block=2)
    assert list(t["matrix"].unique()) == list(int8bench.shapes()) and list(t["rows"][:2]) == [1, 3]
    assert (t[["bf16_us", "int8_us", "int8_speedup"]] > 0).all().all()
    (tmp_path / "f").mkdir()
    t.to_csv(tmp_path / "f" / "int8_products.csv", index=False)
    checks = {"device": "cpu", "threads": 2, "machine": "m", "torchao": "not installed", "code": "abc",
              "rounds": 2, "block": 2}  # fmt: skip
    (tmp_path / "f" / "int8_products_checks.json").write_text(json.dumps(checks))
    b = QB.products_block(tmp_path, "f")
    assert "| head | 8000×384 | 3 |" in b and "medians of 1 rounds of 2 calls" in b
