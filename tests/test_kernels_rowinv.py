"""The row-invariant step kernels (kernels/triton_rowinv.py, triton_attention.py) against their
torch references, and for row invariance: a row's bits alone equal its bits among 1..16 rows at
any place. On CPU under TRITON_INTERPRET=1; on a GPU with BILD_KERNEL_TEST_DEVICE=cuda
TRITON_INTERPRET=0 (make gpu-check)."""

import os

import pytest
import torch

pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[cuda]'); kernels untested")

from bildlib.kernels import reference as R  # noqa: E402
from bildlib.kernels import triton_attention as A  # noqa: E402
from bildlib.kernels import triton_rowinv as T  # noqa: E402

DEV = os.environ.get("BILD_KERNEL_TEST_DEVICE", "cpu")
DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: dict(atol=1e-4, rtol=1e-4), torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}


def interpreter_cannot_show(tiles, dtype) -> None:
    """Skips the test where Triton's interpreter cannot show a kernel's row invariance on this CPU:
    it computes tl.dot with numpy's float32 matmul, and where that gives a row of an (m, k) x (k, n)
    tile other bits alone (the other rows zero, as in a one-row launch) than among m rows, or
    among the first rows only, a kernel's bits there are numpy's, not the kernel's. Measured here
    for each tile shape (m, k, n) the kernel multiplies, values and results rounded to dtype (on
    this project's AMD EPYCs, OpenBLAS's kernel sums rows 6 to 15 of a tile otherwise than row 0,
    by a float32 rounding step that bf16 rounding hides); the compiled
    PTX tests (tests/test_kernels_compile.py) and a GPU run (make gpu-check) still check it."""
    if DEV != "cpu":
        return
    import numpy as np

    from bildlib.models.rowinv import cpu_name

    g = torch.Generator().manual_seed(11)
    same = lambda p, q: torch.equal(torch.from_numpy(p).to(dtype), torch.from_numpy(q).to(dtype))  # noqa: E731
    for m, k, n in tiles:
        a = torch.randn(m, k, generator=g).to(dtype).float().numpy()
        b = torch.randn(k, n, generator=g).to(dtype).float().numpy()
        full = a @ b
        for j in range(m):
            alone, first = np.zeros_like(a), np.zeros_like(a)
            alone[0], first[: j + 1] = a[j], a[: j + 1]
            if not (same((alone @ b)[0], full[j]) and same((first @ b)[: j + 1], full[: j + 1])):
                pytest.skip(f"numpy's float32 matmul on this CPU ({cpu_name()}) gives row {j} of a "
                            f"({m}, {k}) x ({k}, {n}) tile other {str(dtype)[6:]} bits alone than among "
                            f"{m} rows: Triton's interpreter computes tl.dot with it, so it cannot show "
                            "this kernel's row invariance here")  # fmt: skip


def rand(*shape, dtype=torch.float32, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return (torch.randn(*shape, generator=g) * scale).to(dtype).to(DEV)


# (M, N, K): irregular widths; N 40 with K 600 cuts K into slices (the second kernel's path)
MM_SHAPES = [(1, 7, 13), (5, 100, 200), (16, 33, 64), (3, 40, 600), (17, 70, 130)]


# every shape without an epilogue, every epilogue on two shapes (one of them cut into slices)
MM_CASES = [(*s, "none") for s in MM_SHAPES] + [(*s, e) for s in MM_SHAPES[1::2] for e in T.EPILOGUES[1:]]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("M,N,K,epi", MM_CASES)
def test_mm_matches_reference(M, N, K, epi, dtype):
    x, w = rand(M, K, dtype=dtype), rand(N, K, dtype=dtype, seed=1, scale=K**-0.5)
    other = rand(M, N, dtype=dtype, seed=2) if epi in ("add", "mul") else None
    torch.testing.assert_close(T.mm(x, w, epi, other), R.mm_ref(x, w, epi, other), **TOL[dtype])


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("M,N,K,epi", [(16, 33, 64, "none"), (5, 100, 200, "gelu_tanh"), (3, 40, 600, "add")])
def test_mm_with_the_norm_fused_matches_reference_and_the_norm_then_the_product(M, N, K, epi, dtype):
    """T5's RMS norm in the product's prologue (and a scale, as a tied head's), unsplit and split."""
    x, w = rand(M, K, dtype=dtype, scale=3.0), rand(N, K, dtype=dtype, seed=1, scale=K**-0.5)
    g, other = rand(K, dtype=dtype, seed=6), rand(M, N, dtype=dtype, seed=2) if epi == "add" else None
    got = T.mm(x, w, epi, other, norm=g, eps=1e-6, scale=0.5)
    torch.testing.assert_close(got, R.mm_ref(x, w, epi, other, g, 1e-6, 0.5), **TOL[dtype])
    two = R.mm_ref(R.rms_norm_ref(x, g, 1e-6), w * 0.5, epi, other)  # what it replaces: two launches
    torch.testing.assert_close(got, two, **TOL[dtype])


def test_mm_split_path_is_taken_and_leaves_its_locks_at_zero():
    """The (40, 600) weight has 2 column tiles: its inner dimension is cut into slices, added by the
    last slice of each tile to finish, which resets the tile's lock for the next launch."""
    bn, bk = T._tiles(40, 600)
    assert T._split(40, 600, bn, bk) > 1 and T._split(8000, 128, *T._tiles(8000, 128)) == 1
    x, w = rand(3, 600), rand(40, 600, seed=1, scale=600**-0.5)
    first = T.mm(x, w, norm=rand(600, seed=6))
    assert not T._LOCKS[x.device].any()
    assert torch.equal(T.mm(x, w, norm=rand(600, seed=6)), first)


def test_outgrown_locks_stay_allocated(monkeypatch):
    """A graph captured with the lock buffer replays with its address: a larger product gets a new
    buffer, and the old one is kept, not freed for reuse."""
    monkeypatch.setattr(T, "_LOCKS", {})
    monkeypatch.setattr(T, "_OUTGROWN", [])
    first = T._locks(torch.device(DEV), 10)
    assert T._locks(torch.device(DEV), 4096) is first and not T._OUTGROWN
    bigger = T._locks(torch.device(DEV), 5000)
    assert bigger.numel() == 5000 and not bigger.any() and T._OUTGROWN == [first]


# (N, K, dtype): the column tiles without slices (700, 48), with them (40, 600); under the
# interpreter each in one dtype (a minute otherwise), on a GPU in both
INV = [(100, 200, torch.float32), (40, 600, torch.bfloat16), (700, 48, torch.bfloat16)]
if DEV != "cpu":
    INV += [(n, k, d) for n, k, _ in INV for d in DTYPES if (n, k, d) not in INV]


@pytest.mark.parametrize("N,K,dtype", INV, ids=lambda v: str(v).removeprefix("torch."))
def test_mm_is_row_invariant(N, K, dtype):
    """Each row of a 16-row call alone, and prefixes of 1..16 rows, have the same bits (the norm
    fused in where N != 100: its row statistics too)."""
    interpreter_cannot_show([(T.ROWS, T._tiles(N, K)[1], T._tiles(N, K)[0])], dtype)
    x, w = rand(16, K, dtype=dtype, seed=3), rand(N, K, dtype=dtype, seed=4, scale=K**-0.5)
    r, g = rand(16, N, dtype=dtype, seed=5), (rand(K, dtype=dtype, seed=6) if N != 100 else None)
    full = T.mm(x, w, "add", r, norm=g)
    for j in range(16) if N == 100 or DEV != "cpu" else (0, 6, 15):
        assert torch.equal(T.mm(x[j : j + 1], w, "add", r[j : j + 1], norm=g)[0], full[j]), f"row {j} alone"
    for M in (2, 7, 10, 15):
        assert torch.equal(T.mm(x[:M], w, "add", r[:M], norm=g), full[:M]), f"first {M} rows"


def test_mm_refuses_bad_input():
    x, w = rand(2, 8), rand(4, 9)
    with pytest.raises(ValueError, match="share K"):
        T.mm(x, w)
    with pytest.raises(ValueError, match="epilogue"):
        T.mm(x, rand(4, 8), "tanh")
    with pytest.raises(ValueError, match="needs `other`"):
        T.mm(x, rand(4, 8), "add")
    with pytest.raises(ValueError, match=r"norm must be \(K,\) = \(8,\)"):
        T.mm(x, rand(4, 8), norm=rand(9))


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("M,K", [(1, 7), (9, 384), (16, 1500)])
def test_rms_norm(M, K, dtype):
    x, w = rand(M, K, dtype=dtype, scale=3.0), rand(K, dtype=dtype, seed=1)
    y = T.rms_norm(x, w, 1e-6)
    torch.testing.assert_close(y, R.rms_norm_ref(x, w, 1e-6), **TOL[dtype])
    assert torch.equal(T.rms_norm(x[-1:], w, 1e-6)[0], y[-1])


def _attn_inputs(H, T_, dh, dtype, M):
    q, k, v = (rand(*s, dtype=dtype, seed=i) for i, s in enumerate([(H, M, dh), (H, T_, dh), (H, T_, dh)]))
    bias = rand(H, T_, T_, seed=7, scale=2.0)  # float32, as T5's relative-position table
    return q, k, v, bias


def _attn_tiles(dh: int) -> list[tuple[int, int, int]]:
    """The tiles triton_attention multiplies: scores q k^T (16, D) x (D, 64), output p v
    (16, 64) x (64, D)."""
    D = max(16, 1 << (dh - 1).bit_length())
    return [(A.ROWS, D, 64), (A.ROWS, 64, D)]


def _pos(p):
    return torch.tensor([p], dtype=torch.long, device=DEV)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("H,T_,dh,M,p", [(2, 20, 8, 1, 0), (3, 150, 24, 16, 70), (1, 130, 64, 5, 125)])
def test_causal_attention(H, T_, dh, M, p, dtype):
    """Causal with a bias, keys past 64 (two blocks and more), M rows at p..p+M-1."""
    interpreter_cannot_show(_attn_tiles(dh), dtype)
    q, k, v, bias = _attn_inputs(H, T_, dh, dtype, M)
    got = A.attention(q, k, v, _pos(p), bias=bias)
    torch.testing.assert_close(got, R.attention_ref(q, k, v, _pos(p), bias=bias), **TOL[dtype])
    for j in range(M):  # row j alone at its own position: the same bits
        assert torch.equal(A.attention(q[:, j : j + 1], k, v, _pos(p + j), bias=bias)[:, 0], got[:, j]), j


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("n", [1, 37, 129])
def test_cross_attention(n, dtype):
    """Over the first n keys of a source padded to 160; the padding must not count."""
    H, dh, M = 2, 16, 16
    interpreter_cannot_show(_attn_tiles(dh), dtype)
    q, k, v, _ = _attn_inputs(H, 160, dh, dtype, M)
    nk = torch.tensor([n], device=DEV)
    got = A.attention(q, k, v, _pos(3), n_keys=nk)
    torch.testing.assert_close(got, R.attention_ref(q, k, v, _pos(3), n_keys=nk), **TOL[dtype])
    torch.testing.assert_close(got, R.attention_ref(q, k[:, :n], v[:, :n], _pos(3), n_keys=nk), **TOL[dtype])
    for j in (0, 9, 15):
        assert torch.equal(A.attention(q[:, j : j + 1], k, v, _pos(3 + j), n_keys=nk)[:, 0], got[:, j])


def test_attention_refuses_a_bias_it_would_misread():
    """T5's compute_bias returns a permuted view; the kernel reads keys at unit stride."""
    q, k, v, bias = _attn_inputs(2, 20, 8, torch.float32, 3)
    with pytest.raises(ValueError, match="unit stride"):
        A.attention(q, k, v, _pos(0), bias=bias.transpose(1, 2))
