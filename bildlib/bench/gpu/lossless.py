"""Lossless BiLD on a device: BiLD with distance="exact" (a small token stays only where it is the
large model's argmax) against vanilla greedy decoding with the large model, and BiLD at its default
thresholds beside them, on the first n Multi30k val sentences, for each dtype and engine (bild.csv).

One row per (dtype, engine, decoder): BLEU (sacrebleu, signature logged), the share of sentences
whose ids equal vanilla's in the same setting (lossless means 1.0) and the reference's (the HF
engine in float32), calls per sentence, and mean milliseconds per sentence. The decoders run
interleaved per sentence (their order rotates), CUDA synchronised around each; the first `warmup`
sentences are not timed. A setting that fails is a row with its error, and the next one runs.
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path

import pandas as pd
import torch

SETTINGS = (("float32", "hf"), ("float32", "lean"), ("bfloat16", "lean"), ("bfloat16", "hf"),
            ("float32", "static"), ("bfloat16", "static"))  # fmt: skip
DECODERS = ("vanilla", "bild_lossless", "bild_default")


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_setting(sources: list[list[int]], refs: list[str], dtype: str, engine: str, device, warmup: int):
    """Rows for one (dtype, engine): each decoder over every source, interleaved; plus their ids."""
    from bildlib import decoding as D
    from bildlib.analysis.metrics import bleu
    from bildlib.experiments.presets import PRESETS
    from bildlib.models import load_pair

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
    from bildlib.experiments.presets import PRESETS
    from bildlib.models import load_tokenizer
    from bildlib.plots import save_table

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
            save_table(pd.DataFrame(rows), "bild", out)
        shown = pd.DataFrame(rows).drop(columns=["signature"], errors="ignore")
        print(shown.to_string(index=False), flush=True)
    return pd.DataFrame(rows)
