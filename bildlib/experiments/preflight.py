"""What a run will cost, said before it starts: the models and their sizes, the memory and disk
they need, and the time the roofline model (bildlib.analysis.roofline, a model, not a measurement)
projects for fig4's sweep on a GPU. `make figures PRESET=... DEVICE=cuda` prints it first.

    python -m bildlib.experiments.preflight --preset cnndm-t5 --device cuda --n-examples 500
"""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path

import pandas as pd

from bildlib.analysis import cost, roofline
from bildlib.decoding.common import check_count
from bildlib.experiments import presets
from bildlib.experiments.config import bild_grid
from bildlib.experiments.paper import shapes
from bildlib.experiments.sweeps import sweep

DEVICES = ("auto", "cpu", "cuda")
OUTPUT_TOKENS = 0.5  # the sweep's outputs are taken as half of max_new_tokens long, on average


def arch(preset: presets.Preset, which: str) -> cost.Arch:
    """A checkpoint's shapes: experiments/paper/shapes.json for the paper's, the local config otherwise
    (no weights are read, and a hub id needs no network)."""
    from transformers import AutoConfig

    hub = getattr(preset, which)
    s = shapes.shapes()
    if hub in s["checkpoints"]:
        shape = s["checkpoints"][hub]
        a = cost.Arch.of(shapes.config(shape))
        return cost.Arch(**{**a.__dict__, "tied": s["shapes"][shape].get("tie_word_embeddings", True)})
    return cost.Arch.of(AutoConfig.from_pretrained(preset.model(which)))


def plan(preset: str, device: str = "cuda", dtype_bytes: int | None = None, n_examples: int = 100,
         gpu: str = "A100", layer_overhead_us: float = 10.0, source_tokens: int = 0) -> dict:  # fmt: skip
    """The numbers a reviewer wants before a long run of fig4 on `preset`. device: "cpu", "cuda"
    (a projection for a GPU, which this machine need not have) or "auto" (this machine's)."""
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    check_count("n_examples", n_examples)
    dtype_bytes = dtype_bytes or (4 if device == "cpu" else 2)  # fp32 on a CPU, bf16 / fp16 on a GPU
    p = presets.get(preset)
    archs = {w: arch(p, w) for w in ("small", "aligned", "large")}
    params = {w: sum(a.params().values()) for w, a in archs.items()}
    grid = bild_grid(preset)
    repeats = inspect.signature(sweep).parameters["baseline_repeats"].default
    configs = len(grid) + repeats + len({c.model for c in grid})  # + vanilla large's repeats, each small
    T = max(1, int(OUTPUT_TOKENS * p.max_new_tokens))
    S = source_tokens or (400 if p.metric == "rougeL" else 30)
    g = roofline.GPUS[gpu]
    calls = [cost.call(archs["large"], 1, t, S, t == 0, dtype_bytes) for t in range(T)]
    large_s = roofline.predict(pd.DataFrame(calls), g, layer_overhead_us * 1e-6)  # vanilla large, a sentence
    weights_gb = sum(params.values()) * dtype_bytes / 1e9
    return {
        "preset": preset, "device": device, "models": {w: getattr(p, w) for w in archs},
        "params_m": {w: round(n / 1e6) for w, n in params.items()},
        "memory_gb": round(1.2 * weights_gb, 2),  # the three models, plus caches and activations
        "disk_gb": round(sum(params.values()) * 4 / 1e9, 2),  # the checkpoints, taken as stored in fp32
        "fig4_configurations": configs, "n_examples": n_examples,
        "fallback_grid": list(p.fallback_grid), "rollback_grid": list(p.rollback_grid),
        "max_source_tokens": p.max_source_tokens, "max_new_tokens": p.max_new_tokens,
        "projected_fig4_minutes": round(configs * n_examples * large_s / 60, 1),
        "projection": f"{gpu} roofline, {layer_overhead_us:g} µs per layer, {T} output and {S} source tokens "
                      "per sentence, every configuration costed as vanilla large (an upper bound for BiLD)",
    }  # fmt: skip


def describe(d: dict) -> str:
    models = ", ".join(f"{w} {d['models'][w]} ({d['params_m'][w]} M)" for w in d["models"])
    run = f"fig4: {d['fig4_configurations']} configurations x {d['n_examples']} sentences"
    if d["device"] == "cpu":
        time = f"  {run}; the roofline projection covers GPUs only (run with --device cuda to see it)"
    else:
        time = (f"  {run}, projected {d['projected_fig4_minutes']} min ({d['projection']}); "
                "a model, not a measurement")  # fmt: skip
    src = "whole" if d["max_source_tokens"] is None else f"truncated to {d['max_source_tokens']} tokens"
    grid = (f"  grid: α_FB {', '.join(f'{x:g}' for x in d['fallback_grid'])}; α_RB "
            f"{', '.join(f'{x:g}' for x in d['rollback_grid'])}; sources {src}; at most "
            f"{d['max_new_tokens']} new tokens\n")  # fmt: skip
    return (f"plan for preset {d['preset']} on {d['device']}: {models}\n" + grid +
            f"  memory: about {d['memory_gb']} GB ({'RAM' if d['device'] == 'cpu' else 'VRAM'}) for the "
            "three "
            f"models; disk: about {d['disk_gb']} GB of checkpoints (fp32), plus the dataset\n" + time)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bildlib.experiments.preflight",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="multi30k", choices=sorted(presets.PRESETS))
    ap.add_argument("--device", default="auto", choices=DEVICES,
                    help="auto: this machine's (cuda if it has a GPU); cuda projects a GPU run from anywhere")
    ap.add_argument("--n-examples", type=int, default=100)
    ap.add_argument("--gpu", default="A100", choices=sorted(roofline.GPUS))
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    a = ap.parse_args(argv)
    if a.n_examples < 1:
        ap.error(f"--n-examples must be an integer >= 1, got {a.n_examples}")
    d = plan(a.preset, a.device, None, a.n_examples, a.gpu)
    print(describe(d))
    if a.json:
        a.json.write_text(json.dumps(d, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
