"""Measure the shipped Multi30k pair in one run and write its model cards.

    python -m bildlib.reports.modelcard            # all three checkpoints; about 3 minutes on 2 CPU cores
    python -m bildlib.reports.modelcard --sizes    # latency of random-init models of the preset sizes

For each checkpoint: parameters, size on disk, greedy BLEU on val and test_2016_flickr
(sacrebleu, signature recorded), the training log's epochs, wall time and machine. For the
pair, in one process on 2 CPU threads at batch 1 with a KV cache: per-token decode latency of
each model and the large model's 10-token call, and the three conditions the embedded default
needs (quality gap, latency ratio, parallel-call cost). Results go to
`data/checkpoints/<name>/README.md` and `data/checkpoints/pair.json`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from safetensors.torch import load_file

from bildlib import REPO_ROOT
from bildlib.analysis.evaluate import evaluate, latency_of, latency_table, machine

CHECKPOINTS = REPO_ROOT / "data" / "checkpoints"
NAMES = ("multi30k-small", "multi30k-large", "multi30k-small-aligned")
SIZE_BUDGET_MB = 60.0


def measure(
    folder: Path = CHECKPOINTS, names=NAMES, n: int | None = None, n_latency: int = 20, threads: int = 2
) -> dict:
    """Everything in the cards, measured in this process; n: first n sentences of each split only;
    n_latency: val sentences timed."""
    paths = [folder / name for name in names]
    for p in paths:
        if not (p / "model.safetensors").is_file():
            raise FileNotFoundError(f"{p} holds no model.safetensors: train it first (make models)")
    lat = {Path(r["model"]).name: r for r in latency_table([str(p) for p in paths], n_latency, threads)}
    models = {}
    for name, p in zip(names, paths, strict=True):
        cfg = json.loads((p / "config.json").read_text())
        log = json.loads((p / "train_log.json").read_text())
        w = load_file(p / "model.safetensors")
        params, dtype = (
            sum(t.numel() for t in w.values()),
            str(next(iter(w.values())).dtype).removeprefix("torch."),
        )
        models[name] = {
            "params": params,
            "stored_dtype": dtype,
            "size_mb": round((p / "model.safetensors").stat().st_size / 1e6, 1),
            "config": {
                k: cfg[k]
                for k in (
                    "d_model",
                    "d_ff",
                    "num_layers",
                    "num_decoder_layers",
                    "num_heads",
                    "d_kv",
                    "vocab_size",
                )
            },
            "val": evaluate(p, "val", n),
            "test_2016_flickr": evaluate(p, "test_2016_flickr", n),
            "latency": lat[name],
            "train": {
                k: log.get(k) for k in ("command", "n_train", "steps_per_epoch", "wall_s", "best", "machine")
            }
            | {"epochs": len(log["epochs"]), "config": log["config"]},
        }
    small, large = models["multi30k-small"], models["multi30k-large"]
    conditions = {
        "bleu_gap_val": round(large["val"]["bleu"] - small["val"]["bleu"], 2),  # needs >= 4
        "latency_ratio_small_over_large": round(
            small["latency"]["per_token_ms"] / large["latency"]["per_token_ms"], 3
        ),
        "large_call10_over_single": round(
            large["latency"]["call10_ms"] / large["latency"]["per_token_ms"], 2
        ),
        "total_size_mb": round(sum(m["size_mb"] for m in models.values()), 1),
    }
    conditions["holds"] = {
        "bleu_gap >= 4": conditions["bleu_gap_val"] >= 4,
        "small/large latency <= 1/6": conditions["latency_ratio_small_over_large"] <= 1 / 6,
        "10-token call < 10 single calls": conditions["large_call10_over_single"] < 10,
        f"total size <= {SIZE_BUDGET_MB:.0f} MB": conditions["total_size_mb"] <= SIZE_BUDGET_MB,
    }
    return {"machine": machine(), "dtype": "float32", "models": models, "conditions": conditions}


def card(name: str, m: dict, pair: dict) -> str:
    t, c = m["train"], m["config"]
    cmd = f"python -m bildlib.train {name}"
    if name == "multi30k-small-aligned":
        cmd = "python -m bildlib.train calibrate data/checkpoints/multi30k-large && " + cmd
    mach = t["machine"]
    what = {
        "multi30k-small": "the small model of the embedded default pair (baseline, trained on the references)",
        "multi30k-large": "the large model of the embedded default pair",
        "multi30k-small-aligned": (
            "the small model after prediction alignment (paper §3.5.1): trained on the large model's greedy "
            "outputs for the training inputs (`data/calibration/multi30k-large-train.parquet`), from the same "
            "initialisation (seed), recipe and number of steps as `multi30k-small` — the paper's fair "
            "comparison. The practical variant, continued from `multi30k-small`, is the preset "
            "`multi30k-small-aligned-continued` and is not shipped"
        ),
    }[name]
    lat, dt = m["latency"], pair.get("dtype", "float32")  # cards measured before the default became auto ran in float32
    return f"""# {name}

{what[0].upper() + what[1:]}. German→English, Multi30k; T5 architecture trained from scratch
with the project's tokenizer (`data/checkpoints/multi30k-tokenizer`, 8,000 entries).
Loads with `AutoModelForSeq2SeqLM.from_pretrained` / `AutoTokenizer.from_pretrained`.

| | |
|---|---|
| parameters | {m["params"] / 1e6:.2f} M ({m["size_mb"]} MB on disk, stored as {m["stored_dtype"]}; `from_pretrained` loads it as float32; bildlib's default dtype runs it in {m["stored_dtype"]} on a CPU with native bf16, see README, *Which dtype*) |
| config | d_model {c["d_model"]}, d_ff {c["d_ff"]}, {c["num_layers"]} encoder + {c["num_decoder_layers"]} decoder layers, {c["num_heads"]} heads × d_kv {c["d_kv"]}, vocabulary {c["vocab_size"]}, tied embeddings |
| training | `{cmd}` ({t["epochs"]} epochs × {t["steps_per_epoch"]} steps of {t["config"]["batch_size"]} sentences, {t["config"]["optimizer"]}, lr {t["config"]["lr"]}, seed {t["config"]["seed"]}, bf16 autocast: {t["config"]["bf16"]}) |
| best epoch | {t["best"]["epoch"]} (greedy BLEU {t["best"]["val_bleu"]} on the first {t["config"]["n_val"]} val sentences) |
| wall time | {t["wall_s"] / 60:.1f} min on {mach["processor"]}, {mach["threads"]} threads, torch {mach["torch"]}, {mach["cuda"] or "no GPU"} |
| BLEU, val (1,014) | **{m["val"]["bleu"]:.2f}** (greedy, {dt}, HF `generate` at batch 64) |
| BLEU, test_2016_flickr (1,000) | **{m["test_2016_flickr"]["bleu"]:.2f}** (greedy, {dt}, HF `generate` at batch 64) |
| sacrebleu signature | `{m["val"]["signature"]}` |
| decode latency | {lat["per_token_ms"]:.2f} ms/token; one call over 10 new tokens {lat["call10_ms"]:.2f} ms ({dt}, batch 1, KV cache, {pair["machine"]["threads"]} CPU threads) |

Reproduce the BLEU: `python -m bildlib.analysis.evaluate data/checkpoints/{name} --split val` (and
`--split test_2016_flickr`). Re-measure everything in this card: `python -m bildlib.reports.modelcard`.
"""


def size_latency(threads: int = 2) -> list[dict]:
    """Per-token latency of random-init models of the SMALL and LARGE sizes: what chose them."""
    from bildlib.models import LM, load_tokenizer
    from bildlib.train import LARGE, SMALL, TrainConfig, build_model, checkpoint_path

    tok = load_tokenizer(checkpoint_path(TrainConfig.tokenizer))
    models = {
        k: LM(build_model(TrainConfig(out="-", model=v), tok), tok, k)
        for k, v in (("SMALL", SMALL), ("LARGE", LARGE))
    }
    rows = latency_of(models, threads=threads)
    for r in rows:
        r["params_m"] = round(sum(p.numel() for p in models[r["model"]].model.parameters()) / 1e6, 2)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", action="store_true", help="only time random-init models of the preset sizes")
    ap.add_argument("--render", action="store_true", help="rewrite the cards from pair.json, measuring nothing")
    args = ap.parse_args(argv)
    if args.sizes:
        print(json.dumps({"machine": machine(), "latency": size_latency()}, indent=1))
        return
    if args.render:
        pair = json.loads((CHECKPOINTS / "pair.json").read_text())
    else:
        pair = measure()
        (CHECKPOINTS / "pair.json").write_text(json.dumps(pair, indent=1) + "\n")
    for n, m in pair["models"].items():
        (CHECKPOINTS / n / "README.md").write_text(card(n, m, pair))
    print(json.dumps(pair["conditions"], indent=1))
    for n, m in pair["models"].items():
        print(
            f"{n}: val {m['val']['bleu']:.2f}, test2016 {m['test_2016_flickr']['bleu']:.2f}, "
            f"{m['latency']['per_token_ms']:.2f} ms/token, call10 {m['latency']['call10_ms']:.2f} ms"
        )


if __name__ == "__main__":
    main()
