"""models.linear's row-invariant batched one-row products (`rows_mm`): a weight's Float32 product,
and the lean engine's folded cross-attention."""

from __future__ import annotations

import torch

from bildlib.models import rowinv


def rows_mm(x: torch.Tensor, t: torch.Tensor, res: torch.Tensor | None = None) -> torch.Tensor:
    """x (k, n) @ t (n, m) (+ res (k, m), or (1, m) for every row), each row's result the same
    bits whatever k is and wherever the row sits in x: torch.mm is not (MKL multiplies one row
    (gemv) and several (gemm) in different summation orders), so a token's logits would depend on
    how many tokens its call carried, and lossless BiLD would drift from vanilla greedy (bf16
    rounding magnifies the last-bit differences). The path is probed once per process and shape
    (rowinv): k one-row products in one batched call, padded to a few rows where this machine's
    kernel treats one row apart, or one call per row. Where m is not a multiple of 4, output rows
    start off 16-byte boundaries and some rows' bits changed on this project's CPUs, so the engine
    pads its folded cross-attention to such widths."""
    per_row = res is not None and (res.shape[0] != 1 or x.shape[0] == 1)
    key = (x.shape[1], t.shape[1], per_row, x.device.type, rowinv.FIRST_ONLY, torch.get_num_threads())
    f = _ROWS.get(key)
    if f is None:
        f = _ROWS[key] = _rows_path(key, t, res)
    return f(x, t, res)


def _rows_bmm(x: torch.Tensor, t: torch.Tensor, res: torch.Tensor | None = None) -> torch.Tensor:
    """x (k, n) @ t (n, m) (+ res) as a batch of k one-row products."""
    k = x.shape[0]
    if res is None:
        return torch.bmm(x.unsqueeze(1), t.expand(k, -1, -1)).squeeze(1)
    return torch.baddbmm(res.unsqueeze(1), x.unsqueeze(1), t.expand(k, -1, -1)).squeeze(1)


_ROWS: dict[tuple, object] = {}  # (n, m, per-row res, device, rowinv.FIRST_ONLY, threads) -> its path
ROWS_PATH: dict[tuple, str] = {}  # the same keys -> the path's name (rowinv.paths; models.native.plan)


def _rows_path(key: tuple, t: torch.Tensor, res: torch.Tensor | None):
    """The first row-invariant path of rows_mm at this key. It serves every matrix of the shape
    (weights of either dtype, a source's folded keys), so it is probed on two stand-ins, one with
    float32 values and one with bf16 values, with rows that show a summation order (rowinv.sharp)."""
    n, m, per_row = key[0], key[1], key[2]
    g = torch.Generator().manual_seed(3)
    t32 = torch.randn(n, m, generator=g).to(t.device)
    cases = []  # (product over probe rows, probe rows)
    for u in (t32, t32.bfloat16().float()):
        x = rowinv.sharp(u.t())
        if res is None:
            cases.append((lambda f, u=u: lambda z: f(z, u, None), x))
        elif per_row:
            xr = torch.cat([x, torch.randn(x.shape[0], m, generator=g)], 1)
            cases.append((lambda f, u=u: lambda z: f(z[:, :n], u, z[:, n:]), xr))
        else:
            one = res[:1].clone().float()
            cases.append((lambda f, u=u, one=one: lambda z: f(z, u, one), x))

    def check(f) -> bool:
        return not any(rowinv.probe(over(f), x.shape[1], t.dtype, t.device, x0=x) for over, x in cases)

    name, f = rowinv.choose("rows_mm", key[:3], rowinv.paths(_rows_bmm, 0, (0, 2)), check, key[3])
    ROWS_PATH[key] = name
    return f
