"""Every Triton kernel against its torch reference: on CPU under TRITON_INTERPRET=1, and on a CUDA GPU
with BILD_KERNEL_TEST_DEVICE=cuda TRITON_INTERPRET=0 (make gpu-check)."""

import os

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[cuda]'); kernels untested")

from bildlib.kernels import reference as R  # noqa: E402
from bildlib.kernels import triton_policy as T  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
# where the kernels run: "cpu" (Triton's interpreter) or "cuda" (compiled, on the GPU)
DEV = os.environ.get("BILD_KERNEL_TEST_DEVICE", "cpu")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# (V, k): every k in 1..16 on small vocabularies, the ends on the large ones (the interpreter is slow)
SHAPES = [(7, k) for k in range(1, 17)] + [(1000, 3), (1000, 16), (32128, 5), (250112, 1), (250112, 16)]
BIG = 30_000  # a vocabulary the interpreter takes seconds over, in each dtype


def grid(shapes: list[tuple[int, int]]) -> list:
    """(V, k, dtype): every dtype at every shape on a GPU and on the small vocabularies; under the
    interpreter a large vocabulary in one dtype, the dtypes taken in turn. What a dtype changes
    (the loads' conversion, -inf and ties) shows at every V, what a large V changes (the loop over
    blocks, the last partial block) in every dtype; the cross product costs a minute here."""
    out, turn = [], 0
    for V, k in shapes:
        if V < BIG or DEV != "cpu":
            out += [(V, k, d) for d in DTYPES]
        else:
            out.append((V, k, DTYPES[turn % len(DTYPES)]))
            turn += 1
    return [pytest.param(*c, id=f"{c[0]}-{c[1]}-{str(c[2]).removeprefix('torch.')}") for c in out]


def logits(k, V, dtype, seed=0):
    """Random rows with the hard cases: -inf entries, a row that is -inf but for one entry, ties."""
    g = torch.Generator().manual_seed(seed + V + k)
    x = torch.randn(k, V, generator=g) * 3
    if k > 1:
        x[1, : V // 2] = float("-inf")
    if k > 2:
        x[2, :] = float("-inf")
        x[2, V - 1] = 0.0
    if k > 3 and V > 5:
        x[3, 1] = x[3, 4] = x[3, V - 1] = x[3].max() + 1  # ties, also across blocks: the first wins
    return x.to(dtype).to(DEV)


def test_interpreter_is_on():
    """On CPU the interpreter runs the kernels; on a GPU it must be off, or nothing is compiled."""
    if DEV == "cpu":
        assert os.environ.get("TRITON_INTERPRET") == "1"
    else:
        assert os.environ.get("TRITON_INTERPRET") == "0" and torch.cuda.is_available()


@pytest.mark.parametrize("V,k,dtype", grid(SHAPES))
def test_max_prob(V, k, dtype):
    x = logits(k, V, dtype)
    p, idx, margin = T.max_prob(x)
    p_ref, idx_ref, margin_ref = R.max_prob_ref(x, margin=True)
    torch.testing.assert_close(p, p_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(margin, margin_ref, atol=1e-6, rtol=1e-5)
    assert torch.equal(idx, idx_ref)
    assert torch.equal(idx, x.float().argmax(-1))


@pytest.mark.parametrize("V,k,dtype", grid(SHAPES))
def test_rollback_distance(V, k, dtype):
    x = logits(k, V, dtype)
    tok = x.float().argsort(-1, descending=True)[:, min(2, V - 1)]  # (k,) mostly finite entries
    if k > 1:
        tok[1] = 0  # an entry at -inf: distance inf
    ce, idx, lse = T.rollback_distance(x, tok, return_lse=True)
    ce_ref, idx_ref = R.rollback_distance_ref(x, tok)
    torch.testing.assert_close(ce, ce_ref, atol=1e-4, rtol=1e-5)  # equal infinities pass
    torch.testing.assert_close(lse, torch.logsumexp(x.float(), -1), atol=1e-5, rtol=1e-6)
    assert torch.equal(idx, idx_ref)


@pytest.mark.parametrize("V,k,dtype", grid([(7, 16), (1000, 5), (250112, 2)]))
def test_sample_is_the_inverse_cdf(V, k, dtype):
    x = logits(k, V, dtype)
    u = torch.rand(k, generator=torch.Generator().manual_seed(V)).to(DEV)
    u[0] = 0.0
    tok = T.sample(x, u)
    p = torch.softmax(x.float(), -1)
    cdf = p.cumsum(-1)
    for r in range(k):
        t = int(tok[r])
        assert p[r, t] > 0  # never a -inf entry
        lo = float(cdf[r, t - 1]) if t else 0.0
        assert lo - 1e-5 <= float(u[r]) * float(cdf[r, -1]) <= float(cdf[r, t]) + 1e-5
    assert torch.equal(tok, R.sample_ref(x, u)) or V > 1000  # rounding may move a boundary draw


@pytest.mark.parametrize("V,k,dtype", grid([(7, 1), (7, 4), (1000, 10), (32128, 16), (250112, 4)]))
def test_speculative_accept_matches_reference(V, k, dtype):
    g = torch.Generator().manual_seed(V + k)
    xl = logits(k + 1, V, dtype, seed=1)
    xs = (xl[:k].float() + torch.randn(k, V, generator=g).to(DEV)).to(dtype)
    xs[:, 0] = float("-inf")  # a token the small model never proposes
    for trial in range(6 if V < 100_000 else 2):
        u = torch.rand(k + 1, generator=g).to(DEV)
        draft = R.sample_ref(xs, torch.rand(k, generator=g).to(DEV))
        if trial == 0:
            draft = xl[:k].float().argmax(-1)  # the large model's favourites: mostly accepted
        n, y = T.speculative_accept(xl, xs, draft, u)
        n_ref, y_ref = R.speculative_accept_ref(xl, xs, draft, u)
        assert int(n) == int(n_ref) and int(y) == int(y_ref)


def closed_form(p_l, p_s):
    """P(n accepted, next token) for k drafts sampled from p_s (k, V) scored by p_l (k+1, V)."""
    k, V = p_s.shape
    alpha = torch.minimum(p_l[:k], p_s).sum(-1)  # (k,) acceptance probability at each position
    out = torch.zeros(k + 1, V, dtype=torch.float64)
    reach = 1.0
    for i in range(k):
        resid = (p_l[i] - p_s[i]).clamp_min(0)
        out[i] = reach * (1 - alpha[i]) * resid / resid.sum()
        reach = reach * alpha[i]
    out[k] = reach * p_l[k]
    return out.flatten()  # ((k+1) * V,)


def chi2_pvalue(counts, probs):
    keep = probs > 0
    assert counts[~keep].sum() == 0  # impossible outcomes never happen
    expected = probs[keep] * counts.sum()
    stat = ((counts[keep] - expected) ** 2 / expected).sum()
    return float(torch.special.gammaincc(torch.tensor((keep.sum().item() - 1) / 2.0), stat / 2))


def test_speculative_accept_statistics():
    """Draft from p_S, accept or resample: (n, token) frequencies match the closed form, for the
    reference over 10,000 draws and for the kernel over 1,500 on a GPU, 400 in the interpreter
    (one launch; 14 ms a draw there), where each of its draws must also be the reference's."""
    k, V = 2, 5
    g = torch.Generator().manual_seed(7)
    xl = torch.randn(k + 1, V, generator=g, dtype=torch.float64) * 1.5
    xs = torch.randn(k, V, generator=g, dtype=torch.float64) * 1.5
    p_l, p_s = xl.softmax(-1), xs.softmax(-1)
    expected = closed_form(p_l, p_s)

    def draws(n):
        d = torch.stack([torch.multinomial(p_s[i], n, replacement=True, generator=g) for i in range(k)], 1)
        return d, torch.rand(n, k + 1, generator=g)

    counts = torch.zeros((k + 1) * V, dtype=torch.float64)
    d, u = draws(10_000)
    for b in range(len(d)):
        n, y = R.speculative_accept_ref(xl.float(), xs.float(), d[b], u[b])
        counts[int(n) * V + int(y)] += 1
    assert chi2_pvalue(counts, expected) > 0.001

    d, u = draws(1_500 if DEV != "cpu" else 400)
    n, y = (t.cpu() for t in T.speculative_accept(*(t.to(DEV) for t in (xl.float(), xs.float(), d, u))))
    if DEV == "cpu":  # the same draws as the reference's, one by one
        ref = [R.speculative_accept_ref(xl.float(), xs.float(), d[b], u[b]) for b in range(len(d))]
        assert n.tolist() == [int(r[0]) for r in ref] and y.tolist() == [int(r[1]) for r in ref]
    counts = torch.bincount(n * V + y, minlength=(k + 1) * V).double()
    assert chi2_pvalue(counts, expected) > 0.001
    # and the output token alone follows p_L at the first position whatever happens
    first = torch.where(n == 0, y, d[:, 0])
    assert chi2_pvalue(torch.bincount(first, minlength=V).double(), p_l[0]) > 0.001


def test_bad_shapes():
    with pytest.raises(ValueError, match="logits"):
        T.max_prob(torch.zeros(3))
    with pytest.raises(ValueError, match="tokens"):
        T.rollback_distance(torch.zeros(3, 8), torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match="k\\+1"):
        T.speculative_accept(
            torch.zeros(3, 8), torch.zeros(3, 8), torch.zeros(3, dtype=torch.long), torch.rand(4)
        )  # noqa: E501


# -- the non-uniform (SqueezeLLM) matrix-vector product: nibble codes, per-row tables, sparse part


def lut_case(out, n, bits, nnz, k, seed=0):
    g = torch.Generator().manual_seed(seed + out * 7 + n)
    codes = torch.randint(0, 2**bits, (out, n), generator=g, dtype=torch.uint8)
    table = torch.randn(out, 2**bits, generator=g).sort(dim=1).values
    x = torch.randn(k, n, generator=g)
    flat = torch.randperm(out * n, generator=g)[:nnz]
    idx = torch.stack([flat // n, flat % n])
    val = torch.randn(nnz, generator=g) * 5
    return x, codes, table, idx, val


@pytest.mark.parametrize("out,n,bits,nnz,k", [(1, 1, 4, 0, 1), (37, 50, 3, 0, 1), (64, 129, 4, 9, 3),
                                              (130, 77, 3, 20, 11), (200, 256, 4, 0, 2)])  # fmt: skip
def test_lut_matvec(out, n, bits, nnz, k):
    from bildlib.kernels import triton_lut as TL

    x, codes, table, idx, val = lut_case(out, n, bits, nnz, k)
    packed = R.pack_nibbles(codes)
    dense = torch.gather(table, 1, codes.long())  # (out, n): W without packing, the plain product's
    want = x @ dense.t()
    if nnz:
        want += x[:, idx[1]] @ torch.zeros(nnz, out).index_put_((torch.arange(nnz), idx[0]), val)
    ref = R.lut_matvec_ref(x, packed, table, n, idx if nnz else None, val if nnz else None)
    torch.testing.assert_close(ref, want, rtol=1e-5, atol=1e-4)
    y = TL.lut_matvec(x.to(DEV), packed.to(DEV), table.to(DEV), n, idx.to(DEV) if nnz else None,
                      val.to(DEV) if nnz else None)  # fmt: skip
    torch.testing.assert_close(y.cpu(), want, rtol=1e-5, atol=1e-4)


def test_lut_matvec_refuses_bad_layouts():
    from bildlib.kernels import triton_lut as TL

    x, codes, table, _, _ = lut_case(8, 10, 4, 0, 1)
    with pytest.raises(ValueError, match="packed must be uint8"):
        TL.lut_matvec(x, codes, table, 10)  # unpacked codes
    with pytest.raises(ValueError, match="x must be"):
        TL.lut_matvec(x[:, :9], R.pack_nibbles(codes), table, 10)
