"""The lean decoders' pieces between weight products as C++ (cpu_t5.cpp beside this file), engine
"native": T5's `norm`, `attend` (self-attention writing the cache) and `cross` (the folded
cross-attention), and the decoder-only models' `attend_cached` (self-attention over a cache that
holds the call's keys), each one call for a layer's k rows, row-invariant by construction (the
source's header says how).

`load()` builds them once per machine kind with torch's own extension builder
(torch.utils.cpp_extension: the system's C++ compiler and ninja) into build/torch_extensions/,
named by the source's, torch's version's and the flags' hash and the instruction set it is compiled
for: a second process imports the built library as it is, in milliseconds and with no compiler,
and an emulated CPU (qemu) gets its own build.
The instruction set is the one torch itself dispatches to here (torch.backends.cpu), never the
host compiler's -march=native, which under qemu would target the host. Where nothing can be
built (no compiler, a read-only tree), load() returns None, says why once (`why()`), and the
engine keeps its Python ops."""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
import time
from pathlib import Path

import torch

log = logging.getLogger("bildlib.kernels")

SOURCE = Path(__file__).with_name("cpu_t5.cpp")
# torch's CPU capability -> the compiler's flags for it (FMA with AVX2 and above)
ISA = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx2", "-mfma",
               "-mprefer-vector-width=512"],
    "AVX2": ["-mavx2", "-mfma"],
}
FLAGS = ["-O3", "-fno-fast-math", "-std=c++17", "-fopenmp"]  # OpenMP: ATen's parallel_for

_lock = threading.Lock()
_state: dict = {}


def capability() -> str:
    """torch's CPU capability here ("AVX512", "AVX2", "DEFAULT", ...), as ATen dispatches."""
    return torch.backends.cpu.get_cpu_capability()


def build_dir() -> Path:
    """Where builds go: $BILD_BUILD_DIR, else the checkout's build/ (ignored by git), else (an
    installed wheel) ~/.cache/bildlib."""
    if root := os.environ.get("BILD_BUILD_DIR"):
        return Path(root) / "torch_extensions"
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():
        return checkout / "build" / "torch_extensions"
    return Path.home() / ".cache" / "bildlib" / "torch_extensions"


def name() -> str:
    """The module's name: the instruction set, and a hash of the source, torch's version and the flags."""
    cap = capability()
    what = " ".join([torch.__version__, *FLAGS, *ISA.get(cap, [])])  # a built library fits one torch
    code = b"".join(f.read_bytes() for f in sources())
    h = hashlib.sha256(code + what.encode()).hexdigest()[:12]
    return f"bild_cpu_t5_{cap.lower()}_{h}"


def sources() -> list[Path]:
    """The C++ the module is built from: cpu_t5.cpp and the headers beside it that it includes
    (cpu_policy.h, the policy's reductions; cpu_draft.h, the small model's run)."""
    return [SOURCE, *sorted(SOURCE.parent.glob("cpu_*.h"))]


def load():
    """The built module (norm, attend, cross, attend_cached; max_prob, rollback_distance; Plan, the
    small model's run), or None where it cannot be built (why())."""
    with _lock:
        if "mod" not in _state:
            _state["mod"], _state["why"], _state["seconds"] = _build()
        return _state["mod"]


def loaded():
    """The module if load() built or imported it in this process, else None; never builds."""
    return _state.get("mod")


def why() -> str | None:
    """Why load() gave None (None when it built or was not tried)."""
    return _state.get("why")


def seconds() -> float | None:
    """What load() took in this process: a build, or an import of the built library."""
    return _state.get("seconds")


def _build():
    from torch.utils import cpp_extension

    t0 = time.perf_counter()
    d = build_dir() / name()
    built = d / f"{name()}.so"
    if built.is_file() and not (d / "lock").exists():  # built (no build under way): imported as it is
        try:
            spec = importlib.util.spec_from_file_location(name(), built)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            return mod, None, time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - a library that does not load here is built again
            log.warning("%s does not load here (%s: %s); building it again", built, type(e).__name__, e)
            built.unlink(missing_ok=True)  # so that ninja links it anew
    try:
        d.mkdir(parents=True, exist_ok=True)
        mod = cpp_extension.load(
            name=name(), sources=[str(SOURCE)], build_directory=str(d),
            extra_cflags=FLAGS + ISA.get(capability(), []), extra_ldflags=["-fopenmp"], verbose=False,
        )  # fmt: skip
    except Exception as e:  # noqa: BLE001 - any failure to build leaves the Python ops
        why = f"the C++ decoder pieces could not be built in {d} ({type(e).__name__}: {str(e)[-300:]})"
        log.warning("%s; the lean engine runs its Python ops", why)
        return None, why, time.perf_counter() - t0
    return mod, None, time.perf_counter() - t0
