"""The training loop: batches of similar length, the model to train, checkpoints, resume."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import safetensors.torch
import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, T5Config, T5ForConditionalGeneration
from transformers.optimization import Adafactor, get_linear_schedule_with_warmup

from bildlib import data
from bildlib.analysis import metrics
from bildlib.analysis.evaluate import machine, translate
from bildlib.data import artifacts, shipped
from bildlib.models import check_vocab, load_tokenizer, locate, resolve_device
from bildlib.models.load import native_bf16
from bildlib.models.pet import PetConfig, PetT5
from bildlib.train import causal, distill, topk, warmup
from bildlib.train.align import read_calibration
from bildlib.train.batching import batches, collate, encode  # noqa: F401 (encode: re-exported)
from bildlib.train.config import MAX_LEN, TrainConfig, checkpoint_path
from bildlib.train.exits import exit_weights, multi_exit_loss


def training_pairs(cfg: TrainConfig) -> list[tuple[str, str]]:
    """(source, target) pairs: Multi30k train, with the calibration outputs as targets if given."""
    pairs = data.load_multi30k("train").pairs
    if cfg.n_train:
        pairs = pairs[: cfg.n_train]
    if cfg.targets:
        outputs = read_calibration(checkpoint_path(cfg.targets))
        if len(outputs) != len(pairs):
            raise ValueError(
                f"targets {cfg.targets} has {len(outputs)} outputs but training uses {len(pairs)} inputs"
            )
        pairs = [(src, out) for (src, _), out in zip(pairs, outputs, strict=True)]
    if not pairs:
        raise ValueError("the training set is empty")
    return pairs


def build_model(cfg: TrainConfig, tok):
    """The model to train: a fresh T5 or GPT-2 (seeded init) or a loaded checkpoint."""
    torch.manual_seed(cfg.seed)
    if cfg.arch == "gpt2":
        model = causal.build(cfg.model, tok)
    elif cfg.init_from:
        try:
            model = AutoModelForSeq2SeqLM.from_pretrained(locate(cfg.init_from), dtype=torch.float32)
        except (OSError, ValueError) as e:
            raise FileNotFoundError(f"init_from: cannot load model {cfg.init_from!r}: {e}") from e
    else:
        pet = any(k.startswith("pet_") for k in cfg.model)  # PET's parameter-shared student (models.pet)
        model = (PetT5 if pet else T5ForConditionalGeneration)(
            (PetConfig if pet else T5Config)(
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
        getattr(model.config, "decoder_start_token_id", None),
        tok.eos_token_id,
        tok.pad_token_id,
    )
    g.max_new_tokens, g.num_beams, g.do_sample = MAX_LEN, 1, False
    return model


def load_teacher(name: str, tok, device, causal_lm: bool = False) -> torch.nn.Module:
    """The frozen teacher of a distillation run, in float32 (autocast runs its products in bf16);
    causal_lm: a decoder-only teacher (arch "gpt2")."""
    auto = AutoModelForCausalLM if causal_lm else AutoModelForSeq2SeqLM
    try:
        teacher = auto.from_pretrained(locate(name), dtype=torch.float32)
    except (OSError, ValueError) as e:
        raise FileNotFoundError(f"teacher: cannot load model {name!r}: {e}") from e
    check_vocab(tok, teacher.config, f"teacher {name}")
    return teacher.to(device).eval().requires_grad_(False)


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


CARD = ("README.md", "card.json")  # what a model card build adds beside the weights (reports.modelcard)


def verified(out: Path, resume: Path) -> None:
    """Reuse a checkpoint folder an earlier run left only while its files are as that run sealed
    them (data.artifacts), or, from before runs were sealed, while its weights load (then sealed).
    Otherwise say which file and why, and remove it and its resume state: the run starts over."""
    if not out.is_dir() or not any(out.iterdir()):
        return
    why = artifacts.check(out, besides=CARD)
    if why and not (out / artifacts.MANIFEST).exists():
        for f in sorted(out.glob("*.safetensors")):
            try:
                safetensors.torch.load_file(f)
            except Exception as e:  # noqa: BLE001 -- a damaged file: rebuilt below, the reason said
                why = f"{f} does not load ({type(e).__name__}: {e})"
                break
        else:
            artifacts.seal(out, besides=CARD)
            print(f"{out.name}: sealed as found (its weights load; it was built before runs were sealed)")
            return
    if why:
        print(f"{out.name}: {why}; training it again from the start")
        shutil.rmtree(out)
        shutil.rmtree(resume.parent, ignore_errors=True)


def _atomic_write(path: Path, text: str) -> None:
    with data.atomic_path(path) as tmp:
        tmp.write_text(text)


def use_bf16(cfg: TrainConfig, device: torch.device) -> bool:
    """cfg.bf16 where the device multiplies bf16 in hardware: a GPU, or a CPU with AVX512-BF16 or
    AMX (models.load.native_bf16). Elsewhere autocast's bf16 is emulated: on an AVX2-only AMD EPYC
    a 4096 x 384 by 384 x 1536 product took 373 ms in it against 56 in float32, and a training
    step of the decoder-only large model 107 s, so training there runs in float32."""
    return cfg.bf16 and (device.type != "cpu" or native_bf16())


def train(cfg: TrainConfig, progress: bool = True, command: str | None = None) -> dict:
    """Train per cfg (resuming from <out>.resume/ if it holds a state of the same cfg); returns the
    log. command: the command line to record (main() passes it as a user would type it)."""
    cfg.validate()
    device = resolve_device(cfg.device)
    out = checkpoint_path(cfg.out)
    resume = out.with_name(out.name + ".resume") / "state.pt"
    verified(out, resume)
    tok = load_tokenizer(cfg.init_from or checkpoint_path(cfg.tokenizer))
    lm = cfg.arch == "gpt2"  # a decoder-only LM (train.causal): texts, not (source, target)
    tok = causal.lm_tokenizer(tok) if lm else tok
    pairs = training_pairs(cfg)
    val = data.load_multi30k("val").head(cfg.n_val)
    if lm:  # the texts packed into chunks, shuffled anew each epoch (train.causal.pack)
        texts = causal.encode(tok, pairs, cfg.prefix, cfg.suffix)
        src = causal.pack(texts, cfg.seed)
        tgt = [[] for _ in src]
    else:
        src, tgt = encode(tok, pairs, cfg.prefix)
    model = build_model(cfg, tok).to(device)
    teacher = load_teacher(cfg.teacher, tok, device, lm) if cfg.teacher else None
    soft = None  # the teacher's cached top k (train.topk), read instead of running the teacher
    bf16 = use_bf16(cfg, device)
    if teacher is not None and cfg.teacher_topk:
        soft = topk.load_or_compute(str(locate(cfg.teacher)), teacher, src, tgt, cfg.teacher_topk, bf16,
                                    progress=progress)  # fmt: skip
        teacher = None

    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if cfg.optimizer == "adamw":
        opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.98), eps=1e-9)
    else:
        # steps relative to each weight's RMS (as in T5's own training): T5 initialises embeddings
        # with std 1 but attention weights near 0.01, so one absolute step size fits neither
        opt = Adafactor(groups, lr=cfg.lr, scale_parameter=True, relative_step=False, warmup_init=False)
    steps_per_epoch = -(-len(src) // cfg.batch_size)  # gpt2: the chunks' count is the same each epoch
    sched = get_linear_schedule_with_warmup(opt, cfg.warmup_steps, cfg.epochs * steps_per_epoch)

    log = {
        "config": dataclasses.asdict(cfg),
        "command": command,
        "machine": machine(),
        "autocast": "bfloat16" if bf16 else "float32",  # use_bf16: cfg.bf16 where the hardware has it
        "n_train": len(pairs),
        "n_chunks": len(src) if lm else None,
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

    layers = getattr(model.config, "num_decoder_layers", None) or model.config.num_hidden_layers  # gpt2
    weights = exit_weights(cfg.exits, layers, cfg.exit_layer)  # {layer: w}
    autocast = dict(device_type=device.type, dtype=torch.bfloat16, enabled=bf16)
    for epoch in range(len(log["epochs"]) + 1, cfg.epochs + 1):
        t0, total, count = time.time(), 0.0, 0
        if lm:
            src = causal.pack(texts, cfg.seed * 1000 + epoch)
        model.train()
        bar = tqdm(
            batches(src, tgt, cfg.batch_size, cfg.seed * 1000 + epoch),
            disable=not progress,
            desc=f"{out.name} epoch {epoch}/{cfg.epochs}",
        )
        for idx in bar:
            with torch.autocast(**autocast):  # the cross-entropies are taken in fp32
                if lm:  # teacher: word-level KD on the same chunks (train.causal.kd_loss)
                    b = causal.collate(src, idx, tok.pad_token_id, device)
                    kd = (cfg.kd_lambda, cfg.kd_temperature, cfg.label_smoothing)
                    loss = (causal.loss(model, b, cfg.label_smoothing) if teacher is None
                            else causal.kd_loss(model, teacher, b, *kd))  # fmt: skip
                elif teacher is not None or soft is not None:  # (1 - λ) CE + λ T² KL (train.distill)
                    batch = collate(src, tgt, idx, device)
                    if soft is not None:
                        t_logits = soft.dense(idx, batch["labels"].shape).to(device)  # (B, n, V) log p
                    else:
                        with torch.no_grad():
                            t_logits = teacher(**batch).logits  # (B, n, V), teacher-forced on the targets
                    s_logits = model(**batch).logits
                    if epoch <= cfg.pet_warmup_epochs:  # PET's four-class task first (train.warmup)
                        loss = warmup.loss(s_logits, t_logits, batch["labels"], cfg.warmup_eps_correct,
                                           cfg.warmup_eps_wrong)  # fmt: skip
                    else:
                        loss = distill.kd_loss(s_logits, t_logits, batch["labels"], cfg.kd_lambda,
                                               cfg.kd_temperature, cfg.label_smoothing)  # fmt: skip
                else:
                    loss = multi_exit_loss(
                        model, collate(src, tgt, idx, device), weights, cfg.label_smoothing
                    )
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            total, count = total + loss.item(), count + 1
            bar.set_postfix(loss=f"{total / count:.3f}")
        model.eval()
        row = {"epoch": epoch, "train_loss": round(total / count, 4)}
        if lm:  # the best epoch has the lowest val perplexity
            row["val_ppl"] = round(causal.val_perplexity(model, tok, val.pairs, cfg.prefix, cfg.suffix), 3)
            better = log["best"] is None or row["val_ppl"] < log["best"]["val_ppl"]
        else:  # the highest val BLEU
            score = metrics.bleu(translate(model, tok, val.sources, cfg.prefix), val.references)
            row["val_bleu"] = round(score.value, 2)
            log["signature"] = score.signature
            better = log["best"] is None or row["val_bleu"] > log["best"]["val_bleu"]
        row |= {"lr": sched.get_last_lr()[0], "wall_s": round(time.time() - t0, 1)}
        log["epochs"].append(row)
        if better:
            log["best"] = row
            save_checkpoint(model, tok, out, cfg.save_dtype)
        log["wall_s"] = round(sum(r["wall_s"] for r in log["epochs"]), 1)
        _atomic_write(out / "train_log.json", json.dumps(log, indent=1) + "\n")
        artifacts.seal(out, besides=CARD)  # what a later run reuses (verified)
        shipped.record(out)  # a shipped folder retrained: its sums follow (data.shipped)
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
