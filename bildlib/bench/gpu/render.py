"""The GPU check's files as Markdown: summary.md beside them, and docs/engines-gpu.md's block."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bildlib.bench.gpu import projection

FOLDER = "figures/gpu"  # where make gpu-check writes


def summary(out: Path) -> str:
    """summary.md: the folder's tables as Markdown, made from its files only."""
    m = json.loads((out / "machine.json").read_text())
    v = ", ".join(f"{k} {x}" for k, x in m["versions"].items() if x)
    lines = [f"# GPU check: {m['device']}", "", f"{m['date']}; CUDA {m['cuda']}; {v}.", ""]
    tests = out / "kernel-tests.txt"
    if tests.exists():
        lines += [f"Kernel tests on this GPU (tests/test_kernels_*.py): {tests_line(out)}", ""]
    titles = {"bild.csv": "Lossless BiLD against vanilla greedy (Multi30k val)",
              "steps.csv": "One call of each engine (milliseconds, medians)",
              "fig4_table1.csv": "Table 1 from fig4's sweep on this GPU",
              "kernels.csv": "Policy kernels: torch eager against Triton (microseconds)",
              "lut.csv": "SqueezeLLM's matrix-vector product: Triton LUT against torch bf16 (microseconds)",
              "dryrun.csv": "The paper presets' dry run on this GPU (random models, n = 2)",
              "probes.csv": "Row invariance on this GPU: the probe's choice per product",
              "regime.csv": "The paper's regime: a decoder step (ms) against its weights' read"}  # fmt: skip
    if bad := failed(out):
        lines += ["**Parts that failed on this run** (their tables are absent or older): "
                  + "; ".join(f"`{b}`" for b in bad) + ".", ""]
    for name, title in titles.items():
        if (out / name).exists():
            df = pd.read_csv(out / name).drop(columns=["signature"], errors="ignore")
            lines += [f"## {title}", "", df.to_markdown(index=False, missingval=""), ""]
    return "\n".join(lines)


def failed(out: Path) -> list[str]:
    """The parts that failed, from failed.txt ("dryrun (ModuleNotFoundError: ...)"); [] when none."""
    f = out / "failed.txt"
    return [s for s in f.read_text().splitlines() if s.strip()] if f.exists() else []


def tests_line(out: Path) -> str:
    """pytest's last line in kernel-tests.txt ("153 passed in 22.30s")."""
    last = [s for s in (out / "kernel-tests.txt").read_text().splitlines() if s.strip()]
    return last[-1] if last else "no output"


def block(root: Path, folder: str = FOLDER) -> str:
    """docs/engines-gpu.md's block: the committed GPU check, from its files only."""
    from bildlib.analysis.tables import md_table, read_json

    out = root / folder
    m = read_json(root, f"{folder}/machine.json")
    v = m["versions"]
    df = _bild(out, folder)
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
    bad = failed(out)
    more = (_steps(out) if (out / "steps.csv").exists() else []) + (
        _fig4(root, folder) if (out / "fig4_table1.csv").exists() else []) + (
        _dryrun(out) if (out / "dryrun.csv").exists() else []) + (  # parts an older run lacks
        _lut(out) if (out / "lut.csv").exists() else []) + (
        _probes(out) if (out / "probes.csv").exists() else []) + (
        ["", "**Parts that failed on this run:** " + "; ".join(f"`{b}`" for b in bad) + "."] if bad else [])
    return "\n".join([
        f"Run {m['date']} on one {m['device']} (CUDA {m['cuda']}, torch {v['torch']}, Triton {v['triton']}, "
        f"transformers {v['transformers']}) with `make gpu-check`; files in `{folder}/`.",
        "",
        f"**Kernels.** Their tests on the GPU (Triton compiled, not interpreted): {tests_line(out)}. "
        f"Benchmark, microseconds per call at k = 10 rows, torch eager → Triton (medians of CUDA-event "
        f"timings; Triton is faster in {wins} of {len(k)} cells over k ∈ {{1, 4, 10, 16}}; at most "
        f"{k['pct_peak'].max():.1f} % of the HBM peak, so these are launch costs, not bandwidth):",
        "",
        md_table(["kernel", *heads], krows),
        "",
        f"**BiLD on the GPU.** The aligned small and the large model of the `multi30k` preset, batch 1, "
        f"first {n} val sentences (the first {n - timed} untimed), the three decoders interleaved per "
        f"sentence. *Same* is the share of sentences whose ids equal vanilla's in the same row group, "
        f"or the reference's (HF engine, float32); calls and ms are per sentence:",
        "",
        md_table(["dtype", "engine", "decoder", "BLEU", "same as vanilla", "same as reference", "small calls",
                "large calls", "ms", "speedup"], rows),  # fmt: skip
        *more,
    ])


def _bild(out: Path, folder: str) -> pd.DataFrame:
    """bild.csv (the lossless part's rows); a setting that failed is an error naming it."""
    df = pd.read_csv(out / "bild.csv", dtype={"error": str})
    if bad := df[df["error"].fillna("") != ""].to_dict("records"):
        b = bad[0]
        raise ValueError(f"{folder}/bild.csv: a setting failed: {b['dtype']} {b['engine']}: {b['error']}")
    return df


def _steps(out: Path) -> list[str]:
    """The engines' per-call table, from steps.csv."""
    from bildlib.analysis.tables import md_table

    t = pd.read_csv(out / "steps.csv")
    call = next(c for c in t.columns if c.startswith("call") and c.endswith("_ms"))  # "call10_ms"
    rows = [[f"`{r['model']}`", r["dtype"], r["engine"], f"{r['step_ms']:.3f}", f"{r[call]:.3f}"]
            for _, r in t.iterrows()]  # fmt: skip
    return ["", "**One call of each engine** (bildlib.bench.callbench: medians, CUDA synchronised, the "
            "engines "
            "alternating in blocks), milliseconds:", "",
            md_table(["model", "dtype", "engine", "one-token step", f"{call[4:-3]}-token call"], rows)]


def _fig4(root: Path, folder: str) -> list[str]:
    """Table 1 from fig4's sweep on the GPU, from fig4_table1.csv and its checks."""
    from bildlib.analysis.tables import read_csv, read_json, regimes, run_line

    t, c = read_csv(root, f"{folder}/fig4_table1.csv"), read_json(root, f"{folder}/fig4_checks.json")
    return ["", f"**fig4's sweep on the GPU** (the harness as the notebook runs it; *{run_line(c)}*). "
            "Regimes by the interval rule, as in Table 1:", "", regimes(t)]  # fmt: skip


def _dryrun(out: Path) -> list[str]:
    """The paper presets' dry run on the GPU, from dryrun.csv."""
    t = pd.read_csv(out / "dryrun.csv", dtype={"error": str})
    bad = t[t["error"].fillna("") != ""]
    line = (f"**The paper presets' dry run on the GPU** (`experiments.paper.dryrun`'s covering plan, "
            f"device=cuda: random models of the checkpoints' shapes, hub-schema data, n = 2): "
            f"{len(t) - len(bad)} of {len(t)} runs passed ({t['preset'].nunique()} presets, "
            f"{t['notebook'].nunique()} notebooks, {t['seconds'].sum():.0f} s).")
    if len(bad):
        b = bad.iloc[0]
        line += f" The first failure: {b['preset']} / {b['notebook']}: `{b['error'][:200]}`."
    return ["", line]


def _lut(out: Path) -> list[str]:
    """SqueezeLLM's matrix-vector kernel against torch's bf16 product, from lut.csv (one row of x)."""
    from bildlib.analysis.tables import md_table

    t = pd.read_csv(out / "lut.csv")
    t = t[t["k"] == 1]
    name = {(16, 0.0): "torch bf16", (4, 0.0): "LUT 4-bit", (3, 0.0): "LUT 3-bit",
            (4, 0.0045): "4-bit + 0.45 %", (3, 0.0045): "3-bit + 0.45 %"}  # fmt: skip
    cols = [c for c in name if any((t["bits"] == c[0]) & (t["sparse"] == c[1]))]
    rows = []
    for (o, i), g in t.groupby(["out", "in"], sort=False):
        us = {(r.bits, r.sparse): r.us for r in g.itertuples()}
        rows.append([f"{o:,} × {i:,}", *(f"{us[c]:.1f}" for c in cols)])
    return ["", "**SqueezeLLM's matrix-vector product** (kernels/triton_lut.py; docs/quantization.md), "
            "microseconds per call for one row of x, medians of CUDA-event timings:", "",
            md_table(["W (out × in)", *(name[c] for c in cols)], rows)]  # fmt: skip


def _probes(out: Path) -> list[str]:
    """The row-invariance probe's choices on the GPU, from probes.csv: how many products are
    invariant, and those that are not."""
    t = pd.read_csv(out / "probes.csv", dtype={"refused": str})
    bad = t[~t["invariant"].astype(bool)]
    said = "; ".join(f"{r.kind} {r.key}" for r in bad.itertuples()) or "none"
    return ["", f"**Row invariance on the GPU** (models.rowinv's probe, the shipped pair's lean engine in "
                f"float32 and bfloat16): {len(t) - len(bad)} of {len(t)} products have a row-invariant path; "
                f"those without one: {said}."]  # fmt: skip


STATIC = "figures/gpu/static"  # the static engine's first run on a GPU (regime and lossless parts)
PAIRS = [*projection.PAIRS.values(), ("multi30k-small-aligned", "multi30k-large")]  # small, large


def static_block(root: Path, folder: str = STATIC) -> str:
    """docs/engines-gpu.md's block on the static engine: regime.csv and bild.csv of one run."""
    from bildlib.analysis.tables import md_table, read_json

    out = root / folder
    m = read_json(root, f"{folder}/machine.json")
    t = pd.read_csv(out / "regime.csv", keep_default_na=False).set_index("model")
    if bad := [f"{i}: {n}" for i, n in t["notes"].items() if n]:
        raise ValueError(f"{folder}/regime.csv: an engine failed: {bad[0]}")
    cols = ["hf_ms", "lean_ms", "lean_graphed_ms", "static_eager_ms", "static_ms", "static_call10_ms"]
    rows = [[f"`{i}`", f"{r.read_MB:,.1f}", f"{r.limit_ms:.4f}", *(f"{r[c]:.3f}" for c in cols),
             f"{r.static_over_limit:.1f}×", "yes" if r.static_exact else "**no**"]
            for i, r in t.iterrows()]  # fmt: skip

    def ratio(col: str, small: str, large: str) -> str:
        return f"{t.loc[small, col] / t.loc[large, col]:.2f}" if {small, large} <= set(t.index) else "–"

    ratios = [[f"`{s}` / `{lg}`", *(ratio(c, s, lg) for c in ("lean_ms", "lean_graphed_ms", "static_ms"))]
              for s, lg in PAIRS]  # fmt: skip
    b = _bild(out, folder)
    brows = [[r.dtype, f"`{r.decoder}`", f"{r.bleu:.2f}", f"{r.same_as_vanilla:.1%}",
              f"{r.small_calls:.1f}", f"{r.large_calls:.1f}", f"{r.ms:.1f}", f"{r.speedup:.2f}×"]
             for r in b.itertuples()]  # fmt: skip
    n, timed = int(b["n"].iloc[0]), int(b["timed"].iloc[0])
    v = m["versions"]
    return "\n".join([
        f"Run {m['date']} on one {m['device']} (CUDA {m['cuda']}, torch {v['torch']}, Triton "
        f"{v['triton']}); files in `{folder}/`. The row-invariant kernels' tests compiled on that GPU: "
        f"{tests_line(out)}.",
        "",
        f"**One decoder step**, {t['dtype'].iloc[0]}, batch 1, position 20 over a 32-token source, "
        f"milliseconds (medians, CUDA synchronised). *Limit*: the bytes the step reads over a "
        f"device-to-device copy's bandwidth here ({t['copy_GBps'].iloc[0]:,.0f} GB/s). The paper's "
        f"shapes carry random weights. *Keeps bits*: each of 10 tokens has the same logits from one "
        f"10-token call as from ten one-token calls.",
        "",
        md_table(["model", "weights read (MB)", "limit", "HF", "lean", "lean graphed", "static eager",
                  "static", "static, 10 tokens", "static / limit", "keeps bits"], rows),
        "",
        "**A small model's step over its large model's** (BiLD pays when this is small):",
        "",
        md_table(["pair", "lean", "lean graphed", "static"], ratios),
        "",
        f"**Lossless BiLD on the static engine** (the shipped pair, the first {n} val sentences, the "
        f"first {n - timed} untimed, interleaved; ms and calls per sentence):",
        "",
        md_table(["dtype", "decoder", "BLEU", "same as vanilla", "small calls", "large calls", "ms",
                  "speedup"], brows),
        "", *_projected(root, t.reset_index()),
    ])  # fmt: skip


def _projected(root: Path, regime: pd.DataFrame) -> list[str]:
    """The projection's table (bildlib.bench.gpu.projection): Table 1's calls at the paper's costs."""
    from bildlib.analysis.tables import md_table, read_csv

    p = projection.project(regime, read_csv(root, "figures/fig4.csv"), read_csv(root, "figures/table1.csv"))
    rows = [[r.pair, r.model, r.regime, f"{r.fallback:g}", f"{r.rollback:g}", f"{r.small_calls:.1f}",
             f"{r.large_calls:.1f}", f"{r.vanilla_calls:.1f}", f"*{r.projected_speedup:.2f}×*",
             f"{r.measured_cpu_speedup:.2f}×"] for r in p.itertuples()]  # fmt: skip
    return ["**Projected, not measured: BiLD's decoder calls at the paper's pairs' costs** "
            "(`bildlib.bench.gpu.projection`). Each configuration that Table 1 picks by the interval "
            "rule makes its calls per sentence on the shipped pair (figures/fig4.csv); each is costed "
            "at the static engine's graphed step above (small) or 10-token call (large), against vanilla's "
            "one step a token. Encoders are left out. The last column is Table 1's measured speedup "
            "on the CPU, for comparison:", "",
            md_table(["pair", "Table 1 row", "regime", "α_FB", "α_RB", "small calls", "large calls",
                      "vanilla calls", "projected speedup", "CPU speedup (measured)"], rows)]  # fmt: skip
