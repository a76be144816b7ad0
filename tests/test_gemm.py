"""The native engine's float32 products (kernels/cpu_gemm.h, models.linear.Native): x W^T, its relu
and its residual add against a float64 reference on irregular shapes; a call's rows the bits of
its one-row calls at 1 and 2 threads, on rows that expose a summation order (rowinv.sharp);
packing from any strides; clear errors; and the engine choosing them for float32 weights."""

from __future__ import annotations

import pytest
import torch

from bildlib.models import linear, rowinv
from conftest import rows_are_alone

pytestmark = pytest.mark.timeout(600)  # the first test in a clean clone builds the library


SHAPES = [(1, 1), (5, 3), (31, 17), (32, 64), (33, 7), (70, 129), (384, 384), (1000, 40)]


@pytest.mark.parametrize("m, n", SHAPES)
def test_product_relu_and_add_match_float64(mod, m, n):
    g = torch.Generator().manual_seed(m * 1000 + n)
    w = torch.randn(m, n, generator=g)
    p = mod.pack(w)
    assert p.shape == (-(-m // 8), n, 8)
    for k in (1, 2, 3, 4, 5, 7, 11, 12, 13, 26):
        x, res = torch.randn(k, n, generator=g), torch.randn(k, m, generator=g)
        ref = x.double() @ w.double().t()
        tol = {"atol": 1e-5 * n**0.5, "rtol": 1e-5}
        torch.testing.assert_close(mod.linear(x, p, m, None, False).double(), ref, **tol)
        torch.testing.assert_close(mod.linear(x, p, m, None, True).double(), ref.relu(), **tol)
        torch.testing.assert_close(mod.linear(x, p, m, res, False).double(), ref + res.double(), **tol)
        one = res[:1]  # a (1, m) residual added to every row
        torch.testing.assert_close(mod.linear(x, p, m, one, False).double(), ref + one.double(), **tol)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, n", [(33, 7), (70, 129), (384, 384), (1152, 384), (300, 1024)])
def test_rows_are_their_one_row_calls(mod, m, n, threads):
    w = torch.randn(m, n, generator=torch.Generator().manual_seed(n))
    p = mod.pack(w)
    x = rowinv.sharp(w, rows=13)  # large cancelling entries: another summation order shows
    res = torch.randn(13, m, generator=torch.Generator().manual_seed(1))
    rows_are_alone(lambda xs, r, relu: mod.linear(xs, p, m, r, relu), x, res, threads)


def test_pack_from_any_strides(mod):
    a = torch.randn(45, 70, generator=torch.Generator().manual_seed(2))
    assert torch.equal(mod.pack(a.t()), mod.pack(a.t().contiguous()))
    assert torch.equal(mod.pack(a[:, ::2]), mod.pack(a[:, ::2].contiguous()))
    assert torch.equal(mod.pack(a.double()), mod.pack(a))
    p = mod.pack(a)
    assert torch.equal(p[-1, :, 45 % 8 :], torch.zeros(70, 8 - 45 % 8))  # no output past m


def test_bad_input_is_named(mod):
    p = mod.pack(torch.randn(40, 8))
    with pytest.raises(RuntimeError, match="x \\(k, in\\) float32"):
        mod.linear(torch.randn(2, 8).double(), p, 40, None, False)
    with pytest.raises(RuntimeError, match="W packed"):
        mod.linear(torch.randn(2, 9), p, 40, None, False)
    with pytest.raises(RuntimeError, match="W packed"):
        mod.linear(torch.randn(2, 8), p, 80, None, False)
    with pytest.raises(RuntimeError, match="res \\(k, m\\)"):
        mod.linear(torch.randn(2, 8), p, 40, torch.randn(3, 40), False)
    with pytest.raises(RuntimeError, match="pack: W"):
        mod.pack(torch.randn(3))


def test_the_native_engine_chooses_them_for_float32_weights(mod):
    w = torch.randn(48, 64)
    assert type(linear.linear(w, native=True)) is linear.Native
    assert type(linear.linear(w)) is not linear.Native  # the lean engine keeps its own products
    assert type(linear.linear(w.bfloat16(), native=True)) is not linear.Native  # float32 weights only
    x = torch.randn(3, 64)
    torch.testing.assert_close(linear.linear(w, native=True)(x), x @ w.t(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(linear.once(w, native=True).add(x, x[:, :48]), x[:, :48] + x @ w.t(),
                               atol=1e-5, rtol=1e-5)  # fmt: skip
