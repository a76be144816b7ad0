"""Measure the early-exit models (make models-ee) and write their cards.

    python -m bildlib.reports.modelcard_ee        # about 10 minutes on 2 CPU cores

For each of multi30k-ee and multi30k-calm: greedy BLEU on all of val (sacrebleu) of the full
model and of every exit alone (the first i decoder layers, the final norm and the shared head,
as early-exit BiLD's small view runs them), and each one's decode latency per token (batch 1,
lean engine, 2 CPU threads). The cards go to data/checkpoints/<name>/README.md beside the
weights and, since the weights are not committed, to data/checkpoints/cards/<name>.md.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from bildlib import data
from bildlib.analysis import metrics
from bildlib.analysis.evaluate import machine
from bildlib.decoding import vanilla
from bildlib.models import LM, load_model
from bildlib.models.early_exit import exit_views
from bildlib.reports import cards
from bildlib.reports.modelcard import CHECKPOINTS

NAMES = ("multi30k-ee", "multi30k-calm")


@torch.inference_mode()
def greedy(lm: LM, split: data.Split, max_new_tokens: int = 64, prompt=str) -> dict:
    """Greedy BLEU of one model (or view) over a split, and its decode time per output token.
    prompt: the text given for a source (a decoder-only pair's Preset.prompt)."""
    outs, seconds, tokens = [], 0.0, 0
    for src in split.sources:
        t0 = time.perf_counter()
        ids, _ = vanilla(lm, lm.encode(prompt(src)), max_new_tokens=max_new_tokens)
        seconds += time.perf_counter() - t0
        tokens += len(ids)
        outs.append(lm.decode(ids))
    score = metrics.bleu(outs, split.references)
    ms = round(1e3 * seconds / max(tokens, 1), 3)
    return {"bleu": round(score.value, 2), "signature": score.signature, "ms_per_token": ms}


def measure(name: str, n: int | None = None, threads: int = 2, folder=CHECKPOINTS) -> dict:
    """Every exit of <folder>/<name>, greedy on val (n: the first n sentences only)."""
    torch.set_num_threads(threads)
    path = folder / name
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no model.safetensors: `make models-ee` trains it")
    model, tok = load_model(path, dtype="float32")  # the card measures float32 (as the older cards)
    val = data.load("multi30k", "val", n)
    full = LM(model, tok, name, "lean")
    layers = model.config.num_decoder_layers
    exits = {i: greedy(exit_views(model, tok, name, i)[0], val) for i in range(1, layers)}
    exits[layers] = greedy(full, val)
    log = json.loads((path / "train_log.json").read_text())
    train = {k: log.get(k) for k in ("command", "wall_s", "best", "machine", "config")}
    train |= {"epochs": len(log["epochs"]), "per_epoch": log["epochs"]}
    return {"name": name, "n_val": len(val), "exits": exits, "machine": machine(), "threads": threads,
            "train": train}  # fmt: skip


def card(m: dict, other: dict | None = None) -> str:
    t, c = m["train"], m["train"]["config"]
    n = max(m["exits"])
    what = (
        f"L = ½(L_{c['exit_layer']} + L_{n})"
        if c["exits"] == "ee"
        else "L = Σ_i w_i L_i, w_i = i / Σ_j j (CALM's)"
    )
    rows = "\n".join(
        f"| {i}{' (full model)' if i == n else ''} | {e['bleu']:.2f} | {e['ms_per_token']:.2f} |"
        for i, e in sorted(m["exits"].items(), key=lambda kv: int(kv[0]))
    )
    match = ""
    if other is not None:
        a, b = m["exits"][n]["bleu"], other["exits"][max(other["exits"])]["bleu"]
        match = f"\nFull-model BLEU against {other['name']}: {a:.2f} vs {b:.2f} (difference {a - b:+.2f}).\n"
    mach = t["machine"]
    return f"""# {m["name"]}

The shipped `multi30k-large` fine-tuned with early exits: {what}, where L_i is the loss of decoder
layer i's output sent through the final layer norm and the shared (tied, d^-½-scaled) head.
Built, not shipped: `make models-ee` (docs/early-exit.md). Training: `{t["command"]}`,
{t["epochs"]} epochs, {c["optimizer"]} lr {c["lr"]}, {t["wall_s"] / 60:.1f} min on
{mach["processor"]}, {mach["threads"]} threads, {mach["cuda"] or "no GPU"}; best epoch
{t["best"]["epoch"]} (greedy BLEU {t["best"]["val_bleu"]} on the first {c["n_val"]} val sentences).

Greedy decoding of each exit alone on all of Multi30k val ({m["n_val"]} sentences), batch 1,
lean engine, {m["threads"]} CPU threads (`python -m bildlib.reports.modelcard_ee`):

| decoder layers | BLEU | ms per token |
|---|---|---|
{rows}
{match}
sacrebleu: `{m["exits"][n]["signature"]}`
"""


def write_card(name: str, text: str, m: dict, publish: bool = False) -> None:
    """A built model's card beside its weights and under build/cards/, compared with the
    committed card, which only publish replaces (reports.cards)."""
    cards.write_card(name, text, m, CHECKPOINTS / name, publish)


def main(argv: list[str] | None = None) -> None:
    publish = "--publish" in (sys.argv[1:] if argv is None else argv)  # replace the committed cards
    ms = {name: measure(name) for name in NAMES}
    for name, m in ms.items():
        write_card(name, card(m, ms[NAMES[0]] if name != NAMES[0] else None), m, publish)


if __name__ == "__main__":
    main()
