"""The numbers a model card reports (bildlib.reports.modelcard), measured here, one function per
kind of model. Each returns a plain dict: what the card's JSON holds and its template reads.

pair (measure_pair): the shipped Multi30k pair in one run: for each checkpoint the parameters,
size on disk, greedy BLEU on val and test_2016_flickr (sacrebleu, signature recorded) and the
training log; for the pair, in one process on 2 CPU threads at batch 1 with a KV cache, each
model's per-token decode latency and the large model's 10-token call, and the three conditions
the embedded default needs (quality gap, latency ratio, parallel-call cost).
ee (measure_ee): greedy BLEU on val of the full model and of every exit alone (the first i
decoder layers, the final norm and the shared head, as early-exit BiLD's small view runs them),
each one's decode time per token (batch 1, lean engine).
lm (measure_lm): the size, the perplexity of val as "de: <German> en: <English>" texts (windows
of 128 tokens every 64), greedy BLEU translating val from "de: <German> en:", time per token.
student (measure_student): parameters (each shared tensor once), BLEU, top-1 agreement with the
large model and the ECE of max p_S (train.agreement), the lean engine's one-token step in float32
and bf16 against the large model's (smallmodels.step_ms).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from bildlib import REPO_ROOT, data, repo_relative
from bildlib.analysis import metrics, perplexity
from bildlib.analysis.evaluate import evaluate, latency_of, latency_table, machine
from bildlib.decoding import vanilla
from bildlib.models import LM, load_model, locate

CHECKPOINTS = REPO_ROOT / "data" / "checkpoints"
PAIR = ("multi30k-small", "multi30k-large", "multi30k-small-aligned")
EE = ("multi30k-ee", "multi30k-calm")
LM_NAMES = ("multi30k-lm-small", "multi30k-lm-large", "multi30k-lm-student")  # student: train.causal.kd_loss
SIZE_BUDGET_MB = 60.0
PAIR_ROLES = {
    "multi30k-small": "the small model of the embedded default pair (baseline, trained on the references)",
    "multi30k-large": "the large model of the embedded default pair",
    "multi30k-small-aligned": (
        "the small model after prediction alignment (paper §3.5.1): trained on the large model's greedy "
        "outputs for the training inputs (`data/calibration/multi30k-large-train.parquet`), from the same "
        "initialisation (seed), recipe and number of steps as `multi30k-small` — the paper's fair "
        "comparison. The practical variant, continued from `multi30k-small`, is the preset "
        "`multi30k-small-aligned-continued` and is not shipped"
    ),
}
# the pair's train logs' keys the cards read (autocast: absent from logs before train.loop.use_bf16)
TRAIN_KEYS = ("command", "n_train", "steps_per_epoch", "wall_s", "best", "machine", "autocast")
CONFIG = ("d_model", "d_ff", "num_layers", "num_decoder_layers", "num_heads", "d_kv", "vocab_size")


def _weights(path: Path, make: str) -> None:
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no model.safetensors: `make {make}` trains it")


def measure_pair(folder: Path = CHECKPOINTS, names=PAIR, n: int | None = None, n_latency: int = 20,
                 threads: int = 2) -> dict:  # fmt: skip
    """Everything in the pair's cards, measured in this process; n: first n sentences of each
    split only; n_latency: val sentences timed."""
    paths = [folder / name for name in names]
    for p in paths:
        _weights(p, "models")
    lat = {Path(r["model"]).name: r for r in latency_table([str(p) for p in paths], n_latency, threads)}
    models = {}
    for name, p in zip(names, paths, strict=True):
        cfg = json.loads((p / "config.json").read_text())
        log = json.loads((p / "train_log.json").read_text())
        w = load_file(p / "model.safetensors")
        models[name] = {
            "params": sum(t.numel() for t in w.values()),
            "stored_dtype": str(next(iter(w.values())).dtype).removeprefix("torch."),
            "size_mb": round((p / "model.safetensors").stat().st_size / 1e6, 1),
            "config": {k: cfg[k] for k in CONFIG},
            "val": evaluate(p, "val", n), "test_2016_flickr": evaluate(p, "test_2016_flickr", n),
            "latency": lat[name],
            "train": {k: log.get(k) for k in TRAIN_KEYS} | {"epochs": len(log["epochs"]),
                                                             "config": log["config"]},
        }  # fmt: skip
    small, large = models["multi30k-small"], models["multi30k-large"]
    s_ms, l_ms = small["latency"]["per_token_ms"], large["latency"]["per_token_ms"]
    conditions = {
        "bleu_gap_val": round(large["val"]["bleu"] - small["val"]["bleu"], 2),  # needs >= 4
        "latency_ratio_small_over_large": round(s_ms / l_ms, 3),
        "large_call10_over_single": round(large["latency"]["call10_ms"] / l_ms, 2),
        "total_size_mb": round(sum(m["size_mb"] for m in models.values()), 1),
    }  # fmt: skip
    conditions["holds"] = {
        "bleu_gap >= 4": conditions["bleu_gap_val"] >= 4,
        "small/large latency <= 1/6": conditions["latency_ratio_small_over_large"] <= 1 / 6,
        "10-token call < 10 single calls": conditions["large_call10_over_single"] < 10,
        f"total size <= {SIZE_BUDGET_MB:.0f} MB": conditions["total_size_mb"] <= SIZE_BUDGET_MB,
    }
    return {"machine": machine(), "dtype": "float32", "models": models, "conditions": conditions}


def size_latency(threads: int = 2) -> list[dict]:
    """Per-token latency of random-init models of the SMALL and LARGE sizes: what chose them."""
    from bildlib.models import load_tokenizer
    from bildlib.train import LARGE, SMALL, TrainConfig, build_model, checkpoint_path

    tok = load_tokenizer(checkpoint_path(TrainConfig.tokenizer))
    sizes = {"SMALL": SMALL, "LARGE": LARGE}
    models = {k: LM(build_model(TrainConfig(out="-", model=v), tok), tok, k) for k, v in sizes.items()}
    rows = latency_of(models, threads=threads)
    for r in rows:
        r["params_m"] = round(sum(p.numel() for p in models[r["model"]].model.parameters()) / 1e6, 2)
    return rows


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


def _train(path: Path, keys: tuple[str, ...]) -> dict:
    log = json.loads((path / "train_log.json").read_text())
    return {k: log.get(k) for k in keys} | {"epochs": len(log["epochs"]), "per_epoch": log["epochs"]}


def _float32(folder: Path, name: str, threads: int, make: str):
    """(path, model, tokenizer) of <folder>/<name> in float32, on `threads` threads (as the older
    cards); a folder without weights says which make target trains it."""
    torch.set_num_threads(threads)
    path = folder / name
    _weights(path, make)
    return (path, *load_model(path, dtype="float32"))


def measure_ee(name: str, n: int | None = None, threads: int = 2, folder=CHECKPOINTS) -> dict:
    """Every exit of <folder>/<name>, greedy on val (n: the first n sentences only), in float32."""
    from bildlib.models.early_exit import exit_views

    path, model, tok = _float32(folder, name, threads, "models-ee")
    val = data.load("multi30k", "val", n)
    layers = model.config.num_decoder_layers
    exits = {i: greedy(exit_views(model, tok, name, i)[0], val) for i in range(1, layers)}
    exits[layers] = greedy(LM(model, tok, name, "lean"), val)
    train = _train(path, ("command", "wall_s", "best", "machine", "config", "autocast"))
    return {"name": name, "n_val": len(val), "exits": exits, "machine": machine(), "threads": threads,
            "train": train}  # fmt: skip


def measure_lm(name: str, n: int | None = None, threads: int = 2, folder=CHECKPOINTS) -> dict:
    """<folder>/<name> on val (n: the first n sentences only), in float32."""
    from bildlib.bench import table2
    from bildlib.experiments import presets
    from bildlib.train.causal import STRIDE, WINDOW

    path, model, tok = _float32(folder, name, threads, "models-lm")
    p = presets.get("multi30k-lm")
    val = data.load("multi30k", "val", n)
    ppl = perplexity.score(model, perplexity.stream(tok, table2.texts(p.name, "val", n)), WINDOW, STRIDE)
    gen = greedy(LM(model, tok, name, "lean"), val, p.max_new_tokens, p.prompt)
    c = model.config
    keys = ("command", "wall_s", "best", "machine", "config", "n_train", "n_chunks", "autocast")
    train = _train(path, keys)
    size = {"layers": c.n_layer, "d_model": c.n_embd, "heads": c.n_head, "d_ff": c.n_inner,
            "parameters": sum(t.numel() for t in model.parameters())}  # fmt: skip
    return {"name": name, "n_val": len(val), "size": size, "perplexity": round(ppl.perplexity, 3),
            "tokens": len(ppl.nll), "window": WINDOW, "stride": STRIDE, "greedy": gen,
            "machine": machine(), "threads": threads, "train": train}  # fmt: skip


def student_path() -> str:
    """The multi30k preset's student folder."""
    from bildlib.experiments import presets

    return presets.get("multi30k").model("student")


def measure_student(path: str, n: int | None = None, threads: int = 2, rounds: int = 20) -> dict:
    """Everything in the student's card; n: the first n sentences of each split only."""
    from bildlib.bench import smallmodels

    path = locate(path)
    _weights(Path(path), "models-student")
    profile, _ = smallmodels.agreements({"student": path}, n=n, bleu=False)  # BLEU: evaluate, below
    steps = smallmodels.step_ms({"student": path, "large": smallmodels.LARGE}, threads=threads, rounds=rounds)
    step = {f"{r.label}_{r.dtype}": round(r.step_ms, 3) for r in steps.itertuples()}
    log = json.loads((Path(path) / "train_log.json").read_text())
    return {"name": Path(path).name, "path": repo_relative(path), "machine": machine(), "threads": threads,
            "profile": profile.iloc[0].to_dict(), "step_ms": step,
            "val": evaluate(path, "val", n), "test_2016_flickr": evaluate(path, "test_2016_flickr", n),
            "train": {k: log.get(k) for k in ("command", "wall_s", "best", "machine", "config", "autocast")}
            | {"epochs": len(log["epochs"])}}  # fmt: skip
