"""The whole-call check (bildlib.models.wholecall): where a lean engine claims its k-token calls
keep one-token calls' bits, they do, on other tokens than the check's; an op injected outside the
products whose bits depend on the call's row count is caught and switched to one row at a time;
one that no switch makes invariant is refused, and lossless BiLD then says it is not exact."""

import weakref

import pytest
import torch
from test_engine import tiny

from bildlib import decoding as D
from bildlib.models import LM, rowinv, wholecall
from bildlib.models import lean_causal as LC
from bildlib.models.lean_t5 import LeanT5
from conftest import tiny_tokenizer


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test checks its own models afresh (the process's own records are left as they were)."""
    monkeypatch.setattr(rowinv, "CHOSEN", {})
    monkeypatch.setattr(rowinv, "NOT_INVARIANT", set())
    monkeypatch.setattr(rowinv, "CALLS", {})
    monkeypatch.setattr(wholecall, "_DONE", weakref.WeakKeyDictionary())


def lean(kind: str, dtype=torch.float32) -> LM:
    return LM(tiny(kind).to(dtype), tiny_tokenizer(), f"tiny-{kind}", engine="lean")


def keeps_bits(lm: LM, seed: int = 7) -> bool:
    """Whether calls of 1 to 16 tokens (other tokens than the check's) give each token the logits,
    bit for bit, of the same tokens fed one at a time."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, 40, (9,), generator=g).tolist()
    tokens = [lm.start(src), *torch.randint(3, 40, (40,), generator=g).tolist()]
    one = torch.cat([lm.forward([t]) for t in tokens])
    for k in (2, 3, 4, 7, 11, 16):
        lm.start(src)
        lm.forward(tokens[:3])
        got = torch.cat([lm.forward(tokens[i : i + k]) for i in range(3, len(tokens), k)])
        if not torch.equal(got, one[3:]):
            return False
    return True


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("kind", ["t5-tied", "mt5", "gpt2", "llama"])
def test_the_engine_claim_holds_here(kind, dtype):
    """On the machine running the tests, what the check claims holds: passed, k-token calls keep
    the bits (whatever it switched to get there); failed, lossless BiLD warns."""
    lm = lean(kind, dtype)
    v = lm.call_check
    assert v is not None and v.threads == torch.get_num_threads() and v.dtype == str(dtype)[6:]
    assert rowinv.CALLS[(lm.name, v.dtype, v.threads)] is v and lm.impl.rows == frozenset(v.switched)
    if v.passed:
        assert keeps_bits(lm), v
    else:
        with pytest.warns(RuntimeWarning, match="not exact"):
            D.bild(lean(kind, dtype), lm, [5, 6, 7], distance="exact")


def rows_apart(f, at: int = 0):
    """f, its result nudged by a relative 1e-3 where its input (argument `at`) has more than one
    row: a reduction whose order follows the row count, as k-token calls on an AMD EPYC with AVX2
    showed."""

    def nudged(*args):
        y = f(*args)
        return y * (1 + 1e-3) if args[at].shape[0] > 1 else y

    return nudged


def test_an_injected_norm_that_follows_the_row_count_is_caught_and_switched(monkeypatch):
    monkeypatch.setattr(LeanT5, "_norm", rows_apart(LeanT5._norm, 1))
    lm = lean("t5-tied")
    v = lm.call_check
    assert v.first == (1, 2) and v.passed and v.switched == ("norm",), v
    assert lm.impl.rows == {"norm"} and keeps_bits(lm)
    assert "passed (one row at a time: norm)" in rowinv.summary()["whole_call"]
    assert rowinv.summary()["row_invariant"] is True and rowinv.exact_here()
    from bildlib.analysis.tables import products_clause

    assert "; whole decoder call tiny-t5-tied float32" in products_clause(rowinv.summary())
    lm.impl.set_rows(())  # the switch is what keeps the bits: without it they go
    assert not keeps_bits(lm)


def test_two_injected_ops_are_both_switched_and_only_they(monkeypatch):
    """An activation and a norm of a decoder-only model both follow the row count: no one family
    suffices, so both are switched, and the families switched on the way but not needed are not."""
    monkeypatch.setattr(LC, "rms", rows_apart(LC.rms))
    act = LC.LeanLlama.__init__

    def init(self, model):
        act(self, model)
        self.act = rows_apart(self.act)

    monkeypatch.setattr(LC.LeanLlama, "__init__", init)
    lm = lean("llama")
    assert lm.call_check.passed and lm.call_check.switched == ("norm", "act"), lm.call_check
    assert keeps_bits(lm)


def test_an_op_no_switch_makes_invariant_is_refused(monkeypatch):
    """A norm whose bits change from call to call (no order of rows or calls can keep them): the
    check fails with every family switched, and lossless BiLD says it is not exact."""
    calls = iter(range(10**9))
    norm = LeanT5._norm

    def drifting(self, x, w):
        return norm(self, x, w) * (1 + 1e-3 * (next(calls) % 2))

    monkeypatch.setattr(LeanT5, "_norm", drifting)
    lm = lean("t5-tied")
    v = lm.call_check
    assert not v.passed and v.switched == LeanT5.OPS and not rowinv.exact_here()
    s = rowinv.summary()
    assert s["row_invariant"] is False
    assert f"tiny-t5-tied float32 {v.threads} threads FAILED" in s["whole_call"]
    with pytest.warns(RuntimeWarning, match="tiny-t5-tied float32 .* FAILED"):
        D.bild(lean("t5-tied"), lm, [5, 6, 7], distance="exact")


def test_checked_once_per_model_dtype_and_thread_count(monkeypatch):
    """A second LM on the same model takes the first one's verdict and switch unchecked; a changed
    thread count is checked again at the next start(), between sentences."""
    monkeypatch.setattr(LeanT5, "_norm", rows_apart(LeanT5._norm, 1))
    model, tok = tiny("t5-tied"), tiny_tokenizer()
    a = LM(model, tok, "a", engine="lean")
    runs = []
    real = wholecall.differs
    monkeypatch.setattr(wholecall, "differs", lambda *x, **k: runs.append(1) or real(*x, **k))
    b = LM(model, tok, "b", engine="lean")
    assert b.call_check is a.call_check and b.impl.rows == {"norm"} and not runs
    now = torch.get_num_threads()
    other = 1 if now > 1 else 2
    torch.set_num_threads(other)
    try:
        b.start([5, 6])
        assert runs and ("b", "float32", other) in rowinv.CALLS and b.impl.checked == other
        assert keeps_bits(b)
    finally:
        torch.set_num_threads(now)


def test_set_rows_names_the_families_it_knows():
    lm = lean("gpt2")
    with pytest.raises(ValueError, match="unknown op families \\['norms'\\].*gpt2"):
        lm.impl.set_rows(["norms"])
    assert set(LC.LeanGPT2.OPS) == {"norm", "act", "attention", "products", "call"}


def test_hf_engine_is_not_checked():
    assert LM(tiny("t5-tied"), tiny_tokenizer(), "hf", engine="hf").call_check is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_t5_self_attention_may_take_the_prefix_path_in_bf16_only(monkeypatch, dtype):
    """The T5 engine offers lean_common.attend_prefix to its self-attention in half precision only
    (in float32 one row alone is a cheap bmm: docs/row-invariance.md); and where the
    one-call masked path is refused, as by the attention injected here, the prefix path keeps a
    tiny T5's k-token calls at one-token calls' bits in either dtype, with no op family switched."""
    from bildlib.models import lean_common as LCm

    real = LCm._attend
    monkeypatch.setattr(LCm, "_attend", lambda q, k, v, b: real(q, k, v, b) * (1 + 1e-3 * (k.shape[1] % 3)))
    monkeypatch.setattr(LCm, "_ATTEND", {})
    monkeypatch.setattr(LCm, "_CAUSAL", {})
    lm = lean("t5-tied", dtype)
    causal = {k[4]: c.path for k, c in rowinv.CHOSEN.items()
              if k[0] == "attention" and k[4].startswith("causal")}  # fmt: skip
    half = dtype == torch.bfloat16
    assert causal == ({"causal, prefix allowed": "prefix"} if half else {"causal": "per-row"}), causal
    assert lm.call_check.passed and lm.call_check.switched == () and keeps_bits(lm)
    if not half:  # the prefix path itself keeps the bits in float32 too
        monkeypatch.setattr(LCm, "_CAUSAL", {})
        monkeypatch.setattr("bildlib.models.lean_t5.attend_causal",
                            lambda q, k, v, b, prefix=False: LCm.attend_causal(q, k, v, b, prefix=True))
        assert keeps_bits(lean("t5-tied", dtype))
