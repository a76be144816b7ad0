"""The native engine's int8 products (kernels/cpu_gemm8.h, models.linear.NativeInt8): the codes, the
scales and every output equal to an exact reference (the integer sums in int64, the float steps in
numpy float32, one rounding each) on irregular shapes; within int8's error of the float product; a
call's rows the bits of its one-row calls at 1 and 2 threads; clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bildlib.models import rowinv
from conftest import rows_are_alone

pytestmark = pytest.mark.timeout(600)  # the first test in a clean clone builds the library


def quantize(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row of a (float32) as cpu_gemm8.h quantizes it: codes round-half-even of a * (127 /
    max |a|) in [-127, 127] (one float32 division, one product), scale max |a| / 127."""
    amax = np.abs(a).max(1).astype(np.float32)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), 0).astype(np.float32)
    codes = np.clip(np.rint(a * inv[:, None]), -127, 127).astype(np.int64)
    return codes, (amax / np.float32(127)).astype(np.float32)


def reference(x, w, res=None, relu=False) -> torch.Tensor:
    """y = float32(acc) * (sx * s) (+ res) (relu), acc the exact integer sum."""
    a, sx = quantize(x.numpy())
    q, s = quantize(w.numpy())
    acc = (a @ q.T).astype(np.float32)  # exact in int64; below 2^24 here, so exact in float32 too
    y = acc * (sx[:, None] * s[None, :]).astype(np.float32)
    if res is not None:
        y = (y + res.numpy()).astype(np.float32)
    if relu:
        y = np.where(y > 0, y, np.float32(0))
    return torch.from_numpy(y.astype(np.float32))


SHAPES = [(1, 1), (5, 3), (31, 17), (32, 64), (33, 7), (70, 129), (384, 384), (1000, 40), (9, 1024)]


@pytest.mark.parametrize("m, n", SHAPES)
def test_codes_and_outputs_equal_the_exact_reference(mod, m, n):
    g = torch.Generator().manual_seed(m * 1000 + n)
    w = torch.randn(m, n, generator=g)
    p, s = mod.pack8(w)
    nb = -(-m // 8)
    assert p.shape == (nb, -(-n // 2), 8, 2) and p.dtype == torch.int8 and s.shape == (nb * 8,)
    q, sw = quantize(w.numpy())
    codes = p.permute(0, 2, 1, 3).reshape(nb * 8, -1)[:m, :n]  # (out, in) back from the blocks
    assert torch.equal(codes.long(), torch.from_numpy(q)) and torch.equal(s[:m], torch.from_numpy(sw))
    assert not s[m:].any() and int(codes.abs().max()) <= 127
    for k in (1, 2, 3, 4, 5, 7, 11, 12, 13, 26):
        x, res = torch.randn(k, n, generator=g), torch.randn(k, m, generator=g)
        assert torch.equal(mod.linear8(x, p, s, m, None, False), reference(x, w))
        assert torch.equal(mod.linear8(x, p, s, m, None, True), reference(x, w, relu=True))
        assert torch.equal(mod.linear8(x, p, s, m, res, False), reference(x, w, res))
        one = res[:1]  # a (1, m) residual added to every row
        assert torch.equal(mod.linear8(x, p, s, m, one, False), reference(x, w, one.expand(k, m)))


def test_close_to_the_float_product(mod):
    g = torch.Generator().manual_seed(0)
    w, x = torch.randn(384, 1024, generator=g), torch.randn(7, 1024, generator=g)
    p, s = mod.pack8(w)
    y, ref = mod.linear8(x, p, s, 384, None, False), x @ w.t()
    assert (y - ref).abs().max() <= 0.02 * ref.abs().max()  # int8 on both sides: about 1 % here


def test_ties_round_to_even_and_zero_rows(mod):
    w = torch.tensor([[127.0, 0.5, 1.5, -2.5, 0.0], [0.0] * 5, [-1.0, 0.25, 0.0, 0.0, 0.0]])
    p, s = mod.pack8(w)
    codes = p.permute(0, 2, 1, 3).reshape(8, -1)[:3, :5]
    # ties to even (0.5 -> 0, 1.5 -> 2, -2.5 -> -2), 0.25 * 127 = 31.75 -> 32
    assert codes.tolist() == [[127, 0, 2, -2, 0], [0] * 5, [-127, 32, 0, 0, 0]]
    x = torch.tensor([[0.0] * 5, [1.0, 1.0, 1.0, 1.0, 1.0]])
    y = mod.linear8(x, p, s, 3, None, False)
    assert torch.equal(y[0], torch.zeros(3)) and y[1, 1] == 0  # a zero row, a zero channel: exact zeros


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, n", [(33, 7), (70, 129), (384, 384), (1152, 384), (300, 1024)])
def test_rows_are_their_one_row_calls(mod, m, n, threads):
    w = torch.randn(m, n, generator=torch.Generator().manual_seed(n))
    p, s = mod.pack8(w)
    x = rowinv.sharp(w, rows=13)  # rows of very different scales: each its own
    res = torch.randn(13, m, generator=torch.Generator().manual_seed(1))
    rows_are_alone(lambda xs, r, relu: mod.linear8(xs, p, s, m, r, relu), x, res, threads)


def test_clear_errors(mod):
    w = torch.randn(10, 6)
    p, s = mod.pack8(w)
    with pytest.raises(RuntimeError, match="linear8: x"):
        mod.linear8(torch.randn(2, 6, dtype=torch.float64), p, s, 10, None, False)
    with pytest.raises(RuntimeError, match="linear8: W packed"):
        mod.linear8(torch.randn(2, 8), p, s, 10, None, False)
    with pytest.raises(RuntimeError, match="linear8: scales"):
        mod.linear8(torch.randn(2, 6), p, s, 17, None, False)
    with pytest.raises(RuntimeError, match="linear8: res"):
        mod.linear8(torch.randn(2, 6), p, s, 10, torch.randn(3, 10), False)
    with pytest.raises(RuntimeError, match="non-finite value in output 4"):
        mod.pack8(torch.where(torch.arange(60).view(10, 6) == 25, torch.inf, w))
