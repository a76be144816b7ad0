"""The lean engine against the Hugging Face forward it replaces: logits at every call and after
every crop, every decoder's tokens, the weights held once, and the fallback for what it lacks."""

import logging

import pytest
import torch
import transformers as tf
from test_decoding import sources

from bildlib import decoding as D
from bildlib.models import LM, UnsupportedArchitectureError, check_pair, rowinv
from bildlib.models.lean_causal import LeanGPT2, LeanLlama
from bildlib.models.lean_t5 import LeanT5
from conftest import REPO, TINY_VOCAB, perturbed, tiny_model, tiny_tokenizer

ARCHS = ["t5", "t5-tied", "mt5", "gpt2", "llama"]


def tiny(kind: str, seed: int = 1):
    """tiny_model's kinds plus a tied T5 (the shipped pair's head, 3 decoder layers) and an mT5
    (gated-gelu feed-forward, untied head)."""
    if kind not in ("t5-tied", "mt5"):
        return tiny_model(kind, seed=seed, d=48, scale=0.3 if kind == "t5" else 12.0)
    torch.manual_seed(seed)
    common = {"vocab_size": TINY_VOCAB, "d_model": 48, "d_ff": 96, "d_kv": 24, "num_heads": 2}
    common |= {"num_layers": 2, "decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0}
    if kind == "t5-tied":
        return tf.T5ForConditionalGeneration(tf.T5Config(num_decoder_layers=3, **common)).eval()
    return tf.MT5ForConditionalGeneration(tf.MT5Config(**common)).eval()


def both(model, name="tiny", engine="lean"):
    """The same HF model behind both engines (the lean one reads its weights, copies none);
    `engine` "native" for lean T5 with its C++ pieces (bildlib.kernels.cpu)."""
    tok = tiny_tokenizer()
    return LM(model, tok, name, engine="hf"), LM(model, tok, name, engine=engine)


# every lean engine a kind runs on: lean, and native (its C++ pieces)
BOTH = ("lean", "native")
LEAN_ENGINES = [(k, e) for k in ARCHS for e in BOTH]


# A schedule of calls and crops: one token, several at once, crops back, a call past 128
# positions (the lean cache and tables grow) and crops in the middle of it.
SCHEDULE = [
    [0],
    [5, 6, 7],
    ("crop", 2),
    [9],
    [10, 11, 12, 13],
    ("crop", 1),
    [3] * 7,
    [4],
    list(range(3, 40)) * 4,
    ("crop", 60),
    [8, 9],
    list(range(3, 40)) * 3,
    ("crop", 150),
    [5],
]


def schedule(lms, src):
    """Runs SCHEDULE on every LM in lms from source src; yields their logits at each call."""
    bos = [lm.start(src) for lm in lms]
    assert len(set(bos)) == 1
    for step in SCHEDULE:
        if step[0] == "crop":
            for lm in lms:
                lm.crop(step[1])
            continue
        toks = [bos[0]] + step[1:] if step == [0] else step  # the first call starts at bos
        yield [lm.forward(toks) for lm in lms]


@pytest.mark.parametrize("kind, engine", LEAN_ENGINES)
def test_lean_logits_equal_hf_at_every_call_and_crop(kind, engine):
    hf, lean = both(tiny(kind), engine=engine)
    assert lean.engine == engine and hf.engine == "hf"
    expected = {"t5": LeanT5, "t5-tied": LeanT5, "mt5": LeanT5, "gpt2": LeanGPT2, "llama": LeanLlama}
    assert isinstance(lean.impl, expected[kind])
    for src in sources(3, seed=7):
        for a, b in schedule([lean, hf], src):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
        assert lean.ids == hf.ids


def test_lean_logits_equal_hf_on_the_shipped_pair(multi30k_dir):
    from bildlib import data
    from bildlib.models import load_model

    for name in ("multi30k-small", "multi30k-large"):
        model, tok = load_model(REPO / "data" / "checkpoints" / name, dtype="float32")  # HF to 1e-4
        hf, lean = LM(model, tok, name, "hf"), LM(model, tok, name, "lean")
        native = LM(model, tok, name, "native")
        for s in data.load("multi30k", "val", 5).sources:
            src = tok(s)["input_ids"]
            y = [hf.start(src)]
            lean.start(src)
            native.start(src)
            for _ in range(12):  # greedy, with a rollback-like crop and a 4-token call each 4 steps
                a, b = hf.forward(y[len(hf.ids) :]), lean.forward(y[len(lean.ids) :])
                torch.testing.assert_close(b, a, atol=1e-4, rtol=0)
                torch.testing.assert_close(native.forward(y[len(native.ids) :]), a, atol=1e-4, rtol=0)
                y.append(int(a[-1].argmax()))
                if len(y) % 4 == 0:
                    hf.crop(len(y) - 4)
                    lean.crop(len(y) - 4)
                    native.crop(len(y) - 4)


def test_the_lean_engine_holds_no_second_copy_of_the_weights():
    model = tiny("llama")
    before = {p.data_ptr(): p.numel() for p in model.parameters()}
    size = sum(before.values())
    _, lean = both(model)
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    assert sum(storages.values()) == size * 4  # fused q/k/v and gate/up: one storage, no copy left
    w = lean.impl.w[0]["qkv"]
    q = model.model.layers[0].self_attn.q_proj.weight
    assert q.untyped_storage().data_ptr() == w.untyped_storage().data_ptr()
    LM(model, tiny_tokenizer(), "again", "lean")  # fusing again reuses the fused tensors
    assert sum(p.untyped_storage().nbytes() for p in model.parameters()) <= 2 * size * 4


def _decoders(small, large, src):
    s = D.Sampling(1.0, 0.8, seed=3)
    return {
        "vanilla": D.vanilla(large, src, max_new_tokens=20),
        "vanilla-sampled": D.vanilla(small, src, sampling=s, max_new_tokens=20),
        "bild": D.bild(small, large, src, fallback=0.5, rollback=1.0, max_new_tokens=20),
        "bild-exact": D.bild(
            small, large, src, fallback=0.3, rollback=1.0, distance="exact", max_new_tokens=20
        ),
        "bild-nofb": D.bild(small, large, src, fallback=None, rollback=0.5, window=4, max_new_tokens=20),
        "bild-sampled": D.bild(small, large, src, fallback=0.5, rollback=2.0, sampling=s, max_new_tokens=20),
        "bild-authors": D.bild(
            small, large, src, fallback=0.5, rollback=1.0, rules="authors", max_new_tokens=20
        ),
        "speculative": D.speculative_sampling(small, large, src, window=3, sampling=s, max_new_tokens=20),
        "oracle": D.oracle(small, large, src, 0.5, max_new_tokens=20),
    }


@pytest.mark.parametrize("kind", ["t5", "mt5", "gpt2", "llama"])
def test_every_decoder_gives_the_same_tokens_on_both_engines(kind):
    large = tiny(kind)
    small = perturbed(large, seed=2, noise=0.8)
    (s_hf, s_lean), (l_hf, l_lean) = both(small, "small"), both(large, "large")
    check_pair(s_hf, l_hf)
    check_pair(s_lean, l_lean)
    rollbacks = 0
    for src in sources(8, seed=5):  # 9 decoders each, on both engines
        a, b = _decoders(s_hf, l_hf, src), _decoders(s_lean, l_lean, src)
        for name in a:
            assert b[name][0] == a[name][0], name
            assert b[name][1].source == a[name][1].source, name
        rollbacks += a["bild"][1].rollbacks
    assert rollbacks > 0


def test_every_decoder_gives_the_same_tokens_on_both_engines_on_the_shipped_pair(multi30k_dir):
    from bildlib import data
    from bildlib.models import load_model

    ck = REPO / "data" / "checkpoints"
    f32 = {"dtype": "float32"}  # compared with HF token by token
    (ms, tok), (ml, _) = (load_model(ck / f"multi30k-{m}", **f32) for m in ("small-aligned", "large"))
    s_hf, s_lean = LM(ms, tok, "aligned", "hf"), LM(ms, tok, "aligned", "lean")
    l_hf, l_lean = LM(ml, tok, "large", "hf"), LM(ml, tok, "large", "lean")
    s_nat, l_nat = LM(ms, tok, "aligned", "native"), LM(ml, tok, "large", "native")
    check_pair(s_hf, l_hf)
    check_pair(s_lean, l_lean)
    kw = {"max_new_tokens": 64}
    for s in data.load("multi30k", "val", 20).sources:
        src = tok(s)["input_ids"]
        for run in (
            lambda a, b, x: D.vanilla(b, x, **kw),
            lambda a, b, x: D.bild(a, b, x, fallback=0.6, rollback=0.5, **kw),
            lambda a, b, x: D.bild(a, b, x, fallback=0.4, rollback=1.0, distance="exact", **kw),
            lambda a, b, x: D.speculative_sampling(a, b, x, window=4, sampling=D.Sampling(1.0, 0.8, 0), **kw),
        ):
            (y0, t0), (y1, t1) = run(s_hf, l_hf, src), run(s_lean, l_lean, src)
            assert y1 == y0 and t1.source == t0.source and t1.large_call_tokens == t0.large_call_tokens
            y2, t2 = run(s_nat, l_nat, src)
            assert y2 == y0 and t2.source == t0.source and t2.large_call_tokens == t0.large_call_tokens


def test_an_unsupported_architecture_is_named_and_auto_falls_back(caplog):
    torch.manual_seed(0)
    cfg = tf.BartConfig(
        vocab_size=TINY_VOCAB,
        d_model=16,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        eos_token_id=1,
        pad_token_id=0,
        decoder_start_token_id=0,
    )
    bart = tf.BartForConditionalGeneration(cfg).eval()
    with pytest.raises(UnsupportedArchitectureError, match="BartForConditionalGeneration"):
        LM(bart, tiny_tokenizer(), "bart", engine="lean")
    with caplog.at_level(logging.INFO, logger="bildlib.models"):
        lm = LM(bart, tiny_tokenizer(), "bart")
    assert lm.engine == "hf" and "engine='hf'" in caplog.text and "bart" in caplog.text
    half = tiny("t5").to(torch.float16)
    with pytest.raises(UnsupportedArchitectureError, match="float16"):
        LM(half, tiny_tokenizer(), "half", engine="lean")
    with pytest.raises(UnsupportedArchitectureError, match="engine='native' runs what lean runs.*BartFor"):
        LM(bart, tiny_tokenizer(), "bart", engine="native")
    for kind in ("t5", "llama"):  # auto: native where it builds (as in this project's CI)
        assert LM(tiny(kind), tiny_tokenizer(), kind).engine == "native"
    with pytest.raises(ValueError, match="engine must be one of"):
        LM(tiny("t5"), tiny_tokenizer(), "x", engine="fast")
    with pytest.raises(ValueError, match="engine must be one of"):
        LM.from_pretrained("no/such/model", engine="fast")  # refused before anything loads


@pytest.mark.parametrize("kind, engine", [(k, e) for k in ("t5-tied", "mt5", "gpt2", "llama") for e in BOTH])
def test_lean_bf16_follows_hf_bf16(kind, engine):
    """In bf16 the two engines round differently (fused matmuls), so the check is closeness: the
    same argmax nearly everywhere and logits within bf16's resolution of each other."""
    hf, lean = both(tiny(kind).to(torch.bfloat16), engine=engine)
    agree = total = 0
    for src in sources(6, seed=9):
        y = [hf.start(src)]
        lean.start(src)
        for _ in range(10):
            a, b = hf.forward(y[len(hf.ids) :]), lean.forward(y[len(lean.ids) :])
            assert a.dtype == b.dtype == torch.bfloat16
            torch.testing.assert_close(b.float(), a.float(), atol=0.1 * a.float().abs().max().item(), rtol=0)
            agree += int(a[-1].argmax() == b[-1].argmax())
            total += 1
            y.append(int(a[-1].argmax()))
    assert agree >= 0.9 * total


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("kind, engine", [(k, e) for k in ("t5-tied", "mt5", "gpt2", "llama") for e in BOTH])
def test_a_k_token_call_gives_each_token_its_one_token_logits(kind, engine, dtype):
    """What lossless BiLD rests on, for every lean engine: a call over k tokens gives each token
    the logits, bit for bit, that the same tokens fed one at a time get (vanilla's steps), for
    k up to 16 (models.rowinv probes each product and attention path on the machine that runs).
    The decoder-only engine once multiplied with plain torch.addmm: in bf16 on an Intel Xeon
    with AMX this failed at every k."""
    _, lm = both(tiny(kind).to(dtype), engine=engine)
    assert lm.engine == engine
    src = sources(1, seed=23)[0]
    tokens = [lm.start(src), *range(3, 40)]
    lm.start(src)
    one = torch.cat([lm.forward([t]) for t in tokens])
    for k in (2, 3, 5, 11, 16):
        lm.start(src)
        rows = torch.cat([lm.forward(tokens[i : i + k]) for i in range(0, len(tokens), k)])
        assert torch.equal(rows, one), (kind, dtype, k)
    assert rowinv.summary()["row_invariant"] is True


@pytest.mark.parametrize("kind", ["t5", "llama"])
def test_hf_peers_are_lossless_greedy(kind):
    """transformers' generate and assisted generation (our same-run peers) write vanilla large's
    greedy tokens: at HF's defaults and at a tuned setting."""
    large = tiny(kind)
    small, lg = both(perturbed(large, seed=2, noise=0.8), "small")[1], both(large, "large")[1]
    for src in sources(8, seed=11):
        ref = D.vanilla(lg, src, max_new_tokens=20)[0]
        assert D.hf_generate(lg, src, max_new_tokens=20)[0] == ref
        assert D.hf_assisted(small, lg, src, max_new_tokens=20)[0] == ref
        assert D.hf_assisted(small, lg, src, 4, 0.2, max_new_tokens=20)[0] == ref
    with pytest.raises(ValueError, match="num_assistant_tokens"):
        D.hf_assisted(small, lg, src, 0)


@pytest.mark.parametrize("kind", ["t5-tied", "llama"])
def test_a_model_cast_after_a_lean_lm_gets_fresh_fused_weights(kind):
    """model.to() gives the linears new tensors; an LM made after it must not reuse the weights
    fused for the old dtype (found by the paper dry run: 'expected m1 and m2 to have the same dtype')."""
    m = tiny(kind)
    src = sources(1, seed=3)[0]
    LM(m, tiny_tokenizer(), "fp32", "lean")
    m = m.to(torch.bfloat16)
    lean, hf = LM(m, tiny_tokenizer(), "bf16", "lean"), LM(m, tiny_tokenizer(), "bf16", "hf")
    a, b = (lm.forward([lm.start(src)]) for lm in (lean, hf))
    assert a.dtype == b.dtype == torch.bfloat16
    torch.testing.assert_close(a.float(), b.float(), atol=0.1 * b.float().abs().max().item(), rtol=0)


@pytest.mark.parametrize("kind", ["t5-tied", "mt5", "llama"])
def test_column_major_weights_keep_values_and_logits_and_hold_one_copy(kind):
    """The CPU float32 layout (layout.column_major): every linear weight keeps its values and
    shape, is stored (in, out), fused matrices keep that layout as views, and the logits equal
    those of an untouched row-major copy on HF's forward within 1e-4 (the engines' tolerance)."""
    import copy

    from bildlib.models.layout import column_major

    model = tiny(kind)
    ref = copy.deepcopy(model)  # row-major, never touched
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    held = lambda: {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}  # noqa: E731
    size = sum(held().values())
    lean = LM(model, tiny_tokenizer(), "col", "lean")  # make() moves the weights
    assert column_major(model) == 0  # already moved
    lins = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.weight.stride(0) == 1 and m.weight.stride(1) >= m.weight.shape[0] for m in lins)  # (in, out)
    assert all(m.weight.is_contiguous() for m in ref.modules() if isinstance(m, torch.nn.Linear))
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert sum(held().values()) == size  # moved and fused in place of the old tensors, no copy
    hf = LM(ref, tiny_tokenizer(), "row", "hf")
    for src in sources(2, seed=11):
        for a, b in schedule([lean, hf], src):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_load_model_stores_float32_weights_column_major_on_cpu_only_in_float32():
    from bildlib.models import load_model

    path = REPO / "data" / "checkpoints" / "multi30k-small"
    f32, _ = load_model(path, dtype="float32")
    bf16, _ = load_model(path, dtype="bfloat16")
    w32, w16 = f32.lm_head.weight, bf16.lm_head.weight
    assert w32.t().is_contiguous() and not w32.is_contiguous()  # (in, out) storage, (out, in) view
    assert w16.is_contiguous()  # bf16 keeps HF's layout: transposed bf16 products were 4x slower here
    assert torch.equal(w32.to(torch.bfloat16), w16)
    assert f32.shared.weight.data_ptr() == w32.data_ptr()  # the tied embedding moved with its head


def test_loading_shows_no_progress_bar_and_leaves_transformers_as_it_was(capfd):
    from transformers.utils import logging as hf_logging

    from bildlib.models import load_model

    path = REPO / "data" / "checkpoints" / "multi30k-small"
    assert hf_logging.is_progress_bar_enabled()
    load_model(path)
    assert "Loading weights" not in capfd.readouterr().err  # a notebook prints it in red per model
    assert hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a user who turned them off keeps them off
    try:
        load_model(path)
        assert not hf_logging.is_progress_bar_enabled()
    finally:
        hf_logging.enable_progress_bar()


# -- the lean T5's products and its folded cross-attention (models.linear, docs/engines.md) ------


def all_packed(monkeypatch, dtype=torch.float32):
    """Every product packs (the tiny models' matrices are under MIN_PACKED); skips the test where
    this PyTorch has no oneDNN prepacked linear, or this CPU cannot pack in dtype (there linear()
    never packs)."""
    from bildlib.models import linear as LN

    if not LN.onednn():
        pytest.skip("this PyTorch has no oneDNN prepacked linear")
    if dtype == torch.bfloat16 and not LN.bf16_packing():
        pytest.skip(LN.bf16_packing_refused())
    monkeypatch.setattr(LN, "MIN_PACKED", {torch.float32: 0, torch.bfloat16: 0})
    # these tests check the packed products themselves; whether they are row-invariant at these
    # small shapes on this machine is the probe's question (tests/test_rowinv.py)
    monkeypatch.setattr(LN, "_invariant", lambda cls, w: True)
    return LN


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_packed_products_equal_torch_mm(dtype, monkeypatch):
    """oneDNN's prepacked products against torch.mm on irregular shapes and row counts: the same
    bits in bf16 (x W^T, relu of it, and res + x W^T rounded once as torch.addmm), float32
    rounding apart in float32; column-major float32 weights pack alike."""
    LN = all_packed(monkeypatch, dtype)
    g = torch.Generator().manual_seed(0)
    for out, inn in [(7, 5), (33, 17), (130, 48), (1152, 384), (8000, 128)]:
        w = torch.randn(out, inn, generator=g).to(dtype)
        for ws in (w, w.t().contiguous().t()):  # row-major, column-major
            lin = LN.linear(ws)
            assert isinstance(lin, LN.Packed)
            for k in (1, 2, 3, 10, 11, 17):
                x = torch.randn(k, inn, generator=g).to(dtype)
                r = torch.randn(k, out, generator=g).to(dtype)
                y, yr = x @ w.t(), torch.addmm(r, x, w.t())
                for got, want in [(lin(x), y), (lin.relu(x), y.relu()), (lin.add(x, r), yr)]:
                    assert got.dtype == dtype and got.shape == (k, out)
                    if dtype == torch.bfloat16:
                        assert torch.equal(got, want), (out, inn, k)
                    else:
                        torch.testing.assert_close(got, want, atol=1e-5 * inn**0.5, rtol=1e-5)


def test_small_bf16_products_run_in_float32_within_one_rounding():
    """A bf16 weight under MIN_PACKED runs as a float32 copy: each result is the float32 product
    rounded once to bf16, at most one bf16 step from torch.mm's (another summation order)."""
    from bildlib.models import linear as LN

    g = torch.Generator().manual_seed(1)
    for out, inn in [(5, 7), (384, 128), (128, 500)]:
        w = torch.randn(out, inn, generator=g).bfloat16()
        lin = LN.linear(w)
        assert isinstance(lin, LN.Float32) and lin.t.dtype == torch.float32
        for k in (1, 4, 11):
            x, r = torch.randn(k, inn, generator=g).bfloat16(), torch.randn(k, out, generator=g).bfloat16()
            y = x.double() @ w.double().t()  # exact: bf16 products fit a double
            for got, want in [(lin(x), y), (lin.relu(x), y.relu()), (lin.add(x, r), y + r.double())]:
                assert got.dtype == torch.bfloat16
                step = want.abs().clamp_min(1e-30) * 2**-7  # one bf16 rounding step (8 bits)
                assert ((got.double() - want).abs() <= step + 1e-6 * inn).all(), (out, inn, k)


def test_linear_falls_back_to_torch_mm_where_packing_does_not_apply(monkeypatch):
    """No oneDNN (a PyTorch built without it), PACK off, a weight off the CPU, a float16 weight, or
    a small float32 one: linear() runs torch.mm on the transposed view, with torch.mm's own bits,
    where torch.mm is row-invariant on this machine (models.rowinv), else the float32 row products."""
    from bildlib.models import linear as LN

    # the meta weight's probe finds nothing invariant: kept from the process's record, whose other
    # tests would otherwise warn that lossless BiLD is not exact here
    monkeypatch.setattr(rowinv, "CHOSEN", {})
    monkeypatch.setattr(rowinv, "NOT_INVARIANT", set())

    def mm_or_rows(w):  # what this machine's probe allows
        return LN.MM if LN._invariant(LN.MM, w) else LN.Float32

    w, x, r = torch.randn(40, 24), torch.randn(3, 24), torch.randn(3, 40)
    assert type(LN.linear(w)) is mm_or_rows(w)  # 960 float32 weights: under MIN_PACKED
    assert type(LN.linear(torch.empty(2048, 512, device="meta"))) is LN.MM
    h = torch.randn(1024, 512).half()
    assert type(LN.linear(h)) is mm_or_rows(h)
    monkeypatch.setattr(LN, "_ONEDNN", False)
    big = torch.randn(1024, 512)
    assert type(LN.linear(big)) is mm_or_rows(big)
    assert type(LN.linear(torch.randn(1024, 512).bfloat16())) is LN.Float32
    monkeypatch.setattr(LN, "_ONEDNN", None)
    monkeypatch.setattr(LN, "PACK", False)
    assert type(LN.linear(torch.randn(1024, 512).bfloat16())) is LN.MM
    lin = LN.linear(w)
    assert torch.equal(lin(x), torch.mm(x, w.t())) and torch.equal(lin.add(x, r), torch.addmm(r, x, w.t()))
    assert torch.equal(lin.relu(x), torch.mm(x, w.t()).relu())


def test_packed_weights_are_reused_and_packed_again_after_an_in_place_change(monkeypatch):
    """A second engine on the same weights packs nothing; an in-place change of the weight (as a
    training step makes) packs it again, so the products follow the weight."""
    LN = all_packed(monkeypatch, torch.bfloat16)
    w = torch.randn(64, 32).bfloat16()
    a, b = LN.linear(w), LN.linear(w)
    assert a.p is b.p
    with torch.no_grad():
        w.mul_(2)
    c, x = LN.linear(w), torch.randn(1, 32).bfloat16()
    assert c.p is not a.p and torch.equal(c(x), x @ w.t())


@pytest.mark.parametrize("kind", ["t5", "t5-tied", "mt5"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_lean_t5_logits_do_not_depend_on_packing(kind, dtype, monkeypatch):
    """The whole call/crop schedule (past 128 positions, where the cache and tables grow) on a lean
    T5 with every product packed, against one with plain torch.mm: the same bits in bf16, float32
    rounding apart in float32 (within 1e-4, as lean against HF)."""
    LN = all_packed(monkeypatch, dtype)
    model = tiny(kind).to(dtype)
    packed = LM(model, tiny_tokenizer(), "packed", "lean")
    assert all(isinstance(w["qkv_l"], LN.Packed) for w in packed.impl.dec)
    monkeypatch.setattr(LN, "PACK", False)
    plain = LM(model, tiny_tokenizer(), "plain", "lean")
    assert all(type(w["qkv_l"]) is LN.MM for w in plain.impl.dec)
    for src in sources(2, seed=13):
        for got, want in schedule([packed, plain], src):
            if dtype == torch.bfloat16:
                assert torch.equal(got, want)
            else:
                torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


@pytest.mark.parametrize("kind", ["t5", "mt5"])
def test_lean_t5_equals_hf_with_every_float32_product_packed(kind, monkeypatch):
    """test_lean_logits_equal_hf_at_every_call_and_crop with the float32 products packed too (the
    tiny models' matrices are under MIN_PACKED, so there they run torch.mm)."""
    LN = all_packed(monkeypatch)
    hf, lean = both(tiny(kind))
    assert all(isinstance(w["qkv_l"], LN.Packed) for w in lean.impl.dec)
    for src in sources(2, seed=17):
        for a, b in schedule([lean, hf], src):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)


def test_rows_mm_gives_each_row_the_same_bits_whatever_the_row_count():
    """models.linear.rows_mm, the folded cross-attention's and small float32 products: where the
    output width is a multiple of 4 (the engine pads its folded widths to that), each row of a
    k-row product has the bits of that row alone (torch.mm's gemv and gemm sum in other orders),
    for input rows at unaligned addresses too, and it equals torch.mm within float32 rounding."""
    from bildlib.models.linear import rows_mm

    g = torch.Generator().manual_seed(2)
    for n, m in [(384, 76), (384, 132), (90, 384), (7, 8), (130, 36), (384, 6 * 14)]:
        t = torch.randn(n, m, generator=g)
        x, r = torch.randn(12, n, generator=g), torch.randn(12, m, generator=g)
        full, full_r = rows_mm(x, t), rows_mm(x, t, r)
        torch.testing.assert_close(full_r, torch.addmm(r, x, t), atol=1e-4, rtol=1e-5)
        for k in (1, 2, 5, 11):
            for j in range(12 - k + 1):  # x[j:] starts j * n floats in: unaligned where n is odd
                assert torch.equal(rows_mm(x[j : j + k], t), full[j : j + k]), (n, m, k, j)
                assert torch.equal(rows_mm(x[j : j + k], t, r[j : j + k]), full_r[j : j + k]), (n, m, k, j)
        one = r[:1]  # a (1, m) row added to every row, as the folded cross-attention's mask
        torch.testing.assert_close(rows_mm(x, t, one), torch.addmm(one, x, t), atol=1e-4, rtol=1e-5)


@pytest.mark.parametrize("S", [5, 6, 7, 8])
def test_folded_cross_attention_pads_each_head_to_a_multiple_of_four(S):
    """The lean T5 pads each head's folded cross-attention keys to P, a multiple of 4, and masks
    the padding: (A, B) have H P columns and rows, and the logits are HF's for every length."""
    m = tiny_model("t5", seed=S, d=48)  # 2 heads
    src = list(range(3, 3 + S - 1)) + [1]  # S tokens, EOS last
    lean, hf = LM(m, tiny_tokenizer(), "t5", "lean"), LM(m, tiny_tokenizer(), "t5", "hf")
    native = LM(m, tiny_tokenizer(), "t5", "native")
    for lm in (lean, hf, native):
        lm.start(src)
    expected = hf.forward([0, 5, 6])
    torch.testing.assert_close(lean.forward([0, 5, 6]), expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(native.forward([0, 5, 6]), expected, atol=1e-4, rtol=0)
    A, B, mask = lean.impl.cross[0]
    P = -(-S // 4) * 4
    assert A.shape == (48, 2 * P) and B.shape == (2 * P, 48)
    if P == S:
        assert mask is None
    else:
        assert torch.isinf(mask).sum() == 2 * (P - S) and not B.view(2, P, 48)[:, S:].any()


def test_packed_weights_follow_a_dtype_change_under_the_same_parameter():
    """model.to(dtype) swaps a Parameter's data in place of a new Parameter: the packed copy kept
    on it must be packed again, not reused in the old dtype."""
    from bildlib.models import linear

    if not linear.onednn():
        pytest.skip("this PyTorch has no oneDNN prepacked linear")
    if not linear.bf16_packing():
        pytest.skip(linear.bf16_packing_refused())
    w = torch.nn.Parameter(torch.randn(40, 24))
    x = torch.randn(3, 24)
    torch.testing.assert_close(linear.Packed(w)(x), x @ w.t(), atol=1e-5, rtol=1e-5)
    w.data = w.data.to(torch.bfloat16)
    assert torch.equal(linear.Packed(w)(x.bfloat16()), torch.mm(x.bfloat16(), w.t()))


def test_a_cpu_that_cannot_pack_bf16_is_never_asked_to(monkeypatch):
    """Where this CPU refuses oneDNN's bf16 packing (AVX2 only), linear() does not try it: a large
    bf16 weight's candidates hold no Packed, and its product is still chosen and exact."""
    from bildlib.models import linear as LN

    monkeypatch.setattr(LN, "bf16_packing", lambda: False)
    monkeypatch.setattr(LN, "_invariant", lambda cls, w: True)
    w = torch.randn(1024, 384).bfloat16()
    assert LN.Packed not in LN.candidates(w) and not LN.onednn(torch.bfloat16)
    x = torch.randn(3, 384).bfloat16()
    torch.testing.assert_close(LN.linear(w)(x).float(), (x.float() @ w.float().t()), atol=0.05, rtol=0.02)
