"""`make gpu-check`: what a CUDA GPU must show before bildlib's GPU paths are trusted.

    python -m bildlib.gpucheck --out figures/gpu-check           # on a CUDA machine
    python -m bildlib.gpucheck --device cpu --n 4 --out /tmp/gc  # the same logic, on CPU

The Makefile first runs the Triton kernels' tests on the GPU (tests/test_kernels_triton.py with
BILD_KERNEL_TEST_DEVICE=cuda; their log is kernel-tests.txt). Then this module writes:

- kernels.csv: the kernels' benchmark (bildlib.kernels.bench), torch eager against Triton.
- bild.csv: lossless BiLD (distance="exact": a small token stays only where it is the large model's
  argmax) against vanilla greedy decoding with the large model, on the first n Multi30k val
  sentences, for each dtype and engine; beside them BiLD at its default thresholds. One row per
  (dtype, engine, decoder): BLEU (sacrebleu, signature logged), the share of sentences whose ids equal
  vanilla's in the same setting (lossless means 1.0) and the reference's (the HF engine in float32),
  calls per sentence, and mean milliseconds per sentence. The decoders run interleaved per sentence
  (their order rotates), CUDA synchronised around each; the first `warmup` sentences are not timed.
- machine.json: the GPU and the versions; summary.md: the tables above as Markdown.

A setting that fails is a row with its error, not a crash: one run on a borrowed GPU shows all.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pandas as pd
import torch

from bildlib import REPO_ROOT
from bildlib.data import atomic_path

SETTINGS = (("float32", "hf"), ("float32", "lean"), ("bfloat16", "lean"), ("bfloat16", "hf"))
DECODERS = ("vanilla", "bild_lossless", "bild_default")


def versions() -> dict:
    out = {}
    for pkg in ("torch", "triton", "transformers", "tokenizers", "sacrebleu"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def machine(device: torch.device) -> dict:
    cuda = device.type == "cuda"
    return {
        "device": torch.cuda.get_device_name(device) if cuda else platform.processor() or platform.machine(),
        "cuda": torch.version.cuda if cuda else None,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
        "versions": versions(),
    }


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_setting(sources: list[list[int]], refs: list[str], dtype: str, engine: str, device, warmup: int):
    """Rows for one (dtype, engine): each decoder over every source, interleaved; plus their ids."""
    from bildlib import decoding as D
    from bildlib.metrics import bleu
    from bildlib.models import load_pair
    from bildlib.presets import PRESETS

    p = PRESETS["multi30k"]
    small, large = load_pair(p.model("aligned"), p.model("large"), device, dtype, engine)
    run = {
        "vanilla": lambda x: D.vanilla(large, x),
        "bild_lossless": lambda x: D.bild(small, large, x, distance="exact"),
        "bild_default": lambda x: D.bild(small, large, x),
    }
    ids = {d: [] for d in DECODERS}
    ms = {d: [] for d in DECODERS}
    calls = {d: [0, 0] for d in DECODERS}  # [small, large] over the timed sentences
    for i, x in enumerate(sources):
        order = DECODERS[i % 3 :] + DECODERS[: i % 3]  # rotate who goes first
        for d in order:
            sync(device)
            t = time.perf_counter()
            out, tr = run[d](x)
            sync(device)
            dt = time.perf_counter() - t
            ids[d].append(out)
            if i >= warmup:
                ms[d].append(1e3 * dt)
                one = d == "vanilla"  # vanilla's single model counts as "S" in its Trace
                calls[d][0] += 0 if one else tr.small_calls
                calls[d][1] += tr.small_calls if one else tr.large_calls
    rows = []
    n_timed = len(sources) - warmup
    for d in DECODERS:
        score = bleu([large.decode(o) for o in ids[d]], refs)
        same = sum(a == b for a, b in zip(ids[d], ids["vanilla"], strict=True)) / len(sources)
        rows.append({
            "dtype": dtype, "engine": engine, "decoder": d, "n": len(sources), "timed": n_timed,
            "bleu": round(score.value, 2), "same_as_vanilla": round(same, 4),
            "small_calls": round(calls[d][0] / n_timed, 2), "large_calls": round(calls[d][1] / n_timed, 2),
            "ms": round(sum(ms[d]) / n_timed, 3), "signature": score.signature, "error": "",
        })  # fmt: skip
    base = rows[0]["ms"]
    for r in rows:
        r["speedup"] = round(base / r["ms"], 3)
    return rows, ids


def lossless(device, n: int, warmup: int, settings=SETTINGS, out: Path | None = None) -> pd.DataFrame:
    """bild.csv's rows (see the module's docstring), written after each setting when `out` is set."""
    from bildlib.data import load
    from bildlib.models import load_tokenizer
    from bildlib.presets import PRESETS

    if not 0 <= warmup < n:
        raise ValueError(f"warmup must be in [0, n={n}), got {warmup}")
    split = load("multi30k", "val", n)
    tok = load_tokenizer(PRESETS["multi30k"].model("large"))
    sources = [tok(s)["input_ids"] for s, _ in split.pairs]
    refs = [r for _, r in split.pairs]
    rows, reference = [], None
    for dtype, engine in settings:
        try:
            got, ids = run_setting(sources, refs, dtype, engine, device, warmup)
            if reference is None:
                reference = ids["vanilla"]  # the first setting's vanilla: HF in float32
            for r in got:
                same = sum(a == b for a, b in zip(ids[r["decoder"]], reference, strict=True))
                r["same_as_reference"] = round(same / len(sources), 4)
            rows += got
        except Exception as e:  # noqa: BLE001 -- a borrowed GPU: record what failed, go on
            traceback.print_exc()
            err = f"{type(e).__name__}: {e}"
            rows.append({"dtype": dtype, "engine": engine, "decoder": "", "error": err})
        if out is not None:
            write_csv(pd.DataFrame(rows), out / "bild.csv")
        shown = pd.DataFrame(rows).drop(columns=["signature"], errors="ignore")
        print(shown.to_string(index=False), flush=True)
    return pd.DataFrame(rows)


def write_csv(df: pd.DataFrame, path: Path) -> None:
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False)


def summary(out: Path) -> str:
    """summary.md: the folder's tables as Markdown, made from its files only."""
    m = json.loads((out / "machine.json").read_text())
    v = ", ".join(f"{k} {x}" for k, x in m["versions"].items() if x)
    lines = [f"# GPU check: {m['device']}", "", f"{m['date']}; CUDA {m['cuda']}; {v}.", ""]
    tests = out / "kernel-tests.txt"
    if tests.exists():
        lines += [f"Kernel tests on this GPU (tests/test_kernels_triton.py): {tests_line(out)}", ""]
    titles = {"bild.csv": "Lossless BiLD against vanilla greedy (Multi30k val)",
              "kernels.csv": "Policy kernels: torch eager against Triton (microseconds)"}  # fmt: skip
    for name, title in titles.items():
        if (out / name).exists():
            df = pd.read_csv(out / name).drop(columns=["signature"], errors="ignore")
            lines += [f"## {title}", "", df.to_markdown(index=False, missingval=""), ""]
    return "\n".join(lines)


def tests_line(out: Path) -> str:
    """pytest's last line in kernel-tests.txt ("153 passed in 22.30s")."""
    last = [s for s in (out / "kernel-tests.txt").read_text().splitlines() if s.strip()]
    return last[-1] if last else "no output"


def block(root: Path, folder: str = "figures/gpu-check") -> str:
    """docs/engines.md's block: the committed GPU check, from its files only."""
    from bildlib.report import _json, _table

    out = root / folder
    m = _json(root, f"{folder}/machine.json")
    v = m["versions"]
    df = pd.read_csv(out / "bild.csv", dtype={"error": str})
    if bad := df[df["error"].fillna("") != ""].to_dict("records"):
        b = bad[0]
        raise ValueError(f"{folder}/bild.csv: a setting failed: {b['dtype']} {b['engine']}: {b['error']}")
    rows = [[r.dtype, r.engine, f"`{r.decoder}`", f"{r.bleu:.2f}", f"{r.same_as_vanilla:.1%}",
             f"{r.same_as_reference:.1%}", f"{r.small_calls:.1f}", f"{r.large_calls:.1f}", f"{r.ms:.1f}",
             f"{r.speedup:.2f}×"] for r in df.itertuples()]  # fmt: skip
    n, timed = int(df["n"].iloc[0]), int(df["timed"].iloc[0])
    k = pd.read_csv(out / "kernels.csv")
    k10 = k[k["k"] == 10]
    krows = []
    for op, g in k10.groupby("op", sort=False):
        g = g.sort_values(["dtype", "V"])  # the same column order for every kernel
        krows.append([f"`{op}`", *(f"{r.torch_us:.0f} → {r.triton_us:.0f}" for r in g.itertuples())])
    heads = [f"{r.dtype}, V {r.V:,}" for r in g.itertuples()]
    wins = (k["speedup"] > 1).sum()
    return "\n".join([
        f"Run {m['date']} on one {m['device']} (CUDA {m['cuda']}, torch {v['torch']}, Triton {v['triton']}, "
        f"transformers {v['transformers']}) with `make gpu-check`; files in `{folder}/`.",
        "",
        f"**Kernels.** Their tests on the GPU (Triton compiled, not interpreted): {tests_line(out)}. "
        f"Benchmark, microseconds per call at k = 10 rows, torch eager → Triton (medians of CUDA-event "
        f"timings; Triton is faster in {wins} of {len(k)} cells over k ∈ {{1, 4, 10, 16}}; at most "
        f"{k['pct_peak'].max():.1f} % of the HBM peak, so these are launch costs, not bandwidth):",
        "",
        _table(["kernel", *heads], krows),
        "",
        f"**BiLD on the GPU.** The aligned small and the large model of the `multi30k` preset, batch 1, "
        f"first {n} val sentences (the first {n - timed} untimed), the three decoders interleaved per "
        f"sentence. *Same* is the share of sentences whose ids equal vanilla's in the same row group, "
        f"or the reference's (HF engine, float32); calls and ms are per sentence:",
        "",
        _table(["dtype", "engine", "decoder", "BLEU", "same as vanilla", "same as reference", "small calls",
                "large calls", "ms", "speedup"], rows),  # fmt: skip
    ])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(REPO_ROOT / "figures" / "gpu-check"), help="folder for the files")
    ap.add_argument("--device", default="cuda", help="cuda (the check) or cpu (its logic only)")
    ap.add_argument("--n", type=int, default=200, help="Multi30k val sentences decoded per setting")
    ap.add_argument("--warmup", type=int, default=5, help="first sentences left out of the timings")
    ap.add_argument("--repeats", type=int, default=200, help="timed calls per kernel benchmark cell")
    a = ap.parse_args(argv)
    from bildlib.models import resolve_device

    device = resolve_device(a.device)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    with atomic_path(out / "machine.json") as tmp:
        tmp.write_text(json.dumps(machine(device), indent=1) + "\n")
    if device.type == "cuda":
        from bildlib.kernels import bench

        try:
            bench.main(["--csv", str(out / "kernels.csv"), "--repeats", str(a.repeats)])
        except (Exception, SystemExit) as e:  # noqa: BLE001 -- go on to BiLD
            traceback.print_exc()
            print(f"kernels' benchmark failed: {e}", flush=True)
    lossless(device, a.n, a.warmup, out=out)
    with atomic_path(out / "summary.md") as tmp:
        tmp.write_text(summary(out))
    print(f"wrote {out}/: " + ", ".join(sorted(p.name for p in out.iterdir() if not p.name.startswith("."))))


if __name__ == "__main__":
    main()
