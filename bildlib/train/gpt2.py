"""arXiv v1 Table 2's models as v1 made them: GPT-2 fine-tuned on WikiText-2 before perplexity was
measured (v1: "fine-tuned for 5 epochs"; it states nothing else). The rest is transformers'
`run_clm.py` recipe, its defaults where v1 is silent (FinetuneConfig), with v1's chunk length:

- the train split's texts as one stream, each followed by EOS (analysis.perplexity.stream, the
  stream the perplexity is taken on), cut into blocks of `block` tokens, the remainder dropped;
- AdamW at lr 5e-5, no weight decay, the rate falling linearly to 0, no warm-up; batches of 8
  blocks in a seeded new order each epoch; the loss is next-token cross-entropy over every token;
- after each epoch, the val split's perplexity over 512-token chunks (as make reproduce measures
  it); the best epoch's model is saved (save_pretrained, with the tokenizer) to `out`.

Resumable: after each epoch the model's, optimizer's and schedule's states and the log go to
<out>.resume/state.pt, and a second call with the same config goes on from the last finished
epoch; a finished run returns its log at once.

    python -m bildlib.train.gpt2 gpt2 --out build/gpt2-wikitext2/gpt2 --device cuda
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from bildlib import data
from bildlib.analysis import perplexity
from bildlib.decoding.common import check_count


@dataclass(frozen=True)
class FinetuneConfig:
    epochs: int = 5  # v1
    block: int = 512  # v1's chunks (run_clm.py's block_size is min(1024, the model's positions))
    lr: float = 5e-5  # run_clm.py (Trainer) defaults from here on
    batch: int = 8
    seed: int = 0
    max_blocks: int | None = None  # train on the first max_blocks blocks only (the dry run); None: all

    def __post_init__(self):
        for k in ("epochs", "block", "batch"):
            check_count(k, getattr(self, k))
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.max_blocks is not None:
            check_count("max_blocks", self.max_blocks)


def blocks(ids: list[int], block: int) -> torch.Tensor:
    """The stream cut into (N, block) blocks, the remainder dropped (run_clm.py's group_texts)."""
    n = len(ids) // block
    if n == 0:
        raise ValueError(f"the train stream has {len(ids)} tokens, fewer than one block of block={block}")
    return torch.tensor(ids[: n * block], dtype=torch.long).view(n, block)


def _load(model: str, device: torch.device):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bildlib.models.load import locate

    path = locate(model)  # a folder, a $BILD_MODELS mirror (the dry run) or a hub id
    tok = AutoTokenizer.from_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).to(device), tok


def _val_perplexity(m, ids: list[int], cfg: FinetuneConfig) -> float:
    """Over non-overlapping chunks of `block` tokens (window = stride), as make reproduce measures it."""
    m.eval()
    try:
        return perplexity.score(m, ids, cfg.block, cfg.block).perplexity
    finally:
        m.train()


def finetune(model: str, out: Path | str, cfg: FinetuneConfig = FinetuneConfig(),
             device: str = "auto") -> dict:  # fmt: skip
    """Fine-tunes `model` (a hub id such as gpt2 or gpt2-large, or a folder) on WikiText-2's train
    split into `out`; returns the log: per epoch its train loss and val perplexity, the best epoch."""
    from transformers import get_linear_schedule_with_warmup

    from bildlib.models.load import resolve_device
    from bildlib.train.loop import save_checkpoint

    out, dev = Path(out), resolve_device(device)
    resume = out.with_name(out.name + ".resume") / "state.pt"
    log_file = out / "finetune.json"
    if log_file.is_file() and (done := json.loads(log_file.read_text())).get("epochs_done") == cfg.epochs:
        return done
    m, tok = _load(model, dev)
    train_ids = perplexity.stream(tok, data.load("wikitext2", "train").texts)
    val_ids = perplexity.stream(tok, data.load("wikitext2", "val").texts)
    x = blocks(train_ids, cfg.block)[: cfg.max_blocks]
    steps = math.ceil(len(x) / cfg.batch)
    opt = torch.optim.AdamW(m.parameters(), lr=cfg.lr, weight_decay=0.0)
    sched = get_linear_schedule_with_warmup(opt, 0, steps * cfg.epochs)
    log = {"model": model, "config": dataclasses.asdict(cfg), "blocks": len(x), "epochs": [], "best": None}
    if resume.is_file():
        st = torch.load(resume, weights_only=False)
        if st["log"]["config"] != log["config"]:
            raise ValueError(f"{resume} was saved by a run with another config; delete it to start afresh")
        m.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        sched.load_state_dict(st["sched"])
        log = st["log"]
    m.train()
    for epoch in range(len(log["epochs"]) + 1, cfg.epochs + 1):
        t0, total = time.perf_counter(), 0.0
        torch.manual_seed(1000 * cfg.seed + epoch)  # dropout's draws: a resumed epoch is the same epoch
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(cfg.seed + epoch))
        for i in range(0, len(x), cfg.batch):
            b = x[order[i : i + cfg.batch]].to(dev)  # (B, block)
            loss = m(input_ids=b, labels=b).loss  # next-token cross-entropy over the block
            loss.backward()
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            total += float(loss) * len(b)
        ppl = _val_perplexity(m, val_ids, cfg)
        log["epochs"].append({"epoch": epoch, "train_loss": total / len(x), "val_perplexity": ppl,
                              "seconds": round(time.perf_counter() - t0, 1)})  # fmt: skip
        if log["best"] is None or ppl < log["epochs"][log["best"] - 1]["val_perplexity"]:
            log["best"] = epoch
            save_checkpoint(m, tok, out, "float32")
        with data.atomic_path(resume) as tmp:
            torch.save({"model": m.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                        "log": log}, tmp)  # fmt: skip
    log["epochs_done"] = cfg.epochs
    with data.atomic_path(log_file) as tmp:
        tmp.write_text(json.dumps(log, indent=1))
    shutil.rmtree(resume.parent, ignore_errors=True)
    return log


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.train.gpt2", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a hub id (gpt2, gpt2-large) or a folder")
    ap.add_argument("--out", type=Path, required=True, help="where the best epoch's model goes")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--epochs", type=int, default=FinetuneConfig.epochs)
    a = ap.parse_args(argv)
    log = finetune(a.model, a.out, FinetuneConfig(epochs=a.epochs), a.device)
    print(json.dumps({"best": log["best"], "val_perplexity": [e["val_perplexity"] for e in log["epochs"]]}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
