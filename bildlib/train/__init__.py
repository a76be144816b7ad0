"""Train (or fine-tune) Hugging Face seq2seq models on Multi30k, and BiLD's prediction alignment.

    python -m bildlib.train multi30k-small                  # a preset from PRESETS
    python -m bildlib.train multi30k-large --device cuda
    python -m bildlib.train calibrate data/checkpoints/multi30k-large   # large greedy outputs on train
    python -m bildlib.train multi30k-small-aligned         # small trained on those outputs
    python -m bildlib.train multi30k-student-kd            # distilled from the large (train.distill)
    python -m bildlib.train.agreement data/checkpoints/multi30k-student-kd   # agreement, ECE on val

Each epoch: length-bucketed batches, AdamW or Adafactor with warm-up and linear decay, gradient
clipping; then greedy BLEU (sacrebleu) on the first `n_val` val sentences. The best epoch is
saved as a complete HF checkpoint in `out` (safetensors, config, generation config, tokenizer)
with `train_log.json`; the state after every epoch goes to `<out>.resume/`, from which an
interrupted run continues and ends with the same weights as an uninterrupted one (CPU).
"""

from bildlib import data
from bildlib.analysis import metrics
from bildlib.train.align import calibrate, read_calibration
from bildlib.train.batching import batches, collate, encode
from bildlib.train.config import (
    CALIBRATION,
    LARGE,
    MAX_LEN,
    PRESETS,
    SMALL,
    TrainConfig,
    checkpoint_path,
    override,
)
from bildlib.train.loop import build_model, save_checkpoint, train, training_pairs

__all__ = [
    "CALIBRATION", "LARGE", "MAX_LEN", "PRESETS", "SMALL", "TrainConfig", "checkpoint_path", "batches",
    "build_model", "calibrate", "collate", "data", "encode", "metrics", "override",
    "read_calibration", "save_checkpoint", "train", "training_pairs",
]  # fmt: skip
