"""The static engine's Triton kernels compiled ahead of time for NVIDIA GPUs, on a machine without
one: Triton's own compiler and the ptxas it ships, to cubin for Hopper (sm_90: the H100 and H200
that make gpu-check targets). The interpreter runs the kernels' logic on the CPU
(test_kernels_rowinv); this checks what only a GPU build sees: that every variant the engine
launches lowers, and that a split product's lock is an acquire-release atomic at GPU scope and
its last slice reads the other slices' partial sums past L1 (`ld.global.cg`)."""

import json

import pytest

pytest.importorskip("triton", reason="Triton is not installed (pip install -e '.[cuda]')")

from conftest import REPO, run_python  # noqa: E402

# In a fresh process: the tests' TRITON_INTERPRET=1 makes every kernel the interpreter's. Prints one
# JSON object: {variant: {"cubin": bytes, "ptx": [the MARKERS found in its PTX]}}.
COMPILE = r"""
import json, re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from bildlib.kernels import triton_attention as A, triton_rowinv as T

MARKERS = {"lock": r"@%p\d+ atom\.global\.gpu\.acq_rel\.add", "reset": r"atom\.global\.gpu\.acq_rel\.exch",
           "past L1": r"ld\.global\.cg", "barrier": r"bar\.sync"}


def build(fn, types, const):
    sig = types | {k: "constexpr" for k in const}
    assert list(sig) == fn.arg_names, "every argument typed, in order"
    k = triton.compile(ASTSource(fn, sig, const), target=GPUTarget("cuda", 90, 32))
    ptx = k.asm["ptx"]
    return {"cubin": len(k.asm["cubin"]), "ptx": [m for m, rx in MARKERS.items() if re.search(rx, ptx)]}


def mm(dt, split, norm, epi):  # T5-large's (1024, 1024) tiles; split: the inner dimension's slices
    bn, bk = T._tiles(1024, 1024)
    f32 = "*fp32" if split > 1 else f"*{dt}"  # the partials and row sums: float32 buffers
    types = {f"{a}_ptr": f"*{dt}" for a in "xwgry"} | {
        "part_ptr": f32, "ssq_ptr": f32 if norm else f"*{dt}", "lock_ptr": "*i32" if split > 1 else f"*{dt}"}
    types |= {a: "i32" for a in ("M", "N", "K", "stride_x", "stride_w", "stride_r", "stride_y", "K_SLICE")}
    const = {"EPI": T.EPILOGUES.index(epi), "NORM": norm, "SPLIT": split, "IEEE": dt == "fp32",
             "BLOCK_M": T.ROWS, "BLOCK_N": bn, "BLOCK_K": bk}
    return build(T.mm_kernel, types | {"eps": "fp32", "scale": "fp32"}, const)


def attention(dt, causal):  # self-attention with T5's bias (causal), or cross over n_keys keys
    types = {f"{a}_ptr": f"*{dt}" for a in "qkvbo"} | {"pos_ptr": "*i64", "nk_ptr": "*i64"}
    types |= {a: "i32" for a in ("M", "dh", "sq_h", "sq_m", "sk_h", "sk_t", "so_h", "so_m", "sb_h", "sb_q")}
    const = {"CAUSAL": causal, "BIAS": causal, "IEEE": dt == "fp32", "BLOCK_M": A.ROWS, "BLOCK_T": 64,
             "BLOCK_D": 64}
    return build(A.attention_kernel, types, const)


# bf16 (the engine's dtype on a GPU): unsplit with the norm fused and a residual add, split with the
# norm (the lock and the row sums), split with gelu_tanh (mT5's gate); float32's ieee dot, split
out = {"mm bf16 split 1 norm add": mm("bf16", 1, True, "add"),
       "mm bf16 split 4 norm": mm("bf16", 4, True, "none"),
       "mm bf16 split 4 gelu_tanh": mm("bf16", 4, False, "gelu_tanh"),
       "mm fp32 split 4 norm": mm("fp32", 4, True, "none"),
       "attention bf16 self": attention("bf16", True), "attention bf16 cross": attention("bf16", False)}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    # compiled afresh (Triton's cache in a scratch folder), with fusion into FMAs stated: Triton's
    # default, which warns that it will change
    cache = tmp_path_factory.mktemp("triton-cache")
    env = {"TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1", "TRITON_CACHE_DIR": str(cache)}
    return json.loads(run_python(COMPILE, REPO, env).stdout.strip().splitlines()[-1])


def test_every_variant_compiles_to_cubin_for_hopper(compiled):
    assert len(compiled) == 6 and all(v["cubin"] > 1000 for v in compiled.values()), compiled


def test_split_products_lock_and_read_past_l1(compiled):
    """One thread of each program counts it in (a predicated acquire-release add at GPU scope) after
    a barrier, the last slice reads the partials past L1 and resets the lock; unsplit, none of it."""
    for name, v in compiled.items():
        if name.startswith("mm"):
            split = "split 4" in name
            if split:
                assert {"lock", "reset", "past L1", "barrier"} <= set(v["ptx"]), (name, v)
            else:
                assert not {"lock", "reset"} & set(v["ptx"]), (name, v)
