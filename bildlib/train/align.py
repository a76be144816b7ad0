"""Prediction alignment (paper §3.5.1): the calibration set, the large model's greedy output for
every training input, on which the aligned small model trains."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bildlib import data
from bildlib.analysis.evaluate import translate
from bildlib.models import load_model, locate
from bildlib.train.config import CALIBRATION, checkpoint_path


def calibrate(
    teacher: str,
    out: str | Path = CALIBRATION,
    n_train: int | None = None,
    batch_size: int = 64,
    device: str = "auto",
) -> Path:
    """The calibration set of prediction alignment: the teacher's greedy output for every training
    input, in order, cached at out (parquet: idx, output; the teacher's identity in its metadata)."""
    out = checkpoint_path(out)
    path = locate(teacher)
    ident = {"teacher": str(teacher), "n_train": n_train}
    weights = Path(path) / "model.safetensors"
    if weights.exists():
        ident["teacher_sha256"] = data.sha256(weights)
    if out.exists() and _calibration_meta(out) == ident:
        return out
    model, tok = load_model(path, device, "float32")  # the shipped calibration set was made in float32
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
