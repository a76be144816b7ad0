"""Training configurations: TrainConfig, the model sizes, and the presets of the shipped pair."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from bildlib import REPO_ROOT
from bildlib.data.tokenizer import DEFAULT_DIR as DEFAULT_TOKENIZER
from bildlib.train import distill, warmup
from bildlib.train.exits import EXIT_LOSSES

MAX_LEN = 128  # tokens, source and target; Multi30k's longest sentence has 60


@dataclass
class TrainConfig:
    out: str  # folder of the saved (best) checkpoint
    model: dict = field(default_factory=dict)  # T5Config (GPT2Config) fields, to train from scratch
    arch: str = "t5"  # "t5": encoder-decoder translation; "gpt2": a decoder-only LM (train.causal)
    init_from: str | None = None  # or: a checkpoint folder / hub name to fine-tune
    tokenizer: str = str(DEFAULT_TOKENIZER.relative_to(REPO_ROOT))
    targets: str | None = None  # calibration parquet: train on the teacher's outputs, not the references
    prefix: str = ""  # prepended to every source, e.g. "translate German to English: " for t5-small
    suffix: str = ""  # gpt2: appended to every source; the prompt is prefix + source + suffix
    n_train: int | None = None  # first n training pairs only
    n_val: int = 300  # val sentences scored with greedy BLEU after each epoch
    epochs: int = 10
    batch_size: int = 128  # sentences per step (gpt2: chunks of train.causal.WINDOW tokens)
    optimizer: str = "adamw"  # "adamw" | "adafactor" (the paper's)
    lr: float = 1e-3
    warmup_steps: int = 400
    weight_decay: float = 0.01
    clip: float = 1.0
    label_smoothing: float = 0.1
    seed: int = 0
    device: str = "auto"
    bf16: bool = True  # autocast matmuls to bf16 where the hardware has it (loop.use_bf16): about 2x faster
    save_dtype: str = "float32"  # "bfloat16" halves the files; config.json keeps float32, so loading upcasts
    exits: str = ""  # loss over exits (train.exits): "" last layer, "ee" (L_e + L_n) / 2, "calm" sum i L_i
    exit_layer: int = 1  # "ee": the exit layer e (1-based), the early-exit BiLD model's small view
    teacher: str | None = None  # a checkpoint folder / hub name to distil from (train.distill)
    kd_lambda: float = 0.5  # with a teacher: loss = (1 - kd_lambda) CE + kd_lambda T² KL(teacher ‖ student)
    kd_temperature: float = 1.0  # T, the softmax temperature of both distributions in the KL term
    teacher_topk: int = 0  # 0: the teacher runs in every epoch; k: its top k, cached once (train.topk)
    pet_warmup_epochs: int = 0  # with a teacher: the first epochs learn PET's four-class task (train.warmup)
    warmup_eps_correct: float = 0.5  # the warm-up's confidence threshold where the teacher is right
    warmup_eps_wrong: float = 0.5  # and where it is wrong

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
        if self.arch not in ("t5", "gpt2"):
            raise ValueError(f"arch must be 't5' or 'gpt2', got {self.arch!r}")
        if self.arch == "gpt2" and (self.init_from or self.exits or self.targets):
            raise ValueError(
                "arch 'gpt2' trains from scratch on the references: no init_from, exits or targets"
            )
        distill.check(self.kd_lambda, self.kd_temperature)
        warmup.check(self.warmup_eps_correct, self.warmup_eps_wrong)
        if not isinstance(self.pet_warmup_epochs, int) or not 0 <= self.pet_warmup_epochs < self.epochs:
            got = self.pet_warmup_epochs
            raise ValueError(f"pet_warmup_epochs must be an integer in [0, epochs), got {got!r}")
        if not isinstance(self.teacher_topk, int) or self.teacher_topk < 0:
            raise ValueError(f"teacher_topk must be an integer >= 0, got {self.teacher_topk!r}")
        if self.teacher_topk and not self.teacher:
            raise ValueError("teacher_topk caches a teacher's outputs: give teacher")
        if self.pet_warmup_epochs and not self.teacher:
            raise ValueError("pet_warmup_epochs: the warm-up task is labelled by a teacher; give teacher")
        if self.teacher and self.exits:
            raise ValueError("teacher: distillation trains a model without exits (exits '')")
        if self.arch == "gpt2" and (self.teacher_topk or self.pet_warmup_epochs):
            raise ValueError("arch 'gpt2' distils from its teacher in the loop: no teacher_topk or warm-up")
        if self.exits not in EXIT_LOSSES:
            raise ValueError(f"exits must be one of {EXIT_LOSSES}, got {self.exits!r}")
        if self.arch == "t5" and self.model.get("num_decoder_layers", 0) > self.model.get("num_layers", 6):
            # transformers sizes generate()'s T5 cache by the encoder's depth (num_hidden_layers)
            raise ValueError("model: num_decoder_layers > num_layers breaks generate() in transformers 5")
        if bool(self.model) == bool(self.init_from):
            raise ValueError("give exactly one of model (a config to train from scratch) and init_from")


# Sizes chosen for the latency headroom BiLD needs on 2 CPU threads (docs/data-and-models.md): per-token
# cost at batch 1 is mostly per-layer overhead, so the small model gets one decoder layer.
SMALL = dict(d_model=128, d_ff=512, num_layers=4, num_decoder_layers=1, num_heads=4, d_kv=32)
LARGE = dict(d_model=384, d_ff=1024, num_layers=6, num_decoder_layers=6, num_heads=6, d_kv=64)
CALIBRATION = "data/calibration/multi30k-large-train.parquet"
TEACHER = "data/checkpoints/multi30k-large"  # the students' teacher (train.distill)
# Adafactor with steps relative to each weight's scale: with AdamW these T5 models learned 3-4x
# slower (docs/data-and-models.md). All saved in bf16 so the three checkpoints fit the 60 MB budget.
_RECIPE = dict(optimizer="adafactor", lr=3e-2, warmup_steps=200, save_dtype="bfloat16")
_SMALL = dict(model=SMALL, epochs=4, batch_size=64, **_RECIPE)
_EXITS = dict(init_from="data/checkpoints/multi30k-large", epochs=3, batch_size=128, **_RECIPE)
_EXITS["lr"] = 1e-2  # a fine-tune: the continued-aligned preset's step size
# The decoder-only pair (docs/language-modelling.md): prompt-style translation texts
# "de: ... en: ..." (train.causal). Sized like the T5 pair for latency: the small one's step is
# about a sixth of the large one's on 2 CPU threads (two layers against eight). Not committed (the
# tree's 60 MB budget): `make models-lm` trains them.
LM_SMALL = dict(n_embd=128, n_layer=2, n_head=4, n_inner=512)
LM_LARGE = dict(n_embd=384, n_layer=8, n_head=6, n_inner=1024)
LM_TEACHER = "data/checkpoints/multi30k-lm-large"
_LM = dict(arch="gpt2", prefix="de: ", suffix=" en:", n_val=1014, batch_size=32, lr=1e-3, warmup_steps=200,
           label_smoothing=0.0, save_dtype="bfloat16")  # fmt: skip
# The candidate students of notebooks/small_models.ipynb and PET's ablations (notebooks/pet.ipynb),
# all distilled like multi30k-student-kd but from the teacher's top 32 computed once (train.topk).
# Built by `make models-candidates` (docs/data-and-models.md, Students); not committed.
_KD = dict(targets=CALIBRATION, teacher=TEACHER, kd_lambda=0.5, kd_temperature=1.0, teacher_topk=32,
           label_smoothing=0.0, batch_size=64, **_RECIPE)  # fmt: skip
PET_SHAPE = dict(SMALL, num_decoder_layers=4)  # PET's four-layer model (its Table 2), at the small's width
PET_FULL = dict(pet_pairs=[[0, 2], [1, 3]], pet_encoder_qk=True, pet_decoder_q=True)
_CANDIDATES = {
    "top32": dict(model=SMALL),  # multi30k-student-kd's run from the cache: what top 32 changes
    "dec2": dict(model=dict(SMALL, num_decoder_layers=2)),
    "w256": dict(model=dict(SMALL, d_model=256, d_ff=1024, d_kv=64)),
    "pet": dict(model=dict(PET_SHAPE, **PET_FULL), pet_warmup_epochs=1),
}
CANDIDATES = {f"multi30k-student-{k}": TrainConfig(out=f"data/checkpoints/multi30k-student-{k}",
                                                   **{**_KD, "epochs": 8, **kw})
              for k, kw in _CANDIDATES.items()}  # fmt: skip
# PET's ablations at this scale: layer pairs (its Table 2), the matrix pairs (Tables 3-4), and the
# warm-up (one epoch of it before the same four epochs of KD), each 4 epochs of KD like the small
_PAIRS = dict(pet_pairs=[[0, 2], [1, 3]])
_ABLATIONS = {
    "none": dict(model=PET_SHAPE),
    "pairs": dict(model=dict(PET_SHAPE, **_PAIRS)),
    "pairs-encqk": dict(model=dict(PET_SHAPE, **_PAIRS, pet_encoder_qk=True)),
    "pairs-decq": dict(model=dict(PET_SHAPE, **_PAIRS, pet_decoder_q=True)),
    "full": dict(model=dict(PET_SHAPE, **PET_FULL)),
    "full-warmup": dict(model=dict(PET_SHAPE, **PET_FULL), epochs=5, pet_warmup_epochs=1),
}
PET_ABLATIONS = {f"multi30k-pet-{k}": TrainConfig(out=f"data/checkpoints/multi30k-pet-{k}",
                                                  **{**_KD, "epochs": 4, **kw})
                 for k, kw in _ABLATIONS.items()}  # fmt: skip
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
    # a small model made for BiLD (docs/data-and-models.md, Students): today's small shape, distilled
    # from the large model on its greedy outputs (sequence-level KD in the CE term, word-level in the
    # KL term, at T = 1 so that max p_S estimates p_L's; the teacher's soft targets replace label
    # smoothing), trained twice as long as the paper's small: BiLD wants agreement with the large
    # model, not a quality gap. Built by `make models-student`.
    "multi30k-student-kd": TrainConfig(
        out="data/checkpoints/multi30k-student-kd", targets=CALIBRATION, teacher=TEACHER,
        kd_lambda=0.5, kd_temperature=1.0, **{**_SMALL, "epochs": 8, "label_smoothing": 0.0},
    ),  # fmt: skip
    **CANDIDATES,
    **PET_ABLATIONS,
    # early exit (paper 4.4; docs/early-exit.md): the shipped large fine-tuned with exits. Not committed (the
    # tracked tree must stay under 60 MB): `make models-ee` builds them (docs/early-exit.md)
    "multi30k-ee": TrainConfig(out="data/checkpoints/multi30k-ee", exits="ee", **_EXITS),
    "multi30k-calm": TrainConfig(out="data/checkpoints/multi30k-calm", exits="calm", **_EXITS),
    "multi30k-lm-large": TrainConfig(
        out="data/checkpoints/multi30k-lm-large", model=LM_LARGE, epochs=4, **_LM
    ),
    "multi30k-lm-small": TrainConfig(
        out="data/checkpoints/multi30k-lm-small", model=LM_SMALL, epochs=4, **_LM
    ),
    # the decoder-only pair's student (docs/language-modelling.md): the small shape distilled from the
    # large LM on the same packed texts, word-level KD with the teacher in the loop, twice as long
    "multi30k-lm-student": TrainConfig(
        out="data/checkpoints/multi30k-lm-student", model=LM_SMALL, epochs=8, teacher=LM_TEACHER,
        kd_lambda=0.5, kd_temperature=1.0, **_LM,
    ),  # fmt: skip
}


def checkpoint_path(p: str | Path) -> Path:
    """Relative paths are relative to the checkout, so commands work from any folder."""
    p = Path(p)
    return p if p.is_absolute() else REPO_ROOT / p


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
