"""Load a seq2seq checkpoint, translate with greedy search, score with BLEU, time decoding.

python -m bildlib.analysis.evaluate data/checkpoints/multi30k-small --split val
python -m bildlib.analysis.evaluate data/checkpoints/multi30k-small data/checkpoints/multi30k-large --latency
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from bildlib import data, repo_relative
from bildlib.analysis import metrics
from bildlib.models import LM, load_model


@torch.inference_mode()
def greedy_ids(model, tok, sources: list[str], batch_size: int = 64, max_new_tokens: int = 128,
               progress: bool = False) -> list[list[int]]:  # fmt: skip
    """Greedy output ids for sources, up to and including EOS (no start token), batched by length
    (the order of sources is kept)."""
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    out: list[list[int]] = [[] for _ in sources]
    batches = range(0, len(order), batch_size)
    for b in tqdm(batches, desc="translate", disable=not progress):
        idx = order[b : b + batch_size]
        enc = tok([sources[i] for i in idx], return_tensors="pt", padding=True).to(model.device)
        gen = model.generate(**enc, num_beams=1, do_sample=False, max_new_tokens=max_new_tokens)
        for i, row in zip(idx, gen[:, 1:].tolist(), strict=True):  # drop the decoder start token
            out[i] = row[: row.index(tok.eos_token_id) + 1] if tok.eos_token_id in row else row
    return out


def translate(
    model,
    tok,
    sources: list[str],
    prefix: str = "",
    batch_size: int = 64,
    max_new_tokens: int = 128,
    progress: bool = False,
) -> list[str]:
    """Greedy outputs for sources, batched by length (the order of sources is kept)."""
    ids = greedy_ids(model, tok, [prefix + s for s in sources], batch_size, max_new_tokens, progress)
    return tok.batch_decode(ids, skip_special_tokens=True)


def evaluate(
    path: str | Path,
    split: str = "val",
    n: int | None = None,
    device: str = "cpu",
    batch_size: int = 64,
    dtype: str = "float32",
) -> dict:
    """Greedy BLEU of a checkpoint on a Multi30k split, in `dtype` (float32: the model cards' and
    training's; models.resolve_dtype for the others)."""
    model, tok = load_model(path, device, dtype)
    s = data.load("multi30k", split, n)
    hyps = translate(model, tok, s.sources, s.task.prefix, batch_size)
    score = metrics.bleu(hyps, s.references)
    return {
        "model": repo_relative(path),
        "split": split,
        "n": len(s),
        "bleu": round(score.value, 2),
        "signature": score.signature,
        "batch_size": batch_size,
        "dtype": str(model.dtype).removeprefix("torch."),
    }


@torch.inference_mode()
def decode_latency(lm: LM, sources: list[str], n_tokens: int = 32, repeats: int = 3) -> dict:
    """Batch-1 decoding cost through the LM adapter the decoders use (KV cache): median seconds
    of one single-token call, and of one call over 10 new tokens (what BiLD's large model does),
    over sources and repeats; the first source is a warm-up and is not counted, and so is each
    source's first call (it also runs the encoder)."""
    single, parallel = [], []
    for r in range(repeats):
        for j, src in enumerate(sources):
            y = lm.start(lm.encode(src))
            times = []
            for _ in range(n_tokens):  # forced to n_tokens: EOS is not honoured, so every call is timed
                t = time.perf_counter()
                y = int(lm.forward([y])[-1].argmax())  # the host sync ends the call on any device
                times.append(time.perf_counter() - t)
            lm.crop(len(lm.ids) - 10)
            t = time.perf_counter()
            lm.forward(torch.randint(3, 100, (10,)).tolist())
            if lm.device.type == "cuda":
                torch.cuda.synchronize()
            if r > 0 or j > 0:
                single += times[1:]
                parallel.append(time.perf_counter() - t)
    return {"per_token_s": statistics.median(single), "call10_s": statistics.median(parallel)}


def device_name(device: torch.device) -> str:
    """What runs the model calls: the GPU's name, or the CPU's model name (from /proc/cpuinfo
    on Linux, else what platform knows)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def worker(device: torch.device) -> dict:
    """The process computing a result row: {"worker": "host:pid", "device_name": ...}."""
    return {"worker": f"{socket.gethostname()}:{os.getpid()}", "device_name": device_name(device)}


def machine() -> dict:
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }


def latency_table(
    paths: list[str], n_sources: int = 20, threads: int = 2, dtype: str = "float32"
) -> list[dict]:
    """decode_latency of several checkpoints in one process (see latency_of), in `dtype`."""
    models = {repo_relative(p): LM.from_pretrained(p, dtype=dtype) for p in paths}
    return latency_of(models, n_sources, threads)


def latency_of(models: dict, n_sources: int = 20, threads: int = 2) -> list[dict]:
    """decode_latency of several {name: LM} in one process on the first n_sources
    val sentences, three rounds interleaved so that drift hits all alike; medians."""
    torch.set_num_threads(threads)
    sources = data.load("multi30k", "val", n_sources).sources
    rows = {name: [] for name in models}
    for _ in range(3):
        for name, lm in models.items():
            rows[name].append(decode_latency(lm, sources, repeats=1))
    return [
        {
            "model": name,
            "per_token_ms": 1e3 * statistics.median(x["per_token_s"] for x in rows[name]),
            "call10_ms": 1e3 * statistics.median(x["call10_s"] for x in rows[name]),
        }
        for name in models
    ]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", help="checkpoint folders or hub names")
    ap.add_argument("--split", default="val", choices=data.MULTI30K_SPLITS)
    ap.add_argument("-n", type=int, default=None, help="first n examples only")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--latency", action="store_true", help="also time batch-1 decoding (2 CPU threads)")
    ap.add_argument("--dtype", default="float32", help="float32 (the cards'), default, auto or bfloat16")
    args = ap.parse_args(argv)
    for p in args.models:
        print(json.dumps(evaluate(p, args.split, args.n, args.device, dtype=args.dtype)))
    if args.latency:
        lat = latency_table(args.models, dtype=args.dtype)
        print(json.dumps({"machine": machine(), "latency": lat}, indent=1))


if __name__ == "__main__":
    main()
