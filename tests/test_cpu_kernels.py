"""bildlib.kernels.cpu, the native engines' C++ pieces (T5's norm, attention and cross-attention;
the decoder-only models' attention): each checked against a torch reference on
irregular shapes, row-invariant by construction (a call's rows are its one-row calls' bits, at
any cache position and thread count), clear errors, and the build cache a second process reuses."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys

import pytest
import torch

from bildlib.kernels import cpu

pytestmark = pytest.mark.timeout(600)  # the first test in a clean clone builds the library (~30 s)

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(scope="module")
def mod():
    m = cpu.load()
    assert m is not None, cpu.why()  # this project's CI has a compiler: a failed build is a failure
    return m


def tol(dtype):
    return {"atol": 2e-5, "rtol": 2e-5} if dtype == torch.float32 else {"atol": 0.05, "rtol": 0.02}


def norm_ref(x, w, eps_d):
    """lean_t5.LeanT5._norm's formulas in plain torch (float32: w given times sqrt(d))."""
    d = x.shape[-1]
    s = torch.rsqrt(x.float().pow(2).sum(-1, keepdim=True) + eps_d)
    if x.dtype == torch.float32:
        return x * s * w
    return (w.float() * (x.float() * s * math.sqrt(d)).to(x.dtype).float()).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k, d", [(1, 7), (3, 48), (5, 129), (16, 384)])
def test_norm_matches_torch_and_keeps_each_rows_bits(mod, dtype, k, d):
    g = torch.Generator().manual_seed(d)
    x = (torch.randn(k, d, generator=g) * 3).to(dtype)
    w = torch.randn(d, generator=g).to(dtype)
    y = mod.norm(x, w, d * 1e-6)
    torch.testing.assert_close(y.float(), norm_ref(x, w, d * 1e-6).float(), **tol(dtype))
    assert torch.equal(y, torch.cat([mod.norm(x[j : j + 1].clone(), w, d * 1e-6) for j in range(k)]))


def attend_ref(q, K, V, bias, pos):
    """Each row j over keys [0, pos + j]: softmax(q k^T + bias) v, in float32 (bf16: the score
    and the biased score rounded as HF's bf16 ops round them)."""
    H, k, dh = q.shape
    out = torch.empty(H, k, dh)
    for j in range(k):
        n = pos + j + 1
        s = torch.einsum("hd,hnd->hn", q[:, j].float(), K[:, :n].float())
        b = bias[:, pos + j, :n]
        s = (s.to(q.dtype) + b).float() if q.dtype == torch.bfloat16 else s + b
        out[:, j] = torch.einsum("hn,hnd->hd", torch.softmax(s, -1), V[:, :n].float())
    return out.to(q.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H, dh, pos, k", [(1, 5, 0, 1), (2, 24, 3, 7), (3, 17, 30, 16), (6, 64, 9, 10)])
def test_attend_writes_the_cache_and_matches_torch(mod, dtype, H, dh, pos, k):
    g = torch.Generator().manual_seed(pos + k)
    T = pos + k + 5
    cache = torch.zeros(2, H, T, dh, dtype=dtype)
    cache[:, :, :pos] = torch.randn(2, H, pos, dh, generator=g).to(dtype)
    qkv = torch.randn(k, 3 * H * dh, generator=g).to(dtype)
    bias = torch.randn(H, T + 3, T + 3, generator=g).to(dtype)
    before = cache.clone()
    out = mod.attend(qkv, cache, bias, H, pos)
    q, kk, v = qkv.view(k, 3, H, dh).permute(1, 2, 0, 3)  # (H, k, dh) each
    assert torch.equal(cache[0, :, pos : pos + k], kk) and torch.equal(cache[1, :, pos : pos + k], v)
    assert torch.equal(cache[:, :, :pos], before[:, :, :pos])
    assert torch.equal(cache[:, :, pos + k :], before[:, :, pos + k :])
    ref = attend_ref(q, cache[0], cache[1], bias, pos).transpose(0, 1).reshape(k, H * dh)
    torch.testing.assert_close(out.float(), ref.float(), **tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("H, Hkv, dh, pos, k",
                         [(1, 1, 5, 0, 1), (4, 2, 24, 3, 7), (6, 1, 17, 30, 16), (4, 4, 64, 0, 40)])
def test_attend_cached_matches_torch_with_grouped_query_heads(mod, dtype, H, Hkv, dh, pos, k):
    """The decoder-only models' attention: keys already in the cache, no bias (each row sees
    keys [0, pos + j]), query head h reading key head h // (H / Hkv) as repeat_interleave gives;
    40 rows at once, as a prompt's prefill runs."""
    g = torch.Generator().manual_seed(H * k + pos)
    T = pos + k + 3
    cache = torch.randn(2, Hkv, T, dh, generator=g).to(dtype)
    q = torch.randn(k, H * dh, generator=g).to(dtype)
    out = mod.attend_cached(q, cache, H, pos)
    K, V = (t.repeat_interleave(H // Hkv, 0) for t in cache)  # (H, T, dh)
    zero = torch.zeros(H, T, T, dtype=dtype)
    ref = attend_ref(q.view(k, H, dh).transpose(0, 1), K, V, zero, pos).transpose(0, 1).reshape(k, H * dh)
    torch.testing.assert_close(out.float(), ref.float(), **tol(dtype))
    alone = torch.cat([mod.attend_cached(q[j : j + 1].clone(), cache, H, pos + j) for j in range(k)])
    assert torch.equal(out, alone)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_calls_rows_are_its_one_row_calls_bits(mod, dtype, threads):
    """Row invariance by construction, checked with rows whose sums show their order (large
    values cancelling, as rowinv.sharp's do): attention and cross-attention over k rows at once
    equal the rows fed one at a time (vanilla's steps), for k up to 16 after 0, 7 and 30 keys."""
    H, dh, d, P = 3, 40, 72, 7
    g = torch.Generator().manual_seed(5)
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for pos in (0, 7, 30):
            for k in (2, 5, 16):
                T = pos + k
                base = torch.randn(2, H, T, dh, generator=g) * 64
                qkv = torch.randn(k, 3 * H * dh, generator=g) * 16
                bias = torch.randn(H, T, T, generator=g).to(dtype)
                one_cache, all_cache = base.to(dtype), base.to(dtype)
                qkv = qkv.to(dtype)
                rows = mod.attend(qkv, all_cache, bias, H, pos)
                alone = torch.cat([mod.attend(qkv[j : j + 1].clone(), one_cache, bias, H, pos + j)
                                   for j in range(k)])  # fmt: skip
                assert torch.equal(rows, alone), (pos, k)
                assert torch.equal(all_cache, one_cache)
                x = (torch.randn(k, d, generator=g) * 8).to(dtype)
                A, B = torch.randn(d, H * P, generator=g), torch.randn(H * P, d, generator=g) * 100
                A, B = mod.pack(A.t()), mod.pack(B.t())  # as NativeT5.begin hands them over
                rows = mod.cross(x, A, B, None, H, 1e-3)
                assert torch.equal(rows, torch.cat([mod.cross(x[j : j + 1].clone(), A, B, None, H, 1e-3)
                                                    for j in range(k)]))  # fmt: skip
    finally:
        torch.set_num_threads(old)


def cross_ref(x, A, B, mask, H, eps_d):
    xf = x.float()
    h = xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps_d)
    s = h @ A + (mask if mask is not None else 0)
    p = torch.softmax(s.view(x.shape[0], H, -1), -1).view(x.shape[0], -1)
    return (p @ B + xf).to(x.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k, d, H, P, padded",
                         [(1, 48, 2, 4, False), (4, 37, 3, 5, True), (16, 384, 6, 16, True)])
def test_cross_matches_torch_with_and_without_a_mask(mod, dtype, k, d, H, P, padded):
    g = torch.Generator().manual_seed(d + P)
    x = (torch.randn(k, d, generator=g) * 2).to(dtype)
    A, B = torch.randn(d, H * P, generator=g), torch.randn(H * P, d, generator=g)
    mask = None
    if padded:  # the last key of each head hidden, as LeanT5.begin pads a source to P
        mask = torch.zeros(H, P)
        mask[:, -1] = -torch.inf
        mask = mask.view(1, H * P)
    y = mod.cross(x, mod.pack(A.t()), mod.pack(B.t()), mask, H, d * 1e-6)
    torch.testing.assert_close(y.float(), cross_ref(x, A, B, mask, H, d * 1e-6).float(), **tol(dtype))
    if padded:  # a hidden key's value never reaches the output
        B2 = B.clone()
        B2.view(H, P, d)[:, -1] = 1e6
        assert torch.equal(mod.cross(x, mod.pack(A.t()), mod.pack(B2.t()), mask, H, d * 1e-6), y)


def test_bad_input_is_named(mod):
    x = torch.randn(2, 8)
    with pytest.raises(RuntimeError, match="w: "):
        mod.norm(x, torch.randn(7), 1e-6)
    with pytest.raises(RuntimeError, match="x: contiguous"):
        mod.norm(torch.randn(8, 2).t(), torch.randn(8), 1e-6)
    with pytest.raises(RuntimeError, match="float32 or bfloat16"):
        mod.norm(x.half(), torch.randn(8).half(), 1e-6)
    with pytest.raises(RuntimeError, match="exceeds the cache"):
        mod.attend(torch.randn(3, 12), torch.zeros(2, 1, 4, 4), torch.zeros(1, 8, 8), 1, 2)
    with pytest.raises(RuntimeError, match="disagree"):
        mod.attend(torch.randn(3, 13), torch.zeros(2, 1, 8, 4), torch.zeros(1, 8, 8), 1, 0)
    with pytest.raises(RuntimeError, match="Hkv dividing H"):
        mod.attend_cached(torch.randn(2, 12), torch.zeros(2, 2, 8, 4), 3, 0)
    with pytest.raises(RuntimeError, match="A, B: float32"):
        mod.cross(x, torch.randn(1, 8, 32).double(), torch.randn(1, 4, 32), None, 2, 1e-6)
    with pytest.raises(RuntimeError, match="A and B packed"):
        mod.cross(x, torch.randn(1, 8, 32), torch.randn(1, 5, 32), None, 2, 1e-6)


def _emulated() -> list[str]:
    """The emulator this process runs under (make test-cpus names its CPU model in BILD_EMULATED),
    so that a child Python runs on the same emulated CPU and loads the same build: a child started
    as sys.executable alone would run on the host."""
    cpu_model = os.environ.get("BILD_EMULATED")
    return [shutil.which("qemu-x86_64") or "qemu-x86_64", "-cpu", cpu_model] if cpu_model else []


def _python(code: str, env: dict, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*_emulated(), sys.executable, "-c", code], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=600, **kw)  # fmt: skip


def test_a_second_process_imports_the_build_without_a_compiler(mod, tmp_path):
    """The build is cached under build/torch_extensions/, named by the source's hash and the
    instruction set: a second process loads it with no compiler on PATH."""
    so = list((cpu.build_dir() / cpu.name()).glob("*.so"))
    assert len(so) == 1
    stamp = so[0].stat().st_mtime_ns
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "python").symlink_to(sys.executable)
    code = "from bildlib.kernels import cpu; m = cpu.load(); print(m is not None, cpu.why())"
    r = _python(code, {"PATH": str(bare), "CXX": "/nonexistent/c++"})
    assert r.stdout.split()[:1] == ["True"], r.stdout + r.stderr
    assert so[0].stat().st_mtime_ns == stamp  # nothing rebuilt


def test_a_build_that_does_not_load_is_built_again(mod, tmp_path, monkeypatch):
    """A library in the build folder that does not load (another machine's, a broken file) is
    built anew, not an error: here a file of junk under the expected name."""
    src = cpu.build_dir() / cpu.name()
    monkeypatch.setenv("BILD_BUILD_DIR", str(tmp_path))
    d = cpu.build_dir() / cpu.name()
    shutil.copytree(src, d)  # the build files, so that ninja finds nothing to do but relink
    (d / f"{cpu.name()}.so").write_bytes(b"not a library")
    monkeypatch.setattr(cpu, "_state", {})
    m = cpu.load()
    assert m is not None, cpu.why()
    x = torch.randn(2, 8)
    assert torch.equal(m.norm(x, torch.ones(8), 1e-6), mod.norm(x, torch.ones(8), 1e-6))


def test_without_a_compiler_auto_runs_lean_and_native_says_why(tmp_path):
    """Nothing built and no compiler: load() gives None and why() names the build folder; engine
    "auto" then runs the lean engine's Python ops, and engine "native" is refused with the reason."""
    code = """
import sys
sys.path.insert(0, "tests")
from bildlib.kernels import cpu
from bildlib.models import LM
from conftest import tiny_model, tiny_tokenizer
m = tiny_model("t5", seed=1, d=48)
print("ENGINE", LM(m, tiny_tokenizer(), "t", "auto").engine)
print("WHY", cpu.why())
try:
    LM(m, tiny_tokenizer(), "t", "native")
except RuntimeError as e:
    print("REFUSED", e)
"""
    r = _python(code, {"BILD_BUILD_DIR": str(tmp_path), "CXX": "/nonexistent/c++", "PATH": "/nonexistent"},
                cwd=cpu.SOURCE.parents[1])
    out = r.stdout
    assert "ENGINE lean" in out, out + r.stderr
    assert "WHY the C++ decoder pieces could not be built in " + str(tmp_path) in out, out
    assert "REFUSED t: engine='native': the C++ decoder pieces could not be built" in out, out


def test_an_emulated_run_says_so_in_its_isa(monkeypatch):
    """make test-cpus sets BILD_EMULATED: the ISA a checks file or exactness row records names the
    emulated model, also on a host whose flags are the emulated CPU's (an AVX2 host under -cpu Haswell)."""
    from bildlib.models import cpuinfo

    monkeypatch.delenv("BILD_EMULATED", raising=False)
    assert "emulated" not in cpuinfo.isa() or "the host has AVX512" in cpuinfo.isa()
    monkeypatch.setenv("BILD_EMULATED", "Haswell")
    assert "emulated Haswell" in cpuinfo.isa()
