"""bildlib.quant: the k-means, dense-and-sparse against round-to-nearest, the storage, the errors, and
lossless BiLD over a quantized large model (docs/quantization.md)."""

import re

import pytest
import torch

from bildlib import decoding as D
from bildlib import quant as Q
from bildlib.quant import model as QM
from bildlib.quant.kmeans import kmeans
from bildlib.quant.squeeze import squeeze
from bildlib.quant.uniform import int8, rtn
from bildlib.quant.weights import pack, unpack
from conftest import TINY_VOCAB, save_tiny, tiny_model, tiny_tokenizer


def test_weighted_kmeans_recovers_known_centroids():
    """Rows drawn from 8 tight clusters at known centres, unequal in size: the centroids found are
    the centres, within the clusters' spread, and each point's code is its cluster."""
    g = torch.Generator().manual_seed(0)
    centres = torch.tensor([-3.0, -1.7, -0.9, -0.2, 0.4, 1.1, 2.5, 4.0])
    which = torch.multinomial(torch.linspace(1, 3, 8), 3 * 600, replacement=True, generator=g).view(3, 600)
    x = centres[which] + 0.01 * torch.randn(3, 600, generator=g)
    c, codes = kmeans(x, torch.rand(3, 600, generator=g) + 0.5, 8)
    assert torch.allclose(c, centres.expand(3, 8), atol=0.01)
    assert torch.equal(codes, which)


def test_kmeans_weights_pull_the_centroids():
    """Two points, one centroid: it sits at their weighted mean (Fisher weights matter)."""
    c, _ = kmeans(torch.tensor([[0.0, 1.0]]), torch.tensor([[3.0, 1.0]]), 1)
    assert c.item() == pytest.approx(0.25)
    c, _ = kmeans(torch.tensor([[0.0, 1.0]]), None, 1)
    assert c.item() == pytest.approx(0.5)


def planted(out=64, n=96, seed=0):
    """Gaussian weights with a few large outliers, as trained transformers have."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, n, generator=g) * 0.05
    i = torch.randperm(out * n, generator=g)[: out * n // 200]
    w.view(-1)[i] = torch.randn(len(i), generator=g).sign() * (1.0 + torch.rand(len(i), generator=g))
    return w


@pytest.mark.parametrize("bits", [3, 4])
def test_dense_and_sparse_beats_rtn_on_planted_outliers(bits):
    w = planted()
    err = {k: (q.dequant() - w).pow(2).sum().item()
           for k, q in {"rtn": rtn(w, bits), "kmeans": squeeze(w, bits),
                        "sparse": squeeze(w, bits, outliers=0.005)}.items()}  # fmt: skip
    assert err["sparse"] < err["kmeans"] < err["rtn"]
    assert err["sparse"] < 0.2 * err["rtn"]  # the outliers no longer stretch the dense range
    q = squeeze(w, bits, outliers=0.005)
    r, c = q.sparse_idx
    torch.testing.assert_close(q.dequant()[r, c], w[r, c], rtol=0, atol=1e-6)  # dense + sparse: W there


def test_fisher_weights_lower_the_weighted_error():
    """Weighted by a sensitivity, the k-means spends its centroids where the error costs most."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(16, 128, generator=g)
    f = torch.rand(16, 128, generator=g) ** 4 * 100  # a few sensitive weights per row
    werr = {k: (f * (q.dequant() - w) ** 2).sum().item()
            for k, q in {"plain": squeeze(w, 3), "fisher": squeeze(w, 3, f)}.items()}  # fmt: skip
    assert werr["fisher"] < 0.8 * werr["plain"]


def test_rtn_and_int8_are_uniform_grids():
    w = planted(8, 32)
    q = rtn(w, 4, group=8)
    assert q.table.shape == (8, 4, 16) and q.group == 8
    step = q.table[..., 1:] - q.table[..., :-1]
    assert torch.allclose(step, step[..., :1].expand_as(step))
    assert (q.dequant() - w).abs().max() <= step.max() / 2 + 1e-6
    q8 = int8(w)
    assert (q8.dequant() - w).abs().max() <= w.abs().amax() / 254 + 1e-6
    assert q.uniform and q8.uniform and q.nbytes() == 8 * 32 // 2 + 4 * 8 * 4  # 4-bit codes, scale and zero
    assert q8.nbytes() == 8 * 32 + 4 * 8  # int8: a byte a weight, one scale (and zero) per row


@pytest.mark.parametrize("bits,n", [(3, 7), (4, 10), (8, 5)])
def test_codes_pack_and_unpack(bits, n):
    c = torch.randint(0, 2**bits, (n,), dtype=torch.uint8)
    p = pack(c, bits)
    assert p.numel() == ((n + 1) // 2 if bits <= 4 else n)
    assert torch.equal(unpack(p, bits, n), c)


@pytest.mark.parametrize("bad,match", [
    ({"method": "rtn", "bits": 9}, "bits must be in 2..8"),
    ({"method": "squeeze", "bits": 1}, "bits must be in 2..8"),
    ({"method": "squeeze", "bits": 3, "outliers": 0.1}, r"outliers .* must be in \[0, 0.1\)"),
    ({"method": "squeeze", "bits": 3, "outliers": -0.01}, "outliers"),
    ({"method": "rtn", "bits": 4, "outliers": 0.01}, "outliers apply to method 'squeeze'"),
    ({"method": "rtn", "bits": 4, "group": 0}, "group must be a positive width"),
    ({"method": "gptq", "bits": 4}, "method must be one of"),
    ({"method": "int8", "bits": 4}, "bits must be 8"),
])  # fmt: skip
def test_bad_settings_name_the_parameter(bad, match):
    with pytest.raises(ValueError, match=match):
        Q.QuantConfig(**bad)


def test_group_must_divide_the_width():
    with pytest.raises(ValueError, match=r"group \(7\) must divide the input width of enc.q \(32 columns\)"):
        rtn(torch.randn(4, 32), 4, 7, "enc.q")


@pytest.mark.parametrize(
    "label", ["bf16", "int8", "rtn4", "rtn3-g64", "squeeze3", "squeeze4-s0.45%", "kmeans3"]
)
def test_labels_round_trip(label):
    assert Q.parse(label).label == label


def test_a_bad_label_says_what_is_expected():
    with pytest.raises(ValueError, match="expected bf16, int8, rtn<bits>"):
        Q.parse("squeeze")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = save_tiny(tiny_model("t5", 3, d=32, layers=2, scale=4.0), tmp_path_factory.mktemp("tiny") / "t5")
    tok = tiny_tokenizer()
    r = torch.Generator().manual_seed(0)
    pairs = [(" ".join(f"w{i}" for i in torch.randint(3, TINY_VOCAB, (6,), generator=r).tolist()),
              " ".join(f"w{i}" for i in torch.randint(3, TINY_VOCAB, (5,), generator=r).tolist()))
             for _ in range(12)]  # fmt: skip
    return path, tok, pairs


def test_fisher_is_the_squared_gradient(tiny):
    from bildlib.models import load_model
    from bildlib.quant.fisher import fisher

    path, tok, pairs = tiny
    model, tok = load_model(path, dtype="float32")
    names, was = QM.quantizable(model), [p.requires_grad for p in model.parameters()]
    assert names and not any("lm_head" in n for n in names)
    f = fisher(model, tok, pairs, names, batch_size=4)
    shapes = {n: m.weight.shape for n, m in model.named_modules() if n in names}
    assert {n: v.shape for n, v in f.items()} == shapes
    assert all((v >= 0).all() and v.sum() > 0 for v in f.values())
    assert [p.requires_grad for p in model.parameters()] == was  # the model is left as it was


def test_quantized_checkpoint_round_trip(tiny, tmp_path):
    """Saved and loaded, a SqueezeLLM checkpoint gives back its codes, tables and sparse part, and,
    loaded as any checkpoint is, the very weights the quantized model ran and its greedy output."""
    from bildlib.models import LM, load_model
    from bildlib.quant.fisher import fisher

    path, tok, pairs = tiny
    model, tok = load_model(path, dtype="float32")
    cfg = Q.parse("squeeze3-s0.5%")
    q = QM.quantize(model, cfg, fisher(model, tok, pairs, QM.quantizable(model)))
    assert all(w.nnz > 0 for w in q.values())
    QM.save(tmp_path / "q", model, tok, cfg, q, torch.float32, {"base": str(path)})
    assert QM.is_quantized(tmp_path / "q") and not QM.is_quantized(path)
    cfg2, q2, meta = QM.load_quantized(tmp_path / "q")
    assert cfg2 == cfg and meta["label"] == "squeeze3-s0.5%" and list(q2) == list(q)
    for n in q:
        assert torch.equal(q2[n].codes, q[n].codes) and torch.equal(q2[n].table, q[n].table)
        assert torch.equal(q2[n].sparse_idx, q[n].sparse_idx)
        assert torch.equal(q2[n].sparse_val, q[n].sparse_val)
    back, _ = load_model(tmp_path / "q", dtype="float32")
    for (n, p), (_, p2) in zip(model.named_parameters(), back.named_parameters(), strict=True):
        assert torch.equal(p, p2), n
    base, _ = load_model(path, dtype="float32")
    QM.put(base, q2)  # the compact form dequantized: the saved model's weights
    for (n, p), (_, p2) in zip(base.named_parameters(), back.named_parameters(), strict=True):
        assert torch.equal(p, p2), n
    src = tok.encode("w5 w7 w9")
    a, b = LM(model, tok, "q"), LM(back, tok, "q2")
    assert D.vanilla(a, src, max_new_tokens=8)[0] == D.vanilla(b, src, max_new_tokens=8)[0]
    w = next(iter(q.values()))
    out, n = w.shape
    codes, tables, csr = (out * n * 3 + 7) // 8, 2 * out * 8, 6 * w.nnz + 4 * (out + 1)
    assert w.nbytes() == codes + tables + csr
    assert QM.nbytes(model, q)["linear"] < QM.nbytes(model, {})["linear"] / 2  # d = 32: the tables weigh


def test_a_folder_that_is_not_quantized_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a quantized checkpoint"):
        QM.load_quantized(tmp_path)


@pytest.mark.parametrize("engine", ["lean", pytest.param("hf", marks=pytest.mark.e2e)])
def test_lossless_bild_over_a_quantized_large_is_its_greedy(engine, multi30k_dir):
    """Lossless BiLD (distance="exact") over the shipped large quantized to 3 bits (round-to-nearest)
    gives that quantized model's greedy output, token for token, on both engines (float32; the HF
    engine's run is in make test-e2e: the same dequantized weights, a slower engine)."""
    from bildlib import REPO_ROOT, data
    from bildlib.models import LM, load_model

    ck = REPO_ROOT / "data" / "checkpoints"
    base, tok = load_model(ck / "multi30k-large", dtype="float32")
    probe = {**tok(["Ein Hund."], return_tensors="pt"), "decoder_input_ids": torch.tensor([[0]])}
    with torch.no_grad():
        before = base(**probe).logits
    QM.quantize(base, Q.parse("rtn3"))
    large = LM(base, tok, "large-rtn3", engine)
    small = LM.from_pretrained(ck / "multi30k-small-aligned", dtype="float32", engine=engine)
    with torch.no_grad():
        after = base(**probe).logits
    assert not torch.allclose(after, before, atol=1e-3)  # the quantized model is another model
    rollbacks = 0
    for s in data.load("multi30k", "val", 4).sources:
        src = small.encode(s)
        want = D.vanilla(large, src, max_new_tokens=48)[0]
        out, tr = D.bild(small, large, src, fallback=0.5, rollback=1.0, distance="exact", max_new_tokens=48)
        assert out == want
        rollbacks += tr.rollbacks
    assert rollbacks > 0  # the check saw the large model overrule the small one


def test_the_readme_block_marks_what_is_projected(tmp_path):
    """quantbench.table's projections (BiLD's speedup over that large / phi) and README's block from
    the files the notebook writes: measured speedups are against bf16, untimed rows say so, and the
    three benchmarks are read off the table, reached or not."""
    import json

    import pandas as pd

    from bildlib.bench import quantbench as QB

    sz = pd.DataFrame({"label": ["bf16", "int8", "rtn3", "squeeze3"], "bits": [16, 8, 3, 3],
                       "method": ["none", "int8", "rtn", "squeeze"], "outliers": 0.0,
                       "mb": [46.3, 27.0, 14.4, 14.5], "bf16_mb": 46.3, "step_mb": [30.0, 16.0, 8.0, 8.2],
                       "phi": [1.0, 0.53, 0.27, 0.27]})  # fmt: skip
    q = pd.DataFrame({"label": sz["label"], "bleu": [37.8, 37.7, 35.9, 37.3], "signature": "s",
                      "dtype": "bfloat16"})  # fmt: skip
    ci = {"alone_speedup_lo": 1.0, "alone_speedup_hi": 1.0}
    sp = pd.DataFrame([{"label": "bf16", "alone_speedup": 1.0, **ci, "alone_bleu": 37.8, "base_bleu": 37.8,
                        "lossless_speedup": 1.4, "best_speedup": 1.7, "best_fb": 0.5},
                       {"label": "int8", "alone_speedup": 1.25, "alone_speedup_lo": 1.2,
                        "alone_speedup_hi": 1.3, "alone_bleu": 37.6, "base_bleu": 37.8,
                        "lossless_speedup": 1.7, "best_speedup": 2.0, "best_fb": 0.4}])  # fmt: skip
    t = QB.table(sz, q, sp)
    assert t.set_index("label")["best_projected"]["int8"] == pytest.approx(2.0 / 1.25 / 0.53)
    assert t.set_index("label")["delta_bleu"].round(2).tolist() == [0.0, -0.1, -1.9, -0.5]
    (tmp_path / "f").mkdir()
    t.to_csv(tmp_path / "f" / "quantized.csv", index=False)
    sweep = {"n": 3, "dtype": "bfloat16", "engine": "lean", "device": "cpu", "threads": 2,
             "signature": "sig", "baseline spread %": 1.0, "busy configurations": 0}  # fmt: skip
    checks = {"sweeps": {"bf16": sweep, "int8": sweep}, "tolerance": 0.5}
    (tmp_path / "f" / "quantized_checks.json").write_text(json.dumps(checks))
    b = QB.block(tmp_path, "f")
    assert "| rtn3 | 14.4 | 35.90 (-1.90) | – | not timed | not timed | not timed | 3.70× | – |" in b
    assert "int8 alone ≥ 1.3× at ≤ 0.3 BLEU: 1.250× [1.200, 1.300], Δ BLEU -0.20 as timed, not reached" in b
    assert "BiLD over int8 ≥ 2.5× within 0.5 BLEU: 2.00× (α_FB 0.4), not reached" in b
    assert "-0.50 against -1.90, holds" in b and "**Projected**" in b and "**Measured**" in b
    short = QB.block(tmp_path, "f", every=False)  # README: the timed rows only
    assert "| rtn3 |" not in short and "| int8 | 27.0 |" in short and "holds" in short


def test_a_damaged_build_is_rebuilt_and_a_damaged_load_names_its_file(tiny, tmp_path, capsys):
    """quant.build reuses a checkpoint only while its files are as it wrote them (bildlib.data.artifacts):
    over a truncated model.safetensors it says which file and builds it again (it used to print
    "built already" and keep it). Loading a damaged checkpoint names the file (safetensors' own
    error, "incomplete metadata", named none)."""
    from bildlib.models import load_model
    from bildlib.quant import build as QB

    path = tiny[0]
    (dest,) = QB.build(["int8"], base=str(path), out=tmp_path)
    assert (dest / "MANIFEST.json").is_file()
    assert QB.build(["int8"], base=str(path), out=tmp_path) == [dest]
    assert "int8: built already" in capsys.readouterr().out
    weights = dest / "model.safetensors"
    good = weights.read_bytes()
    weights.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match=re.escape(str(weights))):
        load_model(dest, dtype="float32")
    QB.build(["int8"], base=str(path), out=tmp_path)
    said = capsys.readouterr().out
    want = f"int8: {weights} has {len(good) // 2} bytes, {len(good)} when it was built; building it again"
    assert want in said
    assert weights.read_bytes() == good and "built already" not in said
    load_model(dest, dtype="float32")
    assert QM.read_meta(dest)["file_bytes"] == (dest / "quant.safetensors").stat().st_size
