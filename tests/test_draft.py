"""The small model's run as one C++ call (models.native, kernels/cpu_draft.h) against bild()'s
Python loop (decoding.draft), its reference: the same tokens and the same Trace counters, greedy
and sampled, on every tiny architecture and on the shipped pair; and the policy's C++ reductions
(kernels/cpu_policy.h) against torch's."""

from __future__ import annotations

import os

import pytest
import torch
from test_engine import ARCHS, tiny

from bildlib import decoding as D
from bildlib.experiments.calls import recording
from bildlib.kernels import cpu
from bildlib.kernels import reference as R
from bildlib.models import LM
from bildlib.models.lm import check_pair
from bildlib.models.native.plan import Run
from conftest import REPO, TINY_VOCAB, perturbed, tiny_tokenizer

pytestmark = pytest.mark.skipif(cpu.load() is None, reason=f"no native engine here: {cpu.why()}")

CONFIGS = [  # greedy (ours, the authors' rules, exact, no fallback) and nucleus sampling
    {"fallback": 0.6, "rollback": 1.0},
    {"fallback": 0.5, "rollback": 1.0, "distance": "exact"},
    {"fallback": 0.4, "rollback": 1.0, "verify_end_below": 0.8, "max_small_steps": 3},
    {"fallback": 0.5, "rollback": 1.0, "rules": "authors"},
    {"fallback": None, "window": 4, "rollback": 2.0},
    {"fallback": 0.5, "rollback": 2.0, "sampling": D.Sampling(1.0, 0.8, 3)},
    {"fallback": 0.3, "rollback": 3.0, "sampling": D.Sampling(0.7, 1.0, 1)},
]


def counters(tr) -> tuple:
    return (tr.source, tr.drafted, tr.fallbacks, tr.rollbacks, tr.rolled_back, tr.small_calls,
            tr.large_calls, tr.large_call_tokens)  # fmt: skip


def native_switch(monkeypatch, small) -> dict:
    """small's native run behind a switch: state["native"] False makes LM.draft return None (the
    Python loop of decoding.draft runs); state["runs"] counts the native runs made."""
    state, inner = {"native": True, "runs": 0}, small.draft

    def draft(seq, run):
        out = inner(seq, run) if state["native"] else None
        state["runs"] += out is not None
        return out

    monkeypatch.setattr(small, "draft", draft)
    return state


def same_decodes(monkeypatch, small, large, sources, configs=CONFIGS, **kw) -> int:
    """Decode every source under every config with the native run and with the Python loop;
    assert the same tokens and counters; return how many native runs were made."""
    state = native_switch(monkeypatch, small)
    for c in configs:
        for x in sources:
            state["native"] = True
            y1, t1 = D.bild(small, large, x, **c, **kw)
            state["native"] = False
            y0, t0 = D.bild(small, large, x, **c, **kw)
            assert y1 == y0, (c, x)
            assert counters(t1) == counters(t0), (c, x)
            assert len(t1.small_times) == t1.small_calls and sum(t1.small_times) > 0
    return state["runs"]


def tiny_pair(kind: str, dtype: torch.dtype):
    big = tiny(kind, seed=1).to(dtype)
    small = perturbed(big, seed=2, noise=0.3)
    tok = tiny_tokenizer()
    s, lg = LM(small, tok, "small", engine="auto"), LM(big, tok, "large", engine="auto")
    check_pair(s, lg)
    return s, lg


SOURCES = [[5, 9, 11, 3, 1], [7, 7, 20, 1], [30, 4, 18, 25, 12, 6, 1], [3, 1]]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
@pytest.mark.parametrize("kind", ARCHS)
def test_the_native_run_equals_the_python_loop_on_every_tiny_architecture(kind, dtype, monkeypatch):
    """T5 and mT5 (relu; gated gelu_new) on the native engine draft in C++; the decoder-only
    models have no native run and keep the Python loop. Either way the same tokens and counters."""
    s, lg = tiny_pair(kind, dtype)
    n = same_decodes(monkeypatch, s, lg, SOURCES, max_new_tokens=24)
    if kind in ("t5", "t5-tied", "mt5"):
        assert s.engine == "native" and n > 0, "the native run never ran"
    else:
        assert not hasattr(s.impl, "draft")


@pytest.mark.parametrize("kind", ["t5", "t5-tied", "mt5"])
def test_the_native_run_equals_the_python_loop_in_int8(kind, monkeypatch):
    """dtype "int8": every product of both models in int8 (models.linear.NativeInt8), in the C++
    run (cpu_draft.h's NATIVE8) and in the Python loop alike."""
    big = tiny(kind, seed=1)
    small = perturbed(big, seed=2, noise=0.3)
    big.bild_int8 = small.bild_int8 = True  # as models.load does for dtype "int8"
    tok = tiny_tokenizer()
    s, lg = LM(small, tok, "small", engine="auto"), LM(big, tok, "large", engine="auto")
    assert type(s.impl.lm_l).__name__ == type(lg.impl.dec[0]["wo_l"]).__name__ == "NativeInt8"
    assert same_decodes(monkeypatch, s, lg, SOURCES, max_new_tokens=24) > 0


@pytest.mark.parametrize("kind", ["t5", "mt5"])
def test_vanilla_decodes_in_one_native_call_as_its_python_loop(kind, monkeypatch):
    """Vanilla decoding on the native engine: one C++ run to EOS or max_new_tokens, greedy and
    sampled, the tokens and counts of its Python loop."""
    s, _ = tiny_pair(kind, torch.float32)
    state = native_switch(monkeypatch, s)
    for sampling in (None, D.Sampling(1.0, 0.9, 5)):
        for x in SOURCES:
            state["native"] = True
            y1, t1 = D.vanilla(s, x, sampling=sampling, max_new_tokens=24)
            state["native"] = False
            y0, t0 = D.vanilla(s, x, sampling=sampling, max_new_tokens=24)
            assert y1 == y0 and counters(t1) == counters(t0)
            assert len(t1.small_times) == t1.small_calls == len(y1)
    assert state["runs"] == 2 * len(SOURCES)


def test_a_switched_op_family_runs_the_python_loop(monkeypatch):
    """Where the whole-call check switched an op family to one row at a time, the C++ run (which
    mirrors the unswitched engine) is not taken: LM.draft says None, the Python loop runs."""
    s, lg = tiny_pair("t5", torch.float32)
    s.impl.set_rows(("norm",))
    seq = [s.start(SOURCES[0])]
    assert s.draft(seq, Run(4, 0.5, 1, 10)) is None
    s.impl.set_rows(())
    assert s.draft(seq, Run(4, 0.5, 1, 10)).steps >= 1


def test_recording_sees_a_native_run_as_its_steps(monkeypatch):
    """experiments.calls.recording records each step of a native run as the Python loop's call."""
    s, lg = tiny_pair("t5", torch.float32)
    state, out = native_switch(monkeypatch, s), []
    for native in (True, False):
        state["native"] = native
        with recording({"small": s, "large": lg}) as calls:
            ids, tr = D.bild(s, lg, SOURCES[2], fallback=0.5, rollback=1.0, max_new_tokens=24)
        out.append((ids, calls, tr.small_calls))
    assert state["runs"] > 0 and out[0] == out[1]
    assert sum(c["model"] == "small" for c in out[0][1]) == out[0][2]


@pytest.mark.timeout(3600)  # under qemu (make test-cpus) the load-time probes alone take over 15 minutes
def test_the_shipped_pair_drafts_natively_token_for_token(multi30k_dir, monkeypatch):
    """The shipped aligned pair, float32, bf16 and int8, 8 held-out sentences (2 under an emulated CPU,
    make test-cpus: qemu runs this some 30 times slower), greedy and sampled."""
    from bildlib import data
    from bildlib.models import load_model

    ck = REPO / "data" / "checkpoints"
    sources = None
    for dtype in ("float32", "bfloat16", "int8"):
        (ms, tok), (ml, _) = (load_model(ck / f"multi30k-{m}", dtype=dtype) for m in ("small-aligned",
                                                                                        "large"))
        s, lg = LM(ms, tok, "aligned", "native"), LM(ml, tok, "large", "native")
        check_pair(s, lg)
        n = 2 if os.environ.get("BILD_EMULATED") else 8
        sources = sources or [tok(x)["input_ids"] for x in data.load("multi30k", "val", n).sources]
        assert same_decodes(monkeypatch, s, lg, sources, CONFIGS[:3] + CONFIGS[5:6], max_new_tokens=64) > 0


# -- the policy's reductions (cpu_policy.h) -------------------------------------------------------
def odd_rows(k: int, V: int, dtype) -> torch.Tensor:
    """Logits with the cases a reduction can get wrong: ties for the maximum (the first wins),
    -inf entries, a row of one value, irregular widths (a tail past 16 lanes)."""
    g = torch.Generator().manual_seed(V)
    x = torch.randn(k, V, generator=g) * 6
    x[0, V // 3] = x[0, V - 1] = x[0].max() + 1  # a tie: the first is the argmax
    if k > 1:
        x[1, ::3] = -torch.inf
    if k > 2:
        x[2] = 0.5
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bf16"])
@pytest.mark.parametrize("V", [1, 7, 16, 17, 33, 1000, TINY_VOCAB, 32128, 32131])
def test_the_policy_reductions_match_torch(V, dtype):
    x = odd_rows(3, V, dtype)
    p, i = cpu.load().max_prob(x)
    p0, i0 = R.max_prob_ref(x)
    assert torch.equal(i, i0)
    torch.testing.assert_close(p, p0, rtol=1e-5, atol=1e-7, equal_nan=True)
    y = torch.tensor([0, V - 1, V // 2])
    d, j = cpu.load().rollback_distance(x, y)
    d0, j0 = R.rollback_distance_ref(x, y)
    assert torch.equal(j, j0)
    torch.testing.assert_close(d, d0, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_a_nan_or_an_all_minus_inf_row_is_nan_as_torch_gives():
    x = torch.tensor([[1.0, float("nan"), 3.0, float("nan")], [-float("inf")] * 4, [1.0, 3.0, 3.0, 0.0]])
    p, i = cpu.load().max_prob(x)
    p0, i0 = R.max_prob_ref(x)
    assert torch.equal(i, i0) and torch.equal(p.isnan(), p0.isnan()) and p[2] == pytest.approx(float(p0[2]))


@pytest.mark.parametrize("threads", [1, 2])
def test_the_policy_reductions_keep_each_rows_bits(threads):
    """A row's result is the same bits alone and among others, at 1 and 2 threads."""
    now = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = odd_rows(11, 32131, torch.float32)
        p, i = cpu.load().max_prob(x)
        d, _ = cpu.load().rollback_distance(x, torch.arange(11))
        for r in range(11):
            pr, ir = cpu.load().max_prob(x[r : r + 1].clone())
            dr, _ = cpu.load().rollback_distance(x[r : r + 1].clone(), torch.tensor([r]))
            assert pr.view(torch.int32) == p[r : r + 1].view(torch.int32) and ir == i[r]
            assert torch.equal(dr.view(torch.int32), d[r : r + 1].view(torch.int32))
    finally:
        torch.set_num_threads(now)


def test_bad_logits_are_named():
    with pytest.raises(RuntimeError, match="logits: float32 or bfloat16"):
        cpu.load().max_prob(torch.zeros(2, 3, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"tokens: .* outside \[0, 3\)"):
        cpu.load().rollback_distance(torch.zeros(1, 3), torch.tensor([3]))
