"""Row invariance measured where it runs (bildlib.models.rowinv): the probe refuses an injected
product whose rows depend on the call's row count or on the rows' addresses, and the engine takes
an invariant path instead; the paths the engine chose on the machine running the tests are
invariant, product by product and over whole decoder calls; and so under each ISA cap this CPU
can be capped to, each in its own process."""

import json
import os
import subprocess
import sys

import pytest
import torch

from bildlib.models import linear as LN
from bildlib.models import rowinv, rowsmm
from conftest import REPO

LARGE = REPO / "data" / "checkpoints" / "multi30k-large"


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch):
    """Each test sees its own record of choices (the process's real record is left as it was)."""
    monkeypatch.setattr(rowinv, "CHOSEN", {})
    monkeypatch.setattr(rowinv, "NOT_INVARIANT", set())
    monkeypatch.setattr(rowinv, "FIRST_ONLY", False)
    monkeypatch.setattr(rowinv, "CALLS", {})
    monkeypatch.setattr("bildlib.models.wholecall._DONE", __import__("weakref").WeakKeyDictionary())


def ints(*shape: int, seed: int = 0) -> torch.Tensor:
    """Small integers as float32: every product and sum of them is exact, so x @ t over them has
    the same bits whatever the kernel's order on any CPU (torch.mm's own float32 rows differ by
    row count on an AVX2 CPU), and only a dependence a test injects shows."""
    return torch.randint(-8, 9, shape, generator=torch.Generator().manual_seed(seed)).float()


X = ints(rowinv.ROWS, 24, seed=1)  # probe rows for the injected products over t (24, 8)


def one_row_apart(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x @ t, except that a one-row call sums in another order (as MKL's gemv did on an Intel Xeon)."""
    y = x @ t
    return y + 1e-3 if x.shape[0] == 1 else y


def off_alignment_apart(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """x @ t, rounded otherwise where x's first row starts off a 16-byte boundary."""
    y = torch.cat([r @ t for r in x.unbind(0)]).view(x.shape[0], -1)
    return y + 1e-3 if x.data_ptr() % 16 else y


def test_the_probe_finds_row_count_and_address_dependence():
    t = ints(24, 8)
    one = rowinv.probe(lambda x: one_row_apart(x, t), 24, torch.float32, x0=X)
    assert one and {k for _, k, _ in one} == {1}
    addr = rowinv.probe(lambda x: off_alignment_apart(x, t), 24, torch.float32, x0=X)
    assert addr and {off for off, _, _ in addr} == {1}  # only the rows starting off the boundary
    each = rowinv.rowwise(lambda x: x @ t)
    assert rowinv.probe(each, 24, torch.float32, x0=X) == []


def one_row_sums_reversed(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """x @ m^T as a bf16 product computes it (float32 sums, one rounding), each row on its own,
    except that a one-row call adds the terms in the reverse order (as oneDNN's packed bf16
    product under ONEDNN_MAX_CPU_ISA=AVX512_CORE summed otherwise at one row)."""
    order = range(m.shape[1] - 1, -1, -1) if x.shape[0] == 1 else range(m.shape[1])
    return torch.stack([in_order(r, m, order) for r in x]).to(x.dtype)


def in_order(r: torch.Tensor, m: torch.Tensor, order) -> torch.Tensor:
    """r @ m^T summed term by term in float32 (cumsum would sum in double), in the given order."""
    acc = torch.zeros(m.shape[0])
    for i in order:
        acc = acc + r[i].float() * m[:, i].float()
    return acc


def test_sharp_rows_show_a_summation_order_that_bf16_rounding_hides():
    """A bf16 product whose one-row call sums in another order rounds to the same bits on almost
    every random row; rowinv.sharp's rows (two large terms cancelling at one output) show it at
    every row tested alone, and nowhere else."""
    g = torch.Generator().manual_seed(5)
    m = (torch.randn(48, 40, generator=g) * 0.05).bfloat16()  # (out, n)
    f = lambda x: one_row_sums_reversed(x, m)  # noqa: E731
    x = rowinv.sharp(m)
    assert x.shape == (rowinv.ROWS, 40)
    bad = rowinv.probe(f, 40, torch.bfloat16, x0=x)
    assert {k for _, k, _ in bad} == {1} and len(bad) >= rowinv.ROWS  # most of the 18 one-row calls
    same = lambda x: torch.stack([in_order(r, m, range(40)) for r in x]).bfloat16()  # noqa: E731
    assert rowinv.probe(same, 40, torch.bfloat16, x0=x) == []  # an invariant product passes


def test_choose_refuses_a_non_invariant_path_and_takes_the_next():
    t = ints(24, 8)
    cands = {"fast": lambda x: one_row_apart(x, t), "safe": rowinv.rowwise(lambda x: x @ t)}
    name, f = rowinv.choose("rows_mm", (24, 8), cands, lambda f: not rowinv.probe(f, 24, torch.float32, x0=X))
    assert name == "safe" and torch.equal(f(torch.ones(1, 24)), torch.ones(1, 24) @ t)
    c = rowinv.CHOSEN[("rows_mm", 24, 8)]
    assert (c.path, c.invariant, c.tried) == ("safe", True, ("fast",))
    assert rowinv.exact_here() and rowinv.summary()["row_invariant"] is True
    # padded to two rows, the one-row case never runs: "bmm>=2" is the first invariant path
    fam, f32 = rowinv.paths(one_row_apart, 0), torch.float32
    name, _ = rowinv.choose("rows_mm", (24, 9), fam,
                            lambda f: not rowinv.probe(lambda x: f(x, t), 24, f32, x0=X))  # fmt: skip
    assert name == "bmm>=2"


def test_with_no_invariant_path_bild_is_not_called_exact(multi30k_dir):
    t = torch.randn(24, 8)
    bad = {"a": lambda x: one_row_apart(x, t), "b": lambda x: off_alignment_apart(x, t)}
    name, _ = rowinv.choose("rows_mm", (1, 2), bad, lambda f: not rowinv.probe(f, 24, torch.float32))
    assert name == "a" and not rowinv.exact_here()
    s = rowinv.summary()
    assert s["row_invariant"] is False and "NOT invariant" in s["products"]
    from bildlib import decoding as D
    from bildlib.analysis.tables import products_clause
    from bildlib.models import load_pair

    small, large = load_pair(REPO / "data/checkpoints/multi30k-small-aligned", LARGE, dtype="float32")
    src = small.encode("Ein Mann fährt Fahrrad.")
    with pytest.warns(RuntimeWarning, match="lossless BiLD is not exact on this machine"):
        D.bild(small, large, src, distance="exact")
    assert "lossless is not exact" in products_clause(s)


def test_linear_refuses_an_injected_product_that_is_not_row_invariant(monkeypatch):
    class OneRowApart(LN.MM):
        def __call__(self, x):
            return one_row_apart(x, self.t)

    monkeypatch.setattr(LN, "candidates", lambda w, native=False: [OneRowApart, LN.Float32])
    monkeypatch.setattr(LN, "_INVARIANT", {})
    w = torch.randn(16, 24)
    assert type(LN.linear(w)) is LN.Float32
    assert rowinv.CHOSEN[("linear", (16, 24), "float32")].tried == ("OneRowApart",)


def test_rows_mm_pads_past_an_injected_few_row_kernel(monkeypatch):
    """rows_mm over a batched kernel that sums otherwise below three rows: the probe picks
    "bmm>=4" (two rows padded to four), and each row's bits then match the 16-row call's."""

    def few_rows_apart(x, t, res=None):
        y = torch.bmm(x.unsqueeze(1), t.expand(x.shape[0], -1, -1)).squeeze(1)
        y = y if res is None else y + res
        return y * (1 + 1e-6) if x.shape[0] < 3 else y

    monkeypatch.setattr(rowsmm, "_rows_bmm", few_rows_apart)
    monkeypatch.setattr(rowsmm, "_ROWS", {})
    t, x = torch.randn(40, 12), torch.randn(16, 40)
    full = LN.rows_mm(x, t)
    assert rowinv.CHOSEN[("rows_mm", 40, 12, False)].path in ("bmm>=4", "bmm>=8", "bmm>=16", "rowwise")
    assert all(torch.equal(LN.rows_mm(x[:k], t), full[:k]) for k in range(1, 17))


def test_attention_pads_past_an_injected_few_row_kernel(monkeypatch):
    """attend over a kernel that sums otherwise at one or two query rows: the probe picks padding
    to four rows at least (more where this machine's own kernel needs it), and each row's bits
    then match the 16-row call's."""
    from bildlib.models import lean_common as LC

    real, order = LC._attend, list(rowinv.paths(LC._attend))
    monkeypatch.setattr(LC, "_ATTEND", {})
    LC.attend(torch.randn(2, 1, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8), None)  # this machine's own
    here = order.index(rowinv.CHOSEN[("attention", "float32", 2, 8, "no bias")].path)

    def two_rows_apart(q, k, v, bias):
        a = real(q, k, v, bias)
        return a * (1 + 1e-6) if q.shape[1] <= 2 else a

    monkeypatch.setattr(LC, "_attend", two_rows_apart)
    monkeypatch.setattr(LC, "_ATTEND", {})
    q, k = torch.randn(2, 16, 8), torch.randn(2, 30, 8)
    full = LC.attend(q, k, k, None)
    assert rowinv.CHOSEN[("attention", "float32", 2, 8, "no bias")].path == order[max(here, 2)]  # bmm>=4
    assert all(torch.equal(LC.attend(q[:, :n], k, k, None), full[:, :n]) for n in range(1, 17))


def test_attention_runs_an_unaligned_operand_on_an_aligned_copy(monkeypatch):
    """attend over a baddbmm whose bits depend on where its bias starts (as cuBLAS's bf16 baddbmm
    on an H200, at every row count): realigned, this machine's own path stays invariant; without
    the realignment every path but one call per fresh row is refused."""
    from bildlib.models import lean_common as LC

    monkeypatch.setattr(LC, "_ATTEND", {})
    q, k, b = torch.randn(2, 1, 8), torch.randn(2, 3, 8), torch.randn(2, 1, 3)
    LC.attend(q, k, k, b)  # this machine's own choice
    label = ("attention", "float32", 2, 8, "bias")
    here = rowinv.CHOSEN[label].path
    real = torch.baddbmm

    def by_address(bias, a, bt):
        s = real(bias, a, bt)
        return s * (1 + 1e-6) if bias.data_ptr() % 16 else s

    monkeypatch.setattr(torch, "baddbmm", by_address)
    off = torch.empty(2 * 3 + 1)[1:].view(2, 1, 3).copy_(b)  # the same bias, 4 bytes past an allocation
    assert not torch.equal(by_address(off, q, k.transpose(1, 2)), by_address(b, q, k.transpose(1, 2)))
    monkeypatch.setattr(LC, "_ATTEND", {})
    assert torch.equal(LC.attend(q, k, k, off), LC.attend(q, k, k, b))
    assert rowinv.CHOSEN[label].path == here and rowinv.CHOSEN[label].invariant
    monkeypatch.setattr(LC, "_aligned", lambda t: t)
    monkeypatch.setattr(LC, "_ATTEND", {})
    LC.attend(q, k, k, b)
    assert rowinv.CHOSEN[label].path == "rowwise"


def test_choices_on_a_gpu_are_kept_apart_and_named(monkeypatch):
    """A product probed on a GPU is recorded under its device and summary() names the GPU, not
    the CPU's ISA; a GPU weight's one candidate is cuBLAS's product, probed like the rest."""
    from types import SimpleNamespace

    t = torch.randn(24, 8)
    rowinv.choose("rows_mm", (24, 8), {"bmm": lambda x: x @ t}, lambda f: True)
    rowinv.choose("rows_mm", (24, 8), {"bmm": lambda x: x @ t}, lambda f: False, "cuda")
    assert rowinv.CHOSEN[("rows_mm", 24, 8)].invariant and rowinv.CHOSEN[("rows_mm", 24, 8)].device == "cpu"
    assert not rowinv.CHOSEN[("rows_mm", 24, 8, "cuda")].invariant
    s = rowinv.summary()
    assert s["isa"] == f"{rowinv.isa()}; {rowinv.gpu('cuda')}" and s["row_invariant"] is False
    monkeypatch.setattr(rowinv, "CHOSEN", {})
    rowinv.choose("rows_mm", (24, 8), {"bmm": lambda x: x @ t}, lambda f: True, "cuda")
    assert rowinv.summary()["isa"] == rowinv.gpu("cuda")
    assert LN.candidates(SimpleNamespace(device=torch.device("cuda"))) == [LN.MM]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prefix_attention_rows_equal_their_one_row_calls_and_attention(dtype):
    """attend_prefix, the causal path invariant by construction: each row of a call of 1 to 37
    tokens (past PREFIX_ROWS, in pieces) after 0, 5 and 23 cached keys has the bits of that row
    alone over exactly its keys, with keys that show a summation order (lean_common._sharp_keys);
    and it is attention: within float32 rounding of softmax(q k^T + bias) v, or, in bf16, as
    close to the float32 result as the one-row bf16 path (_attend) is."""
    from bildlib.models import lean_common as LC

    g = torch.Generator().manual_seed(7)
    H, dh = 3, 20
    for pos in (0, 5, 23):
        for kq in (1, 2, 3, 7, 11, 16, 17, 37):
            n = pos + kq
            q, k, v = (torch.randn(H, m, dh, generator=g) for m in (kq, n, n))
            b = torch.randn(H, kq, n, generator=g)
            if pos:
                k, v, b = LC._sharp_keys(k, v, b, dtype)
            b = b.masked_fill(torch.ones(kq, n, dtype=torch.bool).triu(pos + 1), torch.finfo(dtype).min)
            q, k, v, b = (t.to(dtype) for t in (q, k, v, b))
            got = LC.attend_prefix(q, k, v, b)
            for j in range(kq):
                m = pos + j + 1
                alone = LC.attend_prefix(q[:, j : j + 1], k[:, :m], v[:, :m], b[:, j : j + 1, :m])
                assert torch.equal(got[:, j : j + 1], alone), (pos, kq, j)
            want = torch.softmax(q.float() @ k.float().transpose(1, 2) + b.float(), -1) @ v.float()
            err = (got.float() - want).abs().max().item()
            if dtype == torch.float32:  # sharp keys' values reach 2^16: rounding scales with them
                assert err <= 1e-6 * max(1.0, v.abs().max().item()), (err, pos, kq)
            else:
                bf16 = LC.per_row(q, k, v, b).float()
                assert err <= 2 * (bf16 - want).abs().max().item() + 1e-6, (err, pos, kq)


def test_causal_attention_refuses_a_kernel_that_sums_masked_keys_otherwise(monkeypatch):
    """With the one-call path broken (its result follows the key count, masked keys included, as
    bf16 attention did on an Intel Xeon), the probe refuses it: attend_causal(prefix=True) takes
    "prefix" (as the T5 engine's self-attention calls it), and attend_causal without it "per-row";
    with the prefix path broken too, so does the first, and each row of a k-token call then equals
    the one-row call over exactly its keys."""
    from bildlib.models import lean_common as LC

    real, real_prefix = LC._attend, LC.attend_prefix

    def by_key_count(f):
        return lambda q, k, v, bias: f(q, k, v, bias) * (1 + 1e-3 * (k.shape[1] % 3))

    monkeypatch.setattr(LC, "_attend", by_key_count(real))
    monkeypatch.setattr(LC, "_ATTEND", {})
    monkeypatch.setattr(LC, "_CAUSAL", {})
    H, dh, pos, kq = 2, 8, 5, 6
    q, k, v = torch.randn(H, kq, dh), torch.randn(H, pos + kq, dh), torch.randn(H, pos + kq, dh)
    bias = torch.zeros(H, kq, pos + kq).masked_fill(torch.ones(kq, pos + kq, dtype=torch.bool).triu(pos + 1),
                                                    torch.finfo(torch.float32).min)  # fmt: skip
    assert torch.equal(LC.attend_causal(q, k, v, bias, prefix=True), real_prefix(q, k, v, bias))
    assert rowinv.CHOSEN[("attention", "float32", H, dh, "causal, prefix allowed")].path == "prefix"
    LC.attend_causal(q, k, v, bias)
    assert rowinv.CHOSEN[("attention", "float32", H, dh, "causal")].path == "per-row"
    monkeypatch.setattr(LC, "attend_prefix", by_key_count(real_prefix))
    monkeypatch.setattr(LC, "_CAUSAL", {})
    monkeypatch.setattr(rowinv, "CHOSEN", {})
    got = LC.attend_causal(q, k, v, bias, prefix=True)
    assert rowinv.CHOSEN[("attention", "float32", H, dh, "causal, prefix allowed")].path == "per-row"
    for j in range(kq):
        n = pos + j + 1
        alone = LC._attend(q[:, j : j + 1], k[:, :n], v[:, :n], bias[:, j : j + 1, :n])
        assert torch.equal(got[:, j : j + 1], alone)


def shipped_large(dtype: str):
    from bildlib.models import LM

    if not (LARGE / "model.safetensors").is_file():
        pytest.skip("the shipped pair is not trained (make models)")
    return LM.from_pretrained(str(LARGE), dtype=dtype, engine="lean")


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_the_engine_claim_for_the_shipped_large_holds_here(dtype, multi30k_dir):
    """On the machine running the tests: every decoder product the lean engine chose for the shipped
    large is row-invariant (probed again here), and what its whole-call check claims holds on a real
    sentence: where it passed (with whatever it switched), a decoder call over k tokens gives each
    token the logits, bit for bit, of the same tokens fed one at a time (what lossless BiLD rests
    on); where it failed, lossless BiLD warns that it is not exact."""
    lm = shipped_large(dtype)
    impl = lm.impl
    pairs = [(impl.lm, impl.plain_lm)]  # (weight (out, in), its product as chosen, unswitched)
    # (the encoder's products run once per source, over all its rows: linear.once, never probed)
    pairs += [(w[n[:-2]], p) for w, plain in zip(impl.dec, impl.plain, strict=True) for n, p in plain.items()]
    for weight, p in pairs:
        assert rowinv.probe(p, weight.shape[1], impl.dtype) == [], (tuple(weight.shape), type(p).__name__)
    v = lm.call_check
    assert v is not None and rowinv.CALLS[(v.name, v.dtype, v.threads)] is v and v.name == LARGE.name
    src = lm.encode("Zwei junge Männer spielen auf einer Wiese Fußball, und ein Hund sieht zu.")
    out = "Two young men are playing soccer on a field while a brown dog watches them"
    tokens = [0, *lm.encode(out)[:-1]]
    same = []
    for k in (2, 3, 5, 8, 11, 16):
        lm.start(src)
        one = torch.cat([lm.forward([t]) for t in tokens])  # vanilla's one-token calls
        lm.start(src)
        lm.forward(tokens[:1])
        rows = [lm.forward(tokens[i : i + k]) for i in range(1, len(tokens), k)]  # BiLD's k-token checks
        same.append(torch.equal(torch.cat(rows), one[1:]))
    if v.passed and rowinv.exact_here():
        assert all(same), (dtype, v, same)
        assert rowinv.summary()["row_invariant"] is True
    else:
        from bildlib import decoding as D

        assert rowinv.summary()["row_invariant"] is False
        with pytest.warns(RuntimeWarning, match="not exact"):
            D.bild(lm, lm, src, distance="exact")


CHECK = """
import json, torch
torch.set_num_threads(2)
from bildlib import decoding as D
from bildlib.models import load_pair, rowinv
p = "data/checkpoints/multi30k-"
small, large = load_pair(p + "small-aligned", p + "large", dtype="bfloat16", engine="lean")
texts = ["Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.", "Ein Boston Terrier läuft über "
         "saftig-grünes Gras vor einem weißen Zaun.", "Ein Mädchen in einem Karateanzug bricht einen Stock."]
same = [D.vanilla(large, small.encode(t))[0] == D.bild(small, large, small.encode(t), distance="exact")[0]
        for t in texts]
print(json.dumps(rowinv.summary() | {"same": same}))
"""


@pytest.mark.parametrize("cap", rowinv.caps()[1:], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_under_each_isa_cap_the_chosen_paths_are_invariant_and_lossless_is_exact(cap, multi30k_dir):
    """Each ISA cap this CPU supports (oneDNN's, ATen's), in a fresh process: the engine's chosen
    paths are row-invariant there and lossless BiLD equals vanilla greedy on three val sentences in
    bf16 (make exactness runs all of val under each cap)."""
    if not (LARGE / "model.safetensors").is_file():
        pytest.skip("the shipped pair is not trained (make models)")
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=REPO, env=os.environ | cap,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["row_invariant"] is True and all(got["same"]), got
    assert all(f"{k}={v}" in got["isa"] for k, v in cap.items()), got["isa"]


def test_exactness_rows_resume_and_render(tmp_path, monkeypatch):
    """bench.exactness keeps one row per CPU, ISA, dtype, n and code state (a rerun replaces it, a
    recorded run is skipped), and reports.exactness renders every row, a run that was not
    invariant marked, and refuses a CSV without its columns, naming it."""
    from bildlib.analysis.tables import ReportError
    from bildlib.bench import exactness as E
    from bildlib.reports import exactness as R

    monkeypatch.setattr("bildlib.notebook.code_state", lambda: "abc")
    out = tmp_path / "figures" / "exactness"
    row = E._row("bfloat16", 3, 2) | {"differ": 0, "first_differing": None, "row_invariant": True,
                                      "products": "linear Packed", "vanilla_ms": 1.0}  # fmt: skip
    assert not E.done(3, "bfloat16", out / "exactness.csv")
    E.record([row], out / "exactness.csv")
    E.record([row | {"differ": 2}], out / "exactness.csv")  # the same run again: replaced
    capped = row | {"isa": row["isa"] + ", ONEDNN_MAX_CPU_ISA=AVX2", "row_invariant": False, "differ": 1}
    E.record([capped], out / "exactness.csv")
    assert E.done(3, "bfloat16", out / "exactness.csv") and not E.done(3, "float32", out / "exactness.csv")
    text = R.block(tmp_path)
    assert "**2 of 3**" in text and "**1 of 3**" in text and "0 of 3" not in text
    assert "`ONEDNN_MAX_CPU_ISA=AVX2`" in text and "**no**" in text and "code state `abc`" in text
    import pandas as pd

    pd.read_csv(out / "exactness.csv").drop(columns="differ").to_csv(out / "exactness.csv", index=False)
    with pytest.raises(ReportError, match="differ"):
        R.block(tmp_path)
