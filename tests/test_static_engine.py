"""The static engine (models.static_t5) on CPU: its logits equal HF's over a schedule of calls and
crops past its first cache length and a source past its first source buffer, and its step traces
whole (torch.compile(fullgraph=True): no graph break, so no host synchronisation) with the same
logits. On a GPU the same step runs the row-invariant Triton kernels inside CUDA graphs
(make gpu-check)."""

import pytest
import torch
from test_decoding import sources
from test_engine import tiny

from bildlib import decoding as D
from bildlib.models import LM, UnsupportedArchitectureError
from bildlib.models.static_t5 import StaticT5
from conftest import tiny_model, tiny_tokenizer

# calls of 1 to 16 tokens and crops; the cache starts at 64 positions and must grow past them
SCHEDULE = [[0], [5, 6, 7], ("crop", 2), [9], list(range(3, 19)), ("crop", 10), [4] * 7]
SCHEDULE += [list(range(3, 19))] * 5 + [("crop", 40), [8, 9], list(range(5, 21)), [6]]


def run(lms, src):
    bos = [lm.start(src) for lm in lms][0]
    for step in SCHEDULE:
        if step[0] == "crop":
            for lm in lms:
                lm.crop(step[1])
            continue
        yield [lm.forward([bos] + step[1:] if step == [0] else step) for lm in lms]


@pytest.mark.parametrize("kind", ["t5", "t5-tied", "mt5"])
def test_static_logits_equal_hf_past_the_first_lengths(kind):
    model, tok = tiny(kind), tiny_tokenizer()
    hf, st = LM(model, tok, engine="hf"), LM(model, tok, engine="static")
    assert isinstance(st.impl, StaticT5) and st.engine == "static" and not st.impl.graphs
    assert st.impl.kv.shape[3] == 64 and st.impl.ckv.shape[3] == 64
    long_src = torch.randint(3, 40, (1, 90), generator=torch.Generator().manual_seed(1))
    for src in sources(2, seed=3) + [long_src]:
        for a, b in run([st, hf], src):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    assert st.impl.kv.shape[3] == 128 and st.impl.ckv.shape[3] == 128  # both grew


def test_static_step_traces_whole_and_keeps_its_logits(monkeypatch):
    """torch.compile(fullgraph=True) raises at any graph break (a .item(), a host branch on a
    tensor); aot_eager runs the traced graph as captured, so its logits must be the eager ones.
    Every call runs a traced graph: one per call length, again after the cache grows."""
    from torch._dynamo.utils import counters

    model, tok = tiny("mt5"), tiny_tokenizer()  # gated feed-forward, untied head
    eager, comp = LM(model, tok, engine="static"), LM(model, tok, engine="static")
    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(torch._dynamo.config, "recompile_limit", 64)
    comp.impl.step = torch.compile(comp.impl.step, fullgraph=True, backend="aot_eager", dynamic=False)
    for src in sources(1, seed=5):
        for a, b in run([comp, eager], src):
            torch.testing.assert_close(a, b, atol=0, rtol=0)
    lengths = {len(s) for s in SCHEDULE if s[0] != "crop"}
    assert counters["stats"]["unique_graphs"] >= len(lengths) and not counters["graph_break"]


def test_static_bf16_within_rounding_and_lossless_bild_runs():
    model = tiny("t5-tied").to(torch.bfloat16)
    tok = tiny_tokenizer()
    hf, st = LM(model, tok, engine="hf"), LM(model, tok, engine="static")
    for a, b in run([st, hf], sources(1, seed=9)[0]):
        torch.testing.assert_close(a.float(), b.float(), atol=0.05, rtol=0.02)
    small = LM(tiny("t5-tied", seed=2).to(torch.bfloat16), tok, engine="static")
    src = sources(1, seed=4)[0]
    ids, trace = D.bild(small, st, src, max_new_tokens=30, distance="exact")
    assert ids and trace.large_calls >= 1


def test_static_refuses_what_it_cannot_run():
    tok = tiny_tokenizer()
    with pytest.raises(UnsupportedArchitectureError, match="engine='static'"):
        LM(tiny_model("gpt2", seed=1), tok, engine="static")
    st = LM(tiny("t5"), tok, engine="static")
    st.start(sources(1)[0])
    with pytest.raises(ValueError, match="1 to 16 tokens"):
        st.forward(list(range(3, 20)))
    with pytest.raises(ValueError, match="needs a CUDA device"):
        StaticT5(tiny("t5"), graphs=True)


def fixed_buffer_capture(self, fn):
    """StaticT5._capture as a CUDA graph behaves, on CPU: every replay computes into the one
    buffer allocated at capture (a graph's output is a fixed address)."""
    out = fn()
    if out is None:  # the encoder: it writes the engine's own buffers
        return fn, None
    out = out.clone()
    return (lambda: out.copy_(fn())), out


@pytest.mark.parametrize("distance", ["exact", "ce"])
def test_static_with_fixed_output_buffers_decodes_as_lean(monkeypatch, distance):
    """The graphed path's logic on CPU: with one output buffer per call length, BiLD's tokens and
    calls equal the lean engine's (a decoder keeps logits across calls: forward returns a copy)."""
    monkeypatch.setattr(StaticT5, "_capture", fixed_buffer_capture)
    tok = tiny_tokenizer()
    small_m, large_m = tiny("t5-tied", seed=2), tiny("t5-tied", seed=1)
    with torch.no_grad():  # a small model close to the large one: drafts are often kept
        for a, b in zip(small_m.parameters(), large_m.parameters(), strict=True):
            a.copy_(b + 0.02 * torch.randn_like(b))
    lean = LM(small_m, tok, engine="lean"), LM(large_m, tok, engine="lean")
    st = LM(small_m, tok, engine="static"), LM(large_m, tok, engine="static")
    for lm in st:
        lm.impl.graphs = True
    for src in sources(4, seed=11):
        a, ta = D.bild(*lean, src, max_new_tokens=40, distance=distance, rollback=1.0)
        b, tb = D.bild(*st, src, max_new_tokens=40, distance=distance, rollback=1.0)
        assert a == b and (ta.small_calls, ta.large_calls) == (tb.small_calls, tb.large_calls)
        assert ta.source == tb.source
    first = st[1].forward([5])
    kept = first.clone()
    st[1].forward([6])  # the same length: the buffer is rewritten, the returned logits are not
    assert torch.equal(first, kept) and st[0].impl.captured and st[1].impl.encoders


def test_static_runs_the_triton_kernels_as_on_a_gpu(monkeypatch):
    """The GPU path's kernels inside the engine, encoder chunks included, under Triton's
    interpreter on CPU (bildlib.kernels dispatches CUDA tensors to them; here every tensor): the
    logits equal HF's within float32's rounding, and each token of a 5-token call has the bits it
    gets in one-token calls (row invariance, as vanilla greedy's steps against BiLD's check)."""
    import os

    import bildlib.kernels as K

    if os.environ.get("TRITON_INTERPRET") != "1" or not K.HAS_TRITON:
        pytest.skip("needs Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1)")
    monkeypatch.setattr("bildlib.kernels.dispatch._triton", lambda *xs: True)
    model, tok = tiny("mt5"), tiny_tokenizer()
    hf, st = LM(model, tok, engine="hf"), LM(model, tok, engine="static")
    src = torch.randint(3, 40, (1, 21), generator=torch.Generator().manual_seed(2))  # two encoder chunks
    bos = hf.start(src)
    st.start(src)
    calls = [[bos, 5, 6], [7, 8, 9, 10, 11]]
    for toks in calls:
        torch.testing.assert_close(st.forward(toks), hf.forward(toks), atol=1e-4, rtol=0)
    whole = st.impl.forward(torch.tensor(calls[1]), 3).clone()
    for j, t in enumerate(calls[1]):
        assert torch.equal(st.impl.forward(torch.tensor([t]), 3 + j)[0], whole[j]), j
