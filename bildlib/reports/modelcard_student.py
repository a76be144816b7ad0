"""Measure the student (make models-student) and write its card.

    python -m bildlib.reports.modelcard_student                 # the multi30k preset's student
    python -m bildlib.reports.modelcard_student data/checkpoints/multi30k-student-dec2

What BiLD asks of a small model (docs/data-and-models.md, Students): parameters (each shared
tensor once), greedy BLEU on val and test_2016_flickr (sacrebleu), top-1 agreement with the large
model teacher-forced on its greedy val outputs and the ECE of max p_S (train.agreement), and the
lean engine's one-token step in float32 and bf16 against the large model's (smallmodels.step_ms).
The card goes to <checkpoint>/README.md and build/cards/<name>.md, with the numbers in .json
beside each, and is compared with the committed card (data/checkpoints/cards/), which only
--publish replaces (reports.cards).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bildlib import repo_relative
from bildlib.analysis.evaluate import evaluate, machine
from bildlib.bench import smallmodels
from bildlib.experiments import presets
from bildlib.models import locate
from bildlib.reports import cards


def measure(path: str, n: int | None = None, threads: int = 2, rounds: int = 20) -> dict:
    """Everything in the card; n: the first n sentences of each split only."""
    path = locate(path)
    if not (Path(path) / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no model.safetensors: `make models-student` trains it")
    profile, _ = smallmodels.agreements({"student": path}, n=n, bleu=False)  # BLEU: evaluate, below
    steps = smallmodels.step_ms({"student": path, "large": smallmodels.LARGE}, threads=threads, rounds=rounds)
    step = {f"{r.label}_{r.dtype}": round(r.step_ms, 3) for r in steps.itertuples()}
    log = json.loads((Path(path) / "train_log.json").read_text())
    return {"name": Path(path).name, "path": repo_relative(path), "machine": machine(), "threads": threads,
            "profile": profile.iloc[0].to_dict(), "step_ms": step,
            "val": evaluate(path, "val", n), "test_2016_flickr": evaluate(path, "test_2016_flickr", n),
            "train": {k: log.get(k) for k in ("command", "wall_s", "best", "machine", "config")}
            | {"epochs": len(log["epochs"])}}  # fmt: skip


def card(m: dict) -> str:
    p, t, s, c = m["profile"], m["train"], m["step_ms"], m["train"]["config"]
    ratio = {d: s[f"student_{d}"] / s[f"large_{d}"] for d in ("float32", "bfloat16")}
    pet = f"; PET sharing {p['pet']}" if p.get("pet") else ""
    return f"""# {m["name"]}

A small model made for BiLD (docs/data-and-models.md, Students): distilled from the shipped large
model on its greedy outputs, so that its argmax is the large model's and its max probability says
when. The third small model of the `multi30k` preset (model name `student`), beside the paper's
`small` and `aligned`. Built by `make models-student`, not committed (the tree's size budget).
German→English, Multi30k; loads with `AutoModelForSeq2SeqLM.from_pretrained` (import bildlib first
for a PET-shared one).

| | |
|---|---|
| parameters | {p["params_m"]:.2f} M (shared tensors once); d_model {p["d_model"]}, {p["encoder_layers"]} encoder + {p["decoder_layers"]} decoder layers{pet} |
| training | `{t["command"] or "python -m bildlib.train"}`: {t["epochs"]} epochs, teacher {c["teacher"]}, λ {c["kd_lambda"]}, T {c["kd_temperature"]}, teacher top-k {c.get("teacher_topk") or "all (in the loop)"}, warm-up epochs {c.get("pet_warmup_epochs", 0)} |
| best epoch | {t["best"]["epoch"]} (greedy BLEU {t["best"]["val_bleu"]} on the first {c["n_val"]} val sentences) |
| wall time | {t["wall_s"] / 60:.1f} min on {t["machine"]["processor"]}, {t["machine"]["threads"]} threads |
| BLEU, val (1,014) | **{m["val"]["bleu"]:.2f}** (greedy, float32) |
| BLEU, test_2016_flickr (1,000) | **{m["test_2016_flickr"]["bleu"]:.2f}** (greedy, float32) |
| agreement with the large model | **{100 * p["agreement"]:.1f} %** of {p["positions"]:,} val positions (teacher-forced on its greedy outputs); ECE {p["ece"]:.3f}, mean max p_S {p["confidence"]:.3f} |
| one-token step, lean engine | {s["student_float32"]:.3f} ms float32 ({ratio["float32"]:.3f} of the large model's), {s["student_bfloat16"]:.3f} ms bf16 ({ratio["bfloat16"]:.3f}); batch 1, {m["threads"]} threads, {m["machine"]["processor"]} |
| sacrebleu signature | `{m["val"]["signature"]}` |

Re-measure everything in this card: `python -m bildlib.reports.modelcard_student {m["path"]}`.
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path", nargs="?", default=None, help="the student's folder (default: the preset's)")
    ap.add_argument("--n", type=int, default=None, help="first n sentences of each split (default: all)")
    ap.add_argument("--publish", action="store_true",
                    help="replace the committed card (data/checkpoints/cards/) with this model's")  # fmt: skip
    a = ap.parse_args(argv)
    m = measure(a.path or presets.get("multi30k").model("student"), a.n)
    cards.write_card(m["name"], card(m), m, Path(locate(m["path"])), a.publish)


if __name__ == "__main__":
    main()
