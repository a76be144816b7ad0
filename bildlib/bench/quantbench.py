"""The large model weight-quantized, and BiLD on top (notebooks/quantized.ipynb; docs/quantization.md).

Per quantization (bildlib.quant; `make quantized` builds the checkpoints):
- the weight bytes a kernel reads (codes, tables, sparse part; the embeddings and head in bf16),
  against the bf16 model's;
- greedy BLEU of the quantized large alone (batched, sacrebleu; analysis.evaluate);
- one interleaved sweep with it as the large model: its own vanilla decoding (the baseline,
  repeated), lossless BiLD (`distance="exact"`), and Algorithm 1 at each α_FB, alone and checking
  the sentence's end (verify_end_below), with the aligned small model. BiLD's speedups over that
  quantized large are measured.

What is projected, never measured here: the quantized large's own speed. The engines run the
dequantized weights (quant.model), as fast as bf16 ones, because this CPU has no kernel for the
non-uniform codes (the Triton kernel, kernels/triton_lut.py, is for CUDA). The projection is the
weights-read bound of a memory-bound step: time scales with the bytes a decoder step reads (its
linear layers and the output head), phi = those bytes / bf16's, so the quantized large alone is
1 / phi times faster and BiLD over it (BiLD's measured speedup) / phi times faster than the bf16
large. Columns say `projected`.
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
            verify_below: list[float] = (0.8,)):  # fmt: skip
    """BiLD with `small` at α_RB `rollback`: Algorithm 1 at each α_FB, the same checking the end of
    the sentence when a final small token had max p_S below each of verify_below (decoding.bild's
    verify_end_below, README's best rule within 0.5 BLEU), and lossless BiLD at lossless_fallback."""
    kw = {"model": small, "rollback": float(rollback)}
    return [X.Config("bild", fallback=float(fb), verify_end_below=v, **kw)
            for v in (None, *map(float, verify_below)) for fb in fallbacks] + [
        X.Config("bild", fallback=float(lossless_fallback), distance="exact", **kw)
    ]  # fmt: skip


def speed(label: str, df: pd.DataFrame, tol: float = 0.5) -> dict:
    """From one quantization's sweep: its vanilla ms per sentence and BLEU, BiLD's lossless speedup
    and its best within `tol` BLEU of that vanilla, each with its 95 % interval and α_FB."""
    s = summarize(df)
    v = vanilla_large(s)
    row = {"label": label, "vanilla_ms": 1e3 * s.attrs["baseline_latency_s"],
           "vanilla_bleu": float(v["score"].mean()), "spread_pct": s.attrs["baseline_spread_pct"],
           "busy": int(s["busy"].sum())}  # fmt: skip
    bild = s[s["method"] == "bild"]
    for name, b in fastest(bild, bild["label"].str.contains("-exact"), row["vanilla_bleu"], tol).items():
        row |= {f"{name}_{k}": b[k] for k in ("speedup", "speedup_lo", "speedup_hi")}
        row |= {f"{name}_fb": b["fallback"], f"{name}_bleu": b["score"]}
    return row


def table(sz: pd.DataFrame, q: pd.DataFrame, sp: pd.DataFrame) -> pd.DataFrame:
    """One row per quantization: bytes, BLEU and its change from bf16, then speeds against the bf16
    vanilla large: the large alone and BiLD over it, projected by the weights-read bound (module
    docstring) from BiLD's measured speedups."""
    t = sz.merge(q, on="label").merge(sp, on="label", how="left")
    ref = t.loc[t["method"] == "none", "bleu"]
    t["delta_bleu"] = t["bleu"] - (ref.iloc[0] if len(ref) else float("nan"))
    t["alone_projected"] = 1 / t["phi"]
    for name in ("lossless", "best"):
        if f"{name}_speedup" in t:
            t[f"{name}_projected"] = t[f"{name}_speedup"] / t["phi"]
    return t


GOALS = {"int8": 1.3, "int8_bild": 2.5}  # the benchmarks' bars (docs/quantization.md)


def block(root, folder: str = "figures/quantized", every: bool = True) -> str:
    """The notebook's report block: a row per quantization (bytes, BLEU, BiLD's measured speedups
    over it, the projected speedups against the bf16 vanilla large), then the three benchmarks, from
    the committed quantized.csv and quantized_checks.json. every=False (README): rows for the timed
    quantizations only."""
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
        meas = [ci(r, "lossless_speedup", unit="×"), best]
        proj = [f"{r['alone_projected']:.2f}×", ci(r, "best_projected", unit="×")]
        # the label bare: README's layout table is the rows that start with "| `"
        rows.append([str(r["label"]), f"{r['mb']:.1f}", f"{r['bleu']:.2f} ({r['delta_bleu']:+.2f})",
                     *(meas if timed else ["not timed", "not timed"]), *proj])  # fmt: skip
    s = next(iter(sweeps.values()))
    spreads = ", ".join(f"{k} {v['baseline spread %']:.1f} %" for k, v in sweeps.items())
    busy = sum(v["busy configurations"] for v in sweeps.values())
    line = (
        f"*`{folder}`: n = {s['n']} val sentences, {s['dtype']}, {s['engine']} engine, {s['device']} "
        f"({s.get('threads', 2)} threads); one interleaved sweep per timed large, its vanilla decoding "
        f"repeated as the baseline (spread: {spreads}); {busy} configurations timed on a busy machine; "
        f"`{s['signature']}`.* BiLD: the aligned small model, lossless = `distance='exact'`, best = "
        f"Algorithm 1 within {c['tolerance']:g} BLEU of that large's vanilla. **Projected** (not "
        f"measured: no kernel on this CPU reads the codes): a decoder step's weight bytes, bf16 / quantized."
    )
    head = ["large", "MB", "BLEU (Δ bf16)", "BiLD lossless, measured", "BiLD best, measured",
            "large alone, projected", "BiLD best, projected"]  # fmt: skip
    q = t.set_index("label")
    bars = []
    if "int8" in q.index:
        i8 = q.loc["int8"]
        bars.append(
            f"int8 alone ≥ {GOALS['int8']}× at ≤ 0.3 BLEU: not measured (no CPU int8 kernel in "
            f"the engine yet); projected {i8['alone_projected']:.2f}×, "
            f"Δ BLEU {i8['delta_bleu']:+.2f}"
        )
        if pd.notna(i8.get("best_projected")):
            bars.append(
                f"BiLD over int8 ≥ {GOALS['int8_bild']}×: projected {i8['best_projected']:.2f}× "
                f"(measured {i8['best_speedup']:.2f}× over int8 itself)"
            )
    if {"squeeze3", "rtn3"} <= set(q.index):
        sq, rt = q.loc["squeeze3", "delta_bleu"], q.loc["rtn3", "delta_bleu"]
        held = sq >= -1 and sq > rt
        bars.append(
            f"SqueezeLLM 3-bit within 1 BLEU where RTN 3-bit loses more: {sq:+.2f} against "
            f"{rt:+.2f}, {'holds' if held else 'does not hold'}"
        )
    return "\n".join([line, "", md_table(head, rows), "", "Benchmarks: " + "; ".join(bars) + "."])
