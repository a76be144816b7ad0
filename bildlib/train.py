"""Train (or fine-tune) Hugging Face seq2seq models on Multi30k, and BiLD's prediction alignment.

    python -m bildlib.train multi30k-small                  # a preset from PRESETS
    python -m bildlib.train multi30k-large --device cuda
    python -m bildlib.train calibrate data/checkpoints/multi30k-large   # large greedy outputs on train
    python -m bildlib.train multi30k-small-aligned         # small trained on those outputs

Each epoch: length-bucketed batches, AdamW or Adafactor with warm-up and linear decay, gradient
clipping; then greedy BLEU (sacrebleu) on the first `n_val` val sentences. The best epoch is
saved as a complete HF checkpoint in `out` (safetensors, config, generation config, tokenizer)
with `train_log.json`; the state after every epoch goes to `<out>.resume/`, from which an
interrupted run continues and ends with the same weights as an uninterrupted one (CPU).
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import AutoModelForSeq2SeqLM, T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor, get_linear_schedule_with_warmup

from bildlib import REPO_ROOT, data, metrics
from bildlib.evaluate import machine, translate
from bildlib.models import check_vocab, load_model, load_tokenizer, locate, resolve_device
from bildlib.tokenizer import DEFAULT_DIR as DEFAULT_TOKENIZER

MAX_LEN = 128  # tokens, source and target; Multi30k's longest sentence has 60


@dataclass
class TrainConfig:
    out: str  # folder of the saved (best) checkpoint
    model: dict = field(default_factory=dict)  # T5Config fields, to train from scratch
    init_from: str | None = None  # or: a checkpoint folder / hub name to fine-tune
    tokenizer: str = str(DEFAULT_TOKENIZER.relative_to(REPO_ROOT))
    targets: str | None = None  # calibration parquet: train on the teacher's outputs, not the references
    prefix: str = ""  # prepended to every source, e.g. "translate German to English: " for t5-small
    n_train: int | None = None  # first n training pairs only
    n_val: int = 300  # val sentences scored with greedy BLEU after each epoch
    epochs: int = 10
    batch_size: int = 128  # sentences per step, so every target set gets the same number of steps
    optimizer: str = "adamw"  # "adamw" | "adafactor" (the paper's)
    lr: float = 1e-3
    warmup_steps: int = 400
    weight_decay: float = 0.01
    clip: float = 1.0
    label_smoothing: float = 0.1
    seed: int = 0
    device: str = "auto"
    bf16: bool = True  # autocast matmuls to bf16 (about 2x faster on CPUs with AVX512-BF16, and on GPUs)
    save_dtype: str = "float32"  # "bfloat16" halves the files; config.json keeps float32, so loading upcasts

    def validate(self) -> None:
        for name in ("epochs", "batch_size", "n_val"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.n_train is not None and self.n_train < 1:
            raise ValueError(f"n_train must be >= 1 or None, got {self.n_train}")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.optimizer not in ("adamw", "adafactor"):
            raise ValueError(f"optimizer must be 'adamw' or 'adafactor', got {self.optimizer!r}")
        if self.save_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"save_dtype must be 'float32' or 'bfloat16', got {self.save_dtype!r}")
        if self.model.get("num_decoder_layers", 0) > self.model.get("num_layers", 6):
            # transformers sizes generate()'s T5 cache by the encoder's depth (num_hidden_layers)
            raise ValueError("model: num_decoder_layers > num_layers breaks generate() in transformers 5")
        if bool(self.model) == bool(self.init_from):
            raise ValueError("give exactly one of model (a config to train from scratch) and init_from")


# Sizes chosen for the latency headroom BiLD needs on 2 CPU threads (README, "Model pair"): per-token
# cost at batch 1 is mostly per-layer overhead, so the small model gets one decoder layer.
SMALL = dict(d_model=128, d_ff=512, num_layers=4, num_decoder_layers=1, num_heads=4, d_kv=32)
LARGE = dict(d_model=384, d_ff=1024, num_layers=6, num_decoder_layers=6, num_heads=6, d_kv=64)
CALIBRATION = "data/calibration/multi30k-large-train.parquet"
# Adafactor with steps relative to each weight's scale: with AdamW these T5 models learned 3-4x
# slower (README, "Model pair"). All saved in bf16 so the three checkpoints fit the 60 MB budget.
_RECIPE = dict(optimizer="adafactor", lr=3e-2, warmup_steps=200, save_dtype="bfloat16")
_SMALL = dict(model=SMALL, epochs=4, batch_size=64, **_RECIPE)
PRESETS = {
    "multi30k-small": TrainConfig(out="data/checkpoints/multi30k-small", **_SMALL),
    "multi30k-large": TrainConfig(
        out="data/checkpoints/multi30k-large", model=LARGE, epochs=6, batch_size=128, **_RECIPE
    ),
    # prediction alignment, the paper's fair comparison: same init (seed), recipe and steps as the small
    "multi30k-small-aligned": TrainConfig(
        out="data/checkpoints/multi30k-small-aligned", targets=CALIBRATION, **_SMALL
    ),
    # the practical variant: continue from the trained small model
    "multi30k-small-aligned-continued": TrainConfig(
        out="data/checkpoints/multi30k-small-aligned-continued",
        init_from="data/checkpoints/multi30k-small",
        targets=CALIBRATION,
        **{**_SMALL, "model": {}, "epochs": 4, "lr": 1e-2},
    ),
}


def _path(p: str | Path) -> Path:
    """Relative paths are relative to the checkout, so commands work from any folder."""
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p


# --------------------------------------------------------------------------- data


def training_pairs(cfg: TrainConfig) -> list[tuple[str, str]]:
    """(source, target) pairs: Multi30k train, with the calibration outputs as targets if given."""
    pairs = data.load_multi30k("train").pairs
    if cfg.n_train:
        pairs = pairs[: cfg.n_train]
    if cfg.targets:
        outputs = read_calibration(_path(cfg.targets))
        if len(outputs) != len(pairs):
            raise ValueError(
                f"targets {cfg.targets} has {len(outputs)} outputs but training uses {len(pairs)} inputs"
            )
        pairs = [(src, out) for (src, _), out in zip(pairs, outputs, strict=True)]
    if not pairs:
        raise ValueError("the training set is empty")
    return pairs


def encode(tok, pairs: list[tuple[str, str]], prefix: str = "") -> tuple[list[list[int]], list[list[int]]]:
    src = tok([prefix + s for s, _ in pairs], truncation=True, max_length=MAX_LEN).input_ids
    tgt = tok([t for _, t in pairs], truncation=True, max_length=MAX_LEN).input_ids
    return src, tgt


def batches(src: list[list[int]], tgt: list[list[int]], batch_size: int, seed: int) -> list[list[int]]:
    """Index batches of similar lengths (little padding), in a seeded random order."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.rand(len(src), generator=g).tolist()  # random order among equal lengths
    order = sorted(range(len(src)), key=lambda i: len(src[i]) + len(tgt[i]) + noise[i])
    chunks = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    return [chunks[i] for i in torch.randperm(len(chunks), generator=g).tolist()]


def collate(src, tgt, idx, device) -> dict:
    def pad(seqs, value):
        n = max(len(s) for s in seqs)
        return torch.tensor([s + [value] * (n - len(s)) for s in seqs], device=device)

    input_ids = pad([src[i] for i in idx], 0)
    return {
        "input_ids": input_ids,
        "attention_mask": (input_ids != 0).long(),
        "labels": pad([tgt[i] for i in idx], -100),
    }


# --------------------------------------------------------------------------- model


def build_model(cfg: TrainConfig, tok):
    """The model to train: a fresh T5 (seeded init) or a loaded checkpoint."""
    torch.manual_seed(cfg.seed)
    if cfg.init_from:
        try:
            model = AutoModelForSeq2SeqLM.from_pretrained(locate(cfg.init_from), dtype=torch.float32)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(f"init_from: cannot load model {cfg.init_from!r}: {e}") from e
    else:
        model = T5ForConditionalGeneration(
            T5Config(
                vocab_size=len(tok),
                pad_token_id=tok.pad_token_id,
                eos_token_id=tok.eos_token_id,
                decoder_start_token_id=tok.pad_token_id,
                feed_forward_proj="relu",
                tie_word_embeddings=True,
                **cfg.model,
            )
        )
    check_vocab(tok, model.config, cfg.init_from or "model")
    g = model.generation_config
    g.decoder_start_token_id, g.eos_token_id, g.pad_token_id = (
        model.config.decoder_start_token_id,
        tok.eos_token_id,
        tok.pad_token_id,
    )
    g.max_new_tokens, g.num_beams, g.do_sample = MAX_LEN, 1, False
    return model


def save_checkpoint(model, tok, out: Path, dtype: str) -> None:
    """A complete HF checkpoint in out, written beside it first and moved in file by file."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        m = copy.deepcopy(model).cpu()
        if dtype == "bfloat16":
            m = m.to(torch.bfloat16)
        m.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        cfg = json.loads((Path(tmp) / "config.json").read_text())
        cfg["dtype"] = "float32"  # weights may be stored in bf16; from_pretrained then upcasts
        (Path(tmp) / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
        for f in Path(tmp).iterdir():
            f.chmod(0o644)
            os.replace(f, out / f.name)


def _atomic_write(path: Path, text: str) -> None:
    with data.atomic_path(path) as tmp:
        tmp.write_text(text)


# --------------------------------------------------------------------------- training


def train(cfg: TrainConfig, progress: bool = True, command: str | None = None) -> dict:
    """Train per cfg (resuming from <out>.resume/ if it holds a state of the same cfg); returns the
    log. command: the command line to record (main() passes it as a user would type it)."""
    cfg.validate()
    device = resolve_device(cfg.device)
    out = _path(cfg.out)
    resume = out.with_name(out.name + ".resume") / "state.pt"
    tok = load_tokenizer(cfg.init_from or _path(cfg.tokenizer))
    pairs = training_pairs(cfg)
    val = data.load_multi30k("val").head(cfg.n_val)
    src, tgt = encode(tok, pairs, cfg.prefix)
    model = build_model(cfg, tok).to(device)

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98), eps=1e-9)
    else:
        # steps relative to each weight's RMS (as in T5's own training): T5 initialises embeddings
        # with std 1 but attention weights near 0.01, so one absolute step size fits neither
        opt = Adafactor(groups, lr=cfg.lr, scale_parameter=True, relative_step=False, warmup_init=False)
    steps_per_epoch = -(-len(pairs) // cfg.batch_size)
    sched = get_linear_schedule_with_warmup(opt, cfg.warmup_steps, cfg.epochs * steps_per_epoch)

    log = {
        "config": dataclasses.asdict(cfg),
        "command": command,
        "machine": machine(),
        "n_train": len(pairs),
        "steps_per_epoch": steps_per_epoch,
        "epochs": [],
        "best": None,
    }
    if resume.exists():
        state = torch.load(resume, weights_only=False)
        # fields added to TrainConfig after the state was saved count as their defaults; the
        # device may change (a CPU run can go on on a GPU)
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
        saved = {k: state["config"].get(k, defaults[k]) for k in defaults} | {"device": cfg.device}
        if saved != dataclasses.asdict(cfg):
            raise ValueError(f"{resume} was saved by a run with another config; delete it to start afresh")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["rng"])
        log = state["log"]
    out.mkdir(parents=True, exist_ok=True)

    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=cfg.bf16)
    for epoch in range(len(log["epochs"]) + 1, cfg.epochs + 1):
        t0, total, count = time.time(), 0.0, 0
        model.train()
        bar = tqdm(
            batches(src, tgt, cfg.batch_size, cfg.seed * 1000 + epoch),
            disable=not progress,
            desc=f"{out.name} epoch {epoch}/{cfg.epochs}",
        )
        for idx in bar:
            b = collate(src, tgt, idx, device)
            with torch.autocast(**autocast):
                logits = model(
                    input_ids=b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"]
                ).logits
            loss = F.cross_entropy(
                logits.float().flatten(0, 1),
                b["labels"].flatten(),
                ignore_index=-100,
                label_smoothing=cfg.label_smoothing,
            )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            total, count = total + loss.item(), count + 1
            bar.set_postfix(loss=f"{total / count:.3f}")
        model.eval()
        score = metrics.bleu(translate(model, tok, val.sources, cfg.prefix), val.references)
        row = {
            "epoch": epoch,
            "train_loss": round(total / count, 4),
            "val_bleu": round(score.value, 2),
            "lr": sched.get_last_lr()[0],
            "wall_s": round(time.time() - t0, 1),
        }
        log["epochs"].append(row)
        log["signature"] = score.signature
        if log["best"] is None or row["val_bleu"] > log["best"]["val_bleu"]:
            log["best"] = row
            save_checkpoint(model, tok, out, cfg.save_dtype)
        log["wall_s"] = round(sum(r["wall_s"] for r in log["epochs"]), 1)
        _atomic_write(out / "train_log.json", json.dumps(log, indent=1) + "\n")
        state = {
            "config": dataclasses.asdict(cfg),
            "model": model.state_dict(),
            "opt": opt.state_dict(),
            "sched": sched.state_dict(),
            "rng": torch.get_rng_state(),
            "log": log,
        }
        with data.atomic_path(resume) as tmp:
            torch.save(state, tmp)
        print(json.dumps(row), flush=True)
    return log


# --------------------------------------------------------------------------- alignment


def calibrate(
    teacher: str,
    out: str | Path = CALIBRATION,
    n_train: int | None = None,
    batch_size: int = 64,
    device: str = "auto",
) -> Path:
    """The calibration set of prediction alignment: the teacher's greedy output for every training
    input, in order, cached at out (parquet: idx, output; the teacher's identity in its metadata)."""
    out = _path(out)
    path = locate(teacher)
    ident = {"teacher": str(teacher), "n_train": n_train}
    weights = Path(path) / "model.safetensors"
    if weights.exists():
        ident["teacher_sha256"] = data.sha256(weights)
    if out.exists() and _calibration_meta(out) == ident:
        return out
    model, tok = load_model(path, device)
    pairs = data.load_multi30k("train").pairs[: n_train or None]
    outputs = translate(model, tok, [s for s, _ in pairs], batch_size=batch_size, progress=True)
    df = pd.DataFrame({"idx": range(len(outputs)), "output": outputs})
    df.attrs["bildlib"] = ident
    with data.atomic_path(out) as tmp:
        df.to_parquet(tmp, index=False)
    return out


def _calibration_meta(path: Path) -> dict | None:
    try:
        return pd.read_parquet(path).attrs.get("bildlib")
    except Exception:  # unreadable or foreign file: recompute
        return None


def read_calibration(path: Path) -> list[str]:
    if not path.exists():
        raise FileNotFoundError(
            f"targets: calibration file {path} does not exist (run `bildlib.train calibrate`)"
        )
    df = pd.read_parquet(path)
    if list(df["idx"]) != list(range(len(df))):
        raise ValueError(f"targets: {path} does not hold exactly one output per training input, in order")
    return list(df["output"])


# --------------------------------------------------------------------------- command line


def override(cfg: TrainConfig, item: str) -> TrainConfig:
    """cfg with one field set from "field=value" (JSON values; bare words are strings)."""
    name, sep, value = item.partition("=")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    if not sep or name not in fields:
        raise ValueError(f"--set takes FIELD=VALUE with FIELD one of {sorted(fields)}, got {item!r}")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return dataclasses.replace(cfg, **{name: parsed})


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", help=f"a preset ({', '.join(PRESETS)}) or 'calibrate'")
    ap.add_argument("teacher", nargs="?", help="calibrate: the teacher checkpoint")
    ap.add_argument("--out", help="output folder (preset) or file (calibrate)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--n-train", type=int)
    ap.add_argument("--fresh", action="store_true", help="delete the resume state and start over")
    ap.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="override TrainConfig fields, e.g. --set optimizer=adamw lr=2e-3",
    )
    args = ap.parse_args(argv)
    if args.what == "calibrate":
        if not args.teacher:
            ap.error("calibrate needs a teacher checkpoint")
        print(calibrate(args.teacher, args.out or CALIBRATION, args.n_train, device=args.device))
        return
    if args.what not in PRESETS:
        ap.error(f"unknown preset {args.what!r}; choose from {', '.join(PRESETS)} or 'calibrate'")
    cfg = dataclasses.replace(PRESETS[args.what], device=args.device)
    for k in ("out", "epochs", "n_train"):
        if getattr(args, k) is not None:
            setattr(cfg, k, getattr(args, k))
    for item in args.set:
        cfg = override(cfg, item)
    if args.fresh:
        shutil.rmtree(_path(cfg.out).with_name(_path(cfg.out).name + ".resume"), ignore_errors=True)
    log = train(cfg, command=shlex.join(["python", "-m", "bildlib.train", *argv]))
    print(json.dumps({"best": log["best"], "wall_s": log["wall_s"]}))


if __name__ == "__main__":
    main()
