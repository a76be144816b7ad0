"""python -m bildlib.train: train a preset, or build the calibration set (see bildlib.train)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import shutil
import sys

from bildlib.train import __doc__ as DOC
from bildlib.train.align import calibrate
from bildlib.train.config import CALIBRATION, PRESETS, checkpoint_path, override
from bildlib.train.loop import train


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(
        prog="python -m bildlib.train", description=DOC, formatter_class=argparse.RawDescriptionHelpFormatter
    )
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
        out = checkpoint_path(cfg.out)
        shutil.rmtree(out.with_name(out.name + ".resume"), ignore_errors=True)
    log = train(cfg, command=shlex.join(["python", "-m", "bildlib.train", *argv]))
    print(json.dumps({"best": log["best"], "wall_s": log["wall_s"]}))
