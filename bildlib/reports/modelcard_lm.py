"""Measure the decoder-only pair (make models-lm) and write its cards.

    python -m bildlib.reports.modelcard_lm        # a few minutes on 2 CPU cores
    python -m bildlib.reports.modelcard_lm multi30k-lm-small   # one card (its partner measured too)

For multi30k-lm-small, multi30k-lm-large and the student multi30k-lm-student: the size, the
training run (train_log.json), the perplexity of all of Multi30k val as "de: <German> en:
<English>" texts (bildlib.analysis.perplexity, windows of 128 tokens every 64), greedy BLEU of
translating all of val from the prompt "de: <German> en:" (sacrebleu), and the decode time per
token (batch 1, lean engine, 2 CPU threads), all in float32 like the T5 pair's cards. The cards
go beside the weights and, since the weights are not committed, to
data/checkpoints/cards/<name>.md.
"""

from __future__ import annotations

import json
import sys

import torch

from bildlib import data
from bildlib.analysis import perplexity
from bildlib.analysis.evaluate import machine
from bildlib.bench import table2
from bildlib.experiments import presets
from bildlib.models import LM, load_model
from bildlib.reports.modelcard import CHECKPOINTS
from bildlib.reports.modelcard_ee import greedy, write_card
from bildlib.train.causal import STRIDE, WINDOW

NAMES = ("multi30k-lm-small", "multi30k-lm-large", "multi30k-lm-student")  # student: train.causal.kd_loss
PRESET = "multi30k-lm"


def measure(name: str, n: int | None = None, threads: int = 2, folder=CHECKPOINTS) -> dict:
    """<folder>/<name> on val (n: the first n sentences only), in float32."""
    torch.set_num_threads(threads)
    path = folder / name
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no model.safetensors: `make models-lm` trains it")
    model, tok = load_model(path, dtype="float32")
    p = presets.get(PRESET)
    val = data.load("multi30k", "val", n)
    texts = table2.texts(PRESET, "val", n)
    ppl = perplexity.score(model, perplexity.stream(tok, texts), WINDOW, STRIDE)
    gen = greedy(LM(model, tok, name, "lean"), val, p.max_new_tokens, p.prompt)
    c = model.config
    log = json.loads((path / "train_log.json").read_text())
    train = {k: log.get(k) for k in ("command", "wall_s", "best", "machine", "config", "n_train", "n_chunks")}
    train |= {"epochs": len(log["epochs"]), "per_epoch": log["epochs"]}
    size = {"layers": c.n_layer, "d_model": c.n_embd, "heads": c.n_head, "d_ff": c.n_inner,
            "parameters": sum(t.numel() for t in model.parameters())}  # fmt: skip
    return {"name": name, "n_val": len(val), "size": size, "perplexity": round(ppl.perplexity, 3),
            "tokens": len(ppl.nll), "window": WINDOW, "stride": STRIDE, "greedy": gen,
            "machine": machine(), "threads": threads, "train": train}  # fmt: skip


def _distilled(c: dict) -> str:
    """The card's line on distillation, for the student (train.causal.kd_loss)."""
    if not c.get("teacher"):
        return ""
    return (f"\nDistilled from `{c['teacher']}` on the same texts: (1 - λ) CE + λ T² KL, "
            f"λ {c['kd_lambda']}, T {c['kd_temperature']}, the teacher in the loop.")


def card(m: dict, other: dict) -> str:
    t, c, z = m["train"], m["train"]["config"], m["size"]
    mach = t["machine"]
    g, og = m["greedy"], other["greedy"]
    ratio = max(g["ms_per_token"], og["ms_per_token"]) / min(g["ms_per_token"], og["ms_per_token"])
    return f"""# {m["name"]}

A GPT-2-style decoder-only model of Multi30k De→En written as texts `de: <German> en: <English></s>`
(bildlib.train.causal): {z["layers"]} layers, d_model {z["d_model"]}, {z["heads"]} heads, d_ff {z["d_ff"]},
{z["parameters"] / 1e6:.1f} M parameters, the project's 8,000-piece tokenizer without its EOS
post-processor. Built, not shipped: `make models-lm` (docs/language-modelling.md).

Training: `{t["command"]}`, {t["epochs"]} epochs over the {t["n_train"]:,} training pairs
packed into {t["n_chunks"]:,} chunks of 128 tokens, {c["batch_size"]} chunks per step, {c["optimizer"]}
lr {c["lr"]}, bf16 autocast, {t["wall_s"] / 60:.1f} min on {mach["processor"]}, {mach["threads"]}
threads, {mach["cuda"] or "no GPU"}; best epoch {t["best"]["epoch"]} (val perplexity {t["best"]["val_ppl"]}).{_distilled(c)}

Measured by `python -m bildlib.reports.modelcard_lm` in float32 on all of Multi30k val ({m["n_val"]} sentences),
{m["threads"]} CPU threads:

| | this model | {other["name"]} |
|---|---|---|
| perplexity ({m["tokens"]} tokens, windows of {m["window"]} every {m["stride"]}) | {m["perplexity"]:.2f} | {other["perplexity"]:.2f} |
| greedy BLEU from `de: <German> en:` | {g["bleu"]:.2f} | {og["bleu"]:.2f} |
| ms per generated token (batch 1, lean engine) | {g["ms_per_token"]:.2f} | {og["ms_per_token"]:.2f} |

Per-token latency, large over small: {ratio:.1f}×.

sacrebleu: `{g["signature"]}`
"""  # noqa: E501


def partner(name: str) -> str:
    """The model a card compares against: each small model beside the large, the large beside the small."""
    return NAMES[0] if name == NAMES[1] else NAMES[1]


def main(argv: list[str] | None = None) -> None:
    """[--publish] [NAME ...]: the cards of the named models (default all three), each measured
    with its partner; --publish replaces the committed cards."""
    args = sys.argv[1:] if argv is None else argv
    publish = "--publish" in args
    names = [a for a in args if a != "--publish"] or list(NAMES)
    if bad := [n for n in names if n not in NAMES]:
        raise SystemExit(f"modelcard_lm: no model {bad[0]!r}; the names are {', '.join(NAMES)}")
    ms = {n: measure(n) for n in dict.fromkeys(names + [partner(n) for n in names])}
    for name in names:
        write_card(name, card(ms[name], ms[partner(name)]), ms[name], publish)


if __name__ == "__main__":
    main()
