"""The large model weight-quantized, and BiLD on top (notebooks/quantized.ipynb; docs/quantization.md).

Per quantization (bildlib.quant; `make quantized` builds the checkpoints):
- the weight bytes a kernel reads (codes, tables, sparse part; the embeddings and head in bf16),
  against the bf16 model's;
- greedy BLEU of the quantized large alone (batched, sacrebleu; analysis.evaluate);
- one interleaved sweep with it as the large model, timed against the bf16 large in the same run
  (the sweep's baseline "base", repeated): the quantized large's own vanilla decoding, lossless
  BiLD (`distance="exact"`), and Algorithm 1 at each α_FB, alone and checking the sentence's end
  (verify_end_below), with the aligned small model. The bf16 row's sweep is the plain one.

Measured: every speedup against the bf16 vanilla large. The int8 large runs torch's CPU int8
kernel on its codes (models.linear.Int8), so its speed is its own. The other quantizations run
their dequantized weights, as fast as bf16, because this CPU has no kernel for non-uniform or
sub-byte codes (the Triton kernel, kernels/triton_lut.py, is for CUDA). For those, **projected**:
the weights-read bound of a memory-bound step, time scaling with the bytes a decoder step reads
(its linear layers and the output head), phi = those bytes / bf16's: the quantized large alone
1 / phi times faster than bf16, and BiLD over it (BiLD's measured speedup over that large) / phi.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT, repo_relative
from bildlib import experiments as X
from bildlib.analysis import summarize, vanilla_large
from bildlib.analysis.evaluate import evaluate
from bildlib.analysis.targets import fastest
from bildlib.models import load_model, locate
from bildlib.quant import model as QM
from bildlib.quant.build import BASE, OUT, folder
from bildlib.quant.config import parse


def check(labels: list[str], quant_dir: str = OUT) -> dict[str, str]:
    """{label: checkpoint folder} (quant_dir/<label>); bf16 is the shipped large. A label not built
    names make quantized."""
    if not isinstance(labels, list) or not labels:
        raise ValueError(f"labels must be a non-empty list of quantizations, got {labels!r}")
    out = {}
    for label in labels:
        cfg = parse(label)  # a bad label says what labels look like
        if cfg.method == "none":
            out[label] = locate(BASE)
            continue
        f = folder(quant_dir if Path(quant_dir).is_absolute() else REPO_ROOT / quant_dir, cfg.label)
        if not QM.is_quantized(f):
            raise FileNotFoundError(
                f"labels: {label!r}: no quantized checkpoint at {repo_relative(f)}; `make quantized` "
                f"builds them (python -m bildlib.quant.build --labels {label!r})"
            )
        out[label] = str(f)
    return out


def sizes(folders: dict[str, str]) -> pd.DataFrame:
    """label, method, bits, outliers; MB of weights (all; the bf16 model's); MB a decoder step
    reads (its linear layers and the head, quant.model.step_bytes); phi = that over bf16's."""
    model, _ = load_model(BASE, dtype="bfloat16")
    bf16, bf16_step = QM.nbytes(model, {}), QM.step_bytes(model, {})
    rows = []
    for label, f in folders.items():
        cfg = parse(label)
        q = QM.load_quantized(f)[1] if cfg.method != "none" else {}
        b, step = QM.nbytes(model, q), QM.step_bytes(model, q)
        rows.append({"label": label, "method": cfg.method, "bits": cfg.bits, "outliers": cfg.outliers,
                     "mb": b["total"] / 1e6, "bf16_mb": bf16["total"] / 1e6, "step_mb": step / 1e6,
                     "phi": step / bf16_step})  # fmt: skip
    return pd.DataFrame(rows)


def quality(folders: dict[str, str], split: str = "val", n: int | None = None, dtype: str = "default"):
    """label, greedy BLEU of the large alone (batched), the sacrebleu signature."""
    rows = []
    for label, f in folders.items():
        e = evaluate(f, split, n, dtype=dtype)
        rows.append({"label": label, "bleu": e["bleu"], "signature": e["signature"], "dtype": e["dtype"]})
    return pd.DataFrame(rows)


def configs(fallbacks: list[float], lossless_fallback: float, rollback: float = 1.0, small: str = "aligned",
            verify_below: list[float] = (0.8,), alone: bool = False):  # fmt: skip
    """BiLD with `small` at α_RB `rollback`: Algorithm 1 at each α_FB, the same checking the end of
    the sentence when a final small token had max p_S below each of verify_below (decoding.bild's
    verify_end_below, README's best rule within 0.5 BLEU), and lossless BiLD at lossless_fallback;
    alone: also the large's own vanilla decoding (a sweep whose baseline is "base")."""
    kw = {"model": small, "rollback": float(rollback)}
    return [X.Config("vanilla", model="large")] * alone + [
        X.Config("bild", fallback=float(fb), verify_end_below=v, **kw)
        for v in (None, *map(float, verify_below)) for fb in fallbacks] + [
        X.Config("bild", fallback=float(lossless_fallback), distance="exact", **kw)
    ]  # fmt: skip


def timed(preset: str, label: str, folders: dict[str, str], cfg: dict, split: str, n_examples: int,
          settings: X.RunSettings) -> pd.DataFrame:  # fmt: skip
    """label's sweep: bf16 (the shipped large) with its own vanilla as the baseline; any other with
    the quantized large as `large` and the bf16 large as the baseline "base", in one interleaved run.
    cfg: configs' arguments; settings: the run's (its checkpoints are this function's)."""
    run = {"split": split, "n_examples": n_examples}
    if parse(label).method == "none":
        s = settings.replace(checkpoints={"large": folders[label]})
        return X.sweep(preset, configs(**cfg), settings=s, **run)
    s = settings.replace(checkpoints={"large": folders[label], "base": locate(BASE)})
    return X.sweep(preset, configs(**cfg, alone=True), baseline="base", settings=s, **run)


def speed(label: str, df: pd.DataFrame, tol: float = 0.5) -> dict:
    """From one quantization's sweep, against its baseline, the bf16 vanilla large: that baseline's
    ms per sentence and BLEU; the quantized large alone (speedup, BLEU); BiLD's lossless speedup and
    its best within `tol` BLEU of the bf16 vanilla large; each speedup with its 95 % interval."""
    s = summarize(df)
    v = vanilla_large(s)
    row = {"label": label, "vanilla_ms": 1e3 * s.attrs["baseline_latency_s"],
           "base_bleu": float(v["score"].mean()), "spread_pct": s.attrs["baseline_spread_pct"],
           "busy": int(s["busy"].sum())}  # fmt: skip
    own = s.attrs.get("baseline") == "base"  # the quantized large's own rows; else it is the baseline
    alone = s[(s["method"] == "vanilla") & (s["model"] == "large")] if own else v
    for k in ("speedup", "speedup_lo", "speedup_hi"):
        row[f"alone_{k}"] = float(alone.iloc[0][k]) if own else 1.0
    row["alone_bleu"] = float(alone["score"].mean())
    bild = s[s["method"] == "bild"]
    for name, b in fastest(bild, bild["label"].str.contains("-exact"), row["base_bleu"], tol).items():
        row |= {f"{name}_{k}": b[k] for k in ("speedup", "speedup_lo", "speedup_hi")}
        row |= {f"{name}_fb": b["fallback"], f"{name}_bleu": b["score"]}
    return row


def table(sz: pd.DataFrame, q: pd.DataFrame, sp: pd.DataFrame) -> pd.DataFrame:
    """One row per quantization: bytes, BLEU and its change from bf16, the measured speeds against
    the bf16 vanilla large (speed), and the projections (module docstring): the large alone 1 / phi,
    BiLD over it (its measured speedup over that large, best / alone) / phi."""
    t = sz.merge(q, on="label").merge(sp, on="label", how="left")
    ref = t.loc[t["method"] == "none", "bleu"]
    t["delta_bleu"] = t["bleu"] - (ref.iloc[0] if len(ref) else float("nan"))
    t["alone_projected"] = 1 / t["phi"]
    if "best_speedup" in t:
        t["best_projected"] = t["best_speedup"] / t["alone_speedup"] / t["phi"]
    return t


GOALS = {"int8": 1.3, "int8_bild": 2.5}  # the benchmarks' bars (docs/quantization.md)


def block(root, folder: str = "figures/quantized", every: bool = True) -> str:
    """The notebook's report block: a row per quantization (bytes, BLEU, the measured speedups
    against the bf16 vanilla large, the projected ones), then the three benchmarks, from the
    committed quantized.csv and quantized_checks.json. every=False (README): the timed rows only."""
    from bildlib.analysis.tables import ci, md_table, read_csv, read_json, valid

    t, c = read_csv(root, f"{folder}/quantized.csv"), read_json(root, f"{folder}/quantized_checks.json")
    valid(t, ["label", "mb", "phi", "bleu", "delta_bleu", "alone_projected"])
    sweeps = c["sweeps"]
    rows = []
    for _, r in t.iterrows():
        timed = r["label"] in sweeps and pd.notna(r.get("lossless_speedup"))
        if not (timed or every):
            continue
        best = ci(r, "best_speedup", unit="×") if pd.notna(r.get("best_speedup")) else "none within"
        alone, lossless = (ci(r, f"{k}_speedup", unit="×") for k in ("alone", "lossless"))
        meas = [f"{r['alone_bleu']:.2f}", alone, lossless, best]
        proj = [f"{r['alone_projected']:.2f}×", f"{r['best_projected']:.2f}×" if timed else "–"]
        # the label bare: README's layout table is the rows that start with "| `"
        rows.append([str(r["label"]), f"{r['mb']:.1f}", f"{r['bleu']:.2f} ({r['delta_bleu']:+.2f})",
                     *(meas if timed else ["–"] + ["not timed"] * 3), *proj])  # fmt: skip
    s = next(iter(sweeps.values()))
    spreads = ", ".join(f"{k} {v['baseline spread %']:.1f} %" for k, v in sweeps.items())
    busy = sum(v["busy configurations"] for v in sweeps.values())
    line = (
        f"*`{folder}`: n = {s['n']} val sentences, {s['dtype']}, {s['engine']} engine, {s['device']} "
        f"({s.get('threads', 2)} threads); one interleaved sweep per timed large with the bf16 vanilla "
        f"large as its baseline, repeated (spread: {spreads}); {busy} configurations timed on a busy "
        f"machine; `{s['signature']}`.* **Measured**, against the bf16 vanilla large in the same run: "
        f"the quantized large alone (int8 on torch's CPU int8 kernel; the others run their dequantized "
        f"weights: no kernel on this CPU reads their codes), and BiLD over it with the aligned small "
        f"model, lossless = `distance='exact'`, best = Algorithm 1 within {c['tolerance']:g} BLEU of "
        f"the bf16 vanilla large (BLEU as timed: the lean engine's batch-1 output; BLEU: the batched "
        f"engine's, on the dequantized weights, whose bf16 rounding differs). **Projected**: a decoder "
        f"step's weight bytes, bf16 / quantized."
    )
    head = ["large", "MB", "BLEU (Δ bf16)", "BLEU as timed", "large alone, measured",
            "BiLD lossless, measured", "BiLD best, measured", "large alone, projected",
            "BiLD best, projected"]  # fmt: skip
    return "\n".join([line, "", md_table(head, rows), "", "Benchmarks: " + "; ".join(bars(t)) + "."])


def bars(t: pd.DataFrame) -> list[str]:
    """The three benchmarks of docs/quantization.md, each reached or not, from quantbench.table."""
    q, out = t.set_index("label"), []
    if "int8" in q.index and pd.notna(q.loc["int8"].get("lossless_speedup")):
        i8 = q.loc["int8"]
        d = i8["alone_bleu"] - i8["base_bleu"]  # both timed, in the same run
        ok = i8["alone_speedup"] >= GOALS["int8"] and d >= -0.3
        out.append(f"int8 alone ≥ {GOALS['int8']}× at ≤ 0.3 BLEU: {i8['alone_speedup']:.3f}× "
                   f"[{i8['alone_speedup_lo']:.3f}, {i8['alone_speedup_hi']:.3f}], Δ BLEU {d:+.2f} as timed, "
                   f"{'reached' if ok else 'not reached'}")  # fmt: skip
        if pd.notna(i8.get("best_speedup")):
            ok = i8["best_speedup"] >= GOALS["int8_bild"]
            out.append(f"BiLD over int8 ≥ {GOALS['int8_bild']}× within 0.5 BLEU: {i8['best_speedup']:.2f}× "
                       f"(α_FB {i8['best_fb']:g}), {'reached' if ok else 'not reached'}")  # fmt: skip
    if {"squeeze3", "rtn3"} <= set(q.index):
        sq, rt = q.loc["squeeze3", "delta_bleu"], q.loc["rtn3", "delta_bleu"]
        held = sq >= -1 and sq > rt
        text = (f"SqueezeLLM 3-bit within 1 BLEU where RTN 3-bit loses more: {sq:+.2f} against "
                f"{rt:+.2f}, {'holds' if held else 'does not hold'}")  # fmt: skip
        if "alone_bleu" in q and q.loc[["squeeze3", "rtn3"], "alone_bleu"].notna().all():  # both timed
            sq, rt = (q.loc[k, "alone_bleu"] - q.loc[k, "base_bleu"] for k in ("squeeze3", "rtn3"))
            held = sq >= -1 and sq > rt
            text += f" (as timed: {sq:+.2f} against {rt:+.2f}, {'holds' if held else 'does not hold'})"
        out.append(text)
    return out


def products_block(root, folder: str = "figures/quantized") -> str:
    """docs/quantization.md's table of one product per matrix (bench.int8bench): µs per call of the
    packed bf16 product, torch's CPU int8 kernel and torchao's, and int8's speedup over bf16."""
    from bildlib.analysis.tables import md_table, read_csv, read_json, valid

    t = read_csv(root, f"{folder}/int8_products.csv")
    c = read_json(root, f"{folder}/int8_products_checks.json")
    valid(t, ["matrix", "out", "in", "rows", "bf16_us", "int8_us", "int8_speedup"])
    ao = "torchao_us" in t
    us = ["bf16_us", "int8_us", *(["torchao_us"] if ao else [])]
    rows = [[r["matrix"], f"{r['out']}×{r['in']}", str(r["rows"]), *(f"{r[k]:.1f}" for k in us),
             f"{r['int8_speedup']:.2f}×"] for _, r in t.iterrows()]  # fmt: skip
    head = ["matrix", "out×in", "rows", "bf16 µs", "int8 µs", *(["torchao int8 µs"] if ao else []),
            "int8 over bf16"]  # fmt: skip
    line = (f"*`python -m bildlib.bench.int8bench` ({folder}/int8_products.csv): {c['device']}, "
            f"{c['threads']} threads, {c['machine']}, torchao {c['torchao']}, code `{c['code']}`; medians "
            f"of {c['rounds'] - 1} rounds of {c['block']} calls per product, the products alternating.*")
    return "\n".join([line, "", md_table(head, rows)])
