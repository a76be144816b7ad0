"""Which machine a row-invariance choice was probed on: the CPU's name, the ISA torch dispatches
to with any cap set or emulation seen, the caps this CPU can run under, a GPU's name
(models.rowinv records them with each choice; checks files and `make exactness` rows quote them)."""

from __future__ import annotations

import os

import torch

ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS")


def gpu(device: str) -> str:
    """A GPU's name and runtime, as summary() records it: "NVIDIA H200, CUDA 13.0"."""
    if device == "cuda" and torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, CUDA {torch.version.cuda}"
    return device


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), or the platform's processor string elsewhere."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def caps() -> list[dict[str, str]]:
    """The ISA caps this CPU can run under, each an environment to start a process with: none,
    oneDNN capped at each ISA below the CPU's, ATen's dispatch capped likewise (x86 Linux)."""
    flags = _flags()
    if not flags or "emulated" in isa():
        return [{}]  # no flags, or under an emulator: a capped child would run on the host
    out: list[dict[str, str]] = [{}]
    for flag, cap in (("amx_bf16", "AVX512_CORE_BF16"), ("avx512_bf16", "AVX512_CORE"), ("avx512f", "AVX2")):
        if flag in flags:
            out.append({"ONEDNN_MAX_CPU_ISA": cap})
    if "avx512f" in flags:
        out.append({"ATEN_CPU_CAPABILITY": "avx2"})
    if "avx2" in flags:
        out.append({"ATEN_CPU_CAPABILITY": "default"})
    return out


def isa() -> str:
    """The ISA torch's kernels dispatch to here, with any cap set in the environment:
    "AVX512" or "AVX512, ONEDNN_MAX_CPU_ISA=AVX2"."""
    caps = [f"{v}={os.environ[v]}" for v in ISA_CAPS if os.environ.get(v)]
    here = torch.backends.cpu.get_cpu_capability()
    model = os.environ.get("BILD_EMULATED", "")  # make test-cpus names the model qemu emulates
    if here != "AVX512" and "avx512f" in _flags() and not os.environ.get("ATEN_CPU_CAPABILITY"):
        # e.g. qemu-x86_64 -cpu Haswell on an AVX512 host: the host's flags give it away
        caps.append(f"emulated{' ' + model if model else ''} (the host has AVX512)")
    elif model:  # an emulator on a host with the same ISA: only make test-cpus' word says so
        caps.append(f"emulated {model}")
    return ", ".join([here, *caps])


def _flags() -> set[str]:
    """The host's CPU flags (/proc/cpuinfo; an emulator such as qemu-user shows the host's)."""
    try:
        with open("/proc/cpuinfo") as f:
            return set(next(ln for ln in f if ln.startswith("flags")).split(":", 1)[1].split())
    except (OSError, StopIteration):
        return set()
