"""`make gpu-check` (python -m bildlib.bench.gpu): its parts, run one after another on a CUDA GPU.

    python -m bildlib.bench.gpu --plan                   # what it runs; refuses at once without CUDA
    python -m bildlib.bench.gpu --out figures/gpu        # on a CUDA machine (make gpu-check)
    python -m bildlib.bench.gpu --device cpu --n 4 --out /tmp/gc   # the same logic, on CPU

The Makefile first runs the Triton kernels' tests on the GPU (tests/test_kernels_*.py with
BILD_KERNEL_TEST_DEVICE=cuda; their log is kernel-tests.txt), then the parts in QUICK (sized for
8 minutes of an H200: the run of 2026-11-28 with every part reached its 440-second limit inside
the dry run, its last part), each into its files in the output folder; `make gpu-check
GPU_CHECK_PARTS=all` runs every part of PLAN. A part that fails is reported and the next one runs:
one run on a borrowed GPU shows everything; the command then fails, naming the parts that did.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pandas as pd
import torch

from bildlib import REPO_ROOT
from bildlib.analysis.evaluate import device_name
from bildlib.bench.gpu.lossless import SETTINGS, lossless
from bildlib.bench.gpu.render import FOLDER, summary
from bildlib.data import atomic_path

PLAN = {  # part: what it runs and writes (the kernel tests run before, from the Makefile)
    "kernels": "the kernels' benchmark (bildlib.kernels.bench): torch eager against Triton, V 32,128 and "
    "250,112, k 1-16, float32 and bfloat16, CUDA events -> kernels.csv",
    "lut": "the SqueezeLLM matrix-vector kernel (bildlib.kernels.lut_bench): Triton LUT on 4- and 3-bit "
    "codes, with and without a 0.45 % sparse part, against torch's bf16 product, k 1 and 4 -> lut.csv",
    "steps": "a one-token step and a 10-token call of each model, HF's forward against the lean engine, "
    "float32 and bfloat16, CUDA synchronised (bildlib.bench.callbench) -> steps.csv",
    "fig4": "fig4's sweep (experiments.sweep, as notebooks/fig4 runs it) on the shipped pair's static "
    "engine, the first 50 val sentences, the preset's α_FB × α_RB grid, into a temporary cache -> "
    "fig4_table1.csv, fig4_checks.json",
    "regime": "the paper's regime (bildlib.bench.gpu.regime): one bf16 decoder step of HF's forward, the "
    "lean engine eager and graphed, and the static engine eager, graphed and as a 10-token call, on the "
    "shipped pair and on T5/mT5 small and large at their real size (random weights), against the time "
    "to read the step's weights at the measured copy bandwidth; whether a 10-token static call keeps "
    "each token's bits -> regime.csv",
    "probes": "the row-invariance probe's choice for each product of the shipped pair's lean engine on "
    "this device, float32 and bfloat16 (models.rowinv): path, invariant or not, paths refused -> probes.csv",
    "lossless": "lossless BiLD (distance='exact') against vanilla greedy and BiLD at its default "
    "thresholds, the first n val sentences, each dtype and engine (HF's in float32 only but with "
    "--engines hf), interleaved -> bild.csv",
    "dryrun": "the paper presets' dry run (experiments.paper.dryrun, its covering plan: every notebook "
    "on random models of the checkpoints' shapes and hub-schema data, n = 2) with device=cuda -> dryrun.csv",
}
QUICK = ["regime", "lossless", "fig4", "probes", "steps"]  # make gpu-check's default: the paper's regime


def versions() -> dict:
    out = {}
    for pkg in ("torch", "triton", "transformers", "tokenizers", "sacrebleu"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def machine(device: torch.device) -> dict:
    from bildlib import notebook

    cuda = device.type == "cuda"
    return {
        "device": device_name(device),
        "cuda": torch.version.cuda if cuda else None,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
        "code": notebook.code_state(),  # the code this check ran (notebook.code_state)
        "versions": versions(),
    }


def steps(device, out: Path, rounds: int = 10) -> pd.DataFrame:
    """steps.csv: per-call latency of both engines on the shipped pair, in float32 and bfloat16."""
    from bildlib.bench import callbench
    from bildlib.plots import save_table

    runs = [callbench.bench(device=str(device), dtype=d, rounds=rounds) for d in ("float32", "bfloat16")]
    df = pd.concat(runs)
    save_table(df, "steps", out)
    return df


def fig4(device, out: Path, n: int = 50, engine: str = "static") -> pd.DataFrame:
    """fig4_table1.csv and fig4_checks.json: Table 1 from fig4's sweep on `device` and `engine`."""
    from bildlib import analysis as A
    from bildlib import experiments as X
    from bildlib import notebook
    from bildlib.plots import save_table

    grid = X.bild_grid("multi30k")
    with tempfile.TemporaryDirectory() as cache:  # timed afresh, and nothing left in data/results
        s = X.RunSettings(device=str(device), engine=engine, results=Path(cache))
        df = X.sweep("multi30k", grid, n_examples=n, settings=s, progress=False)
    s = A.summarize(df)
    table = A.summary_table(s)
    save_table(table.assign(**A.run_info(s)), "fig4_table1", out)  # as notebooks/fig4 writes table1.csv
    notebook.save_checks(notebook.sweep_checks(s, df), "fig4", out)
    return table


def regime_part(device, out: Path) -> pd.DataFrame:
    """regime.csv: bildlib.bench.gpu.regime's table (on CPU only the shipped pair, float32)."""
    from bildlib.bench.gpu.regime import regime
    from bildlib.plots import save_table

    cpu = device.type != "cuda"
    df = regime(device, torch.float32 if cpu else torch.bfloat16, paper=() if cpu else None)
    save_table(df, "regime", out)
    return df


def probes(device, out: Path) -> pd.DataFrame:
    """probes.csv: what models.rowinv chose on `device` in this process, after loading the shipped
    pair's lean engine in each dtype and decoding one sentence (attention chooses at its first
    call): each product's kind and key, the path taken, whether it is invariant, those refused."""
    from bildlib import decoding as D
    from bildlib.experiments.presets import PRESETS
    from bildlib.models import load_pair, rowinv
    from bildlib.plots import save_table

    p = PRESETS["multi30k"]
    for dtype in ("float32", "bfloat16"):
        small, large = load_pair(p.model("aligned"), p.model("large"), device, dtype, "lean")
        D.bild(small, large, small.encode("Ein Mann fährt Fahrrad."), distance="exact")
    rows = [{"kind": c.kind, "key": " ".join(map(str, key[1:-1] if c.device != "cpu" else key[1:])),
             "path": c.path, "invariant": c.invariant, "refused": " ".join(c.tried) if c.invariant else "all"}
            for key, c in rowinv.CHOSEN.items() if c.device == device.type]  # fmt: skip
    df = pd.DataFrame(rows, columns=["kind", "key", "path", "invariant", "refused"])
    save_table(df, "probes", out)
    return df


def dryrun(device, out: Path) -> pd.DataFrame:
    """dryrun.csv: the paper presets' covering dry run on `device`; a run that failed is an error."""
    from bildlib.experiments.paper import dryrun as D
    from bildlib.plots import save_table

    with tempfile.TemporaryDirectory() as root:  # the stand-in models, data and results
        t = D.run(Path(root), plan=D.covering(), device=str(device))
    save_table(t, "dryrun", out)
    if bad := t[t["error"] != ""].to_dict("records"):
        raise RuntimeError(f"{len(bad)} of {len(t)} dry runs failed, first {bad[0]['preset']} / "
                           f"{bad[0]['notebook']}: {bad[0]['error'][:300]}")
    return t


def refusal() -> str | None:
    """Why this machine cannot run the check (None: it can)."""
    if torch.cuda.is_available():
        return None
    return (f"make gpu-check needs a CUDA GPU, and torch {torch.__version__} sees none on this machine "
            "(torch.cuda.is_available() is False), so nothing was run. What it would run is listed "
            "above; its logic runs on CPU with: python -m bildlib.bench.gpu --device cpu --n 4")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO_ROOT / FOLDER), help="folder for the files")
    ap.add_argument("--device", default="cuda", help="cuda (the check) or cpu (its logic only)")
    ap.add_argument("--plan", action="store_true", help="print the parts, refuse without CUDA, and stop")
    ap.add_argument("--parts", nargs="+", choices=[*PLAN, "all"], default=QUICK,
                    help="the parts to run (default: the 8-minute set; all: every part)")
    ap.add_argument("--fig4-engine", default="static", help="the engine of fig4's sweep")
    ap.add_argument("--engines", nargs="+", choices=["hf", "lean", "static"], default=None,
                    help="the lossless part's engines (default: all; the first setting is the reference)")
    ap.add_argument("--n", type=int, default=200, help="Multi30k val sentences per lossless setting")
    ap.add_argument("--fig4-n", type=int, default=50, help="val sentences of fig4's sweep")
    ap.add_argument("--warmup", type=int, default=5, help="first sentences left out of the lossless timings")
    ap.add_argument("--repeats", type=int, default=200, help="timed calls per kernel benchmark cell")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of the engines' call timings")
    a = ap.parse_args(argv)
    if "all" in a.parts:
        a.parts = list(PLAN)
    if a.plan:
        lines = (f"- {k}: {v}" + ("" if k in QUICK else " [with --parts all]") for k, v in PLAN.items())
        print("\n".join(lines), flush=True)
    if a.device.startswith("cuda") and (why := refusal()):
        sys.exit(why)
    if a.plan:
        return
    from bildlib.models import resolve_device

    device = resolve_device(a.device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "machine.json") as tmp:
        tmp.write_text(json.dumps(machine(device), indent=1) + "\n")
    failed = []
    for part in a.parts:
        print(f"== {part}: {PLAN[part]}", flush=True)
        try:
            if part == "kernels" and device.type == "cuda":
                from bildlib.kernels import bench

                bench.main(["--csv", str(out / "kernels.csv"), "--repeats", str(a.repeats)])
            elif part == "lut" and device.type == "cuda":
                from bildlib.kernels import lut_bench

                lut_bench.main(["--csv", str(out / "lut.csv")])
            elif part == "steps":
                print(steps(device, out, a.rounds).round(3).to_string(index=False), flush=True)
            elif part == "fig4":
                print(fig4(device, out, a.fig4_n, a.fig4_engine).to_string(index=False), flush=True)
            elif part == "regime":
                print(regime_part(device, out).to_string(index=False), flush=True)
            elif part == "probes":
                print(probes(device, out).to_string(index=False), flush=True)
            elif part == "lossless":
                keep = (lambda s: s[1] in a.engines) if a.engines else (lambda s: s != ("bfloat16", "hf"))
                settings = [s for s in SETTINGS if keep(s)]
                lossless(device, a.n, a.warmup, settings=settings, out=out)
            elif part == "dryrun":
                dryrun(device, out)
        except (Exception, SystemExit) as e:  # noqa: BLE001 -- a borrowed GPU: report it, run the next part
            traceback.print_exc()
            failed.append(f"{part} ({type(e).__name__}: {e})")
    with atomic_path(out / "failed.txt") as tmp:  # one line per failed part; empty when none
        tmp.write_text("".join(f"{f}\n" for f in failed))
    with atomic_path(out / "summary.md") as tmp:
        tmp.write_text(summary(out))
    print(f"wrote {out}/: " + ", ".join(sorted(p.name for p in out.iterdir() if not p.name.startswith("."))))
    if failed:
        sys.exit("gpu-check: these parts failed: " + "; ".join(failed))

