"""`make quantized`: the shipped large model quantized every way notebooks/quantized.ipynb compares,
into data/checkpoints/quant/<label>/ (git-ignored: about 46 MB each, the dequantized weights in the
base's bf16, plus the compact form; model.py). The Fisher information (fisher.py) is computed once,
on N calibration pairs, into data/checkpoints/quant/fisher.safetensors. A label whose folder is
complete for this base, calibration and format (VERSION) is not built again, so an interrupted
build resumes.

    python -m bildlib.quant.build --labels int8 rtn4 rtn3 squeeze3 squeeze3-s0.45%
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from bildlib import REPO_ROOT, data, repo_relative
from bildlib.data import artifacts
from bildlib.experiments.cache import model_hash
from bildlib.models import load_model
from bildlib.models.load import locate, stored_dtype
from bildlib.quant import model as QM
from bildlib.quant.config import parse
from bildlib.quant.fisher import calibration_pairs, fisher

LABELS = ["int8", "rtn4", "rtn3", "kmeans4", "kmeans3", "squeeze4", "squeeze3", "squeeze4-s0.45%",
          "squeeze3-s0.45%"]  # fmt: skip
BASE = "data/checkpoints/multi30k-large"
OUT = "data/checkpoints/quant"


def folder(out: Path, label: str) -> Path:
    """Where a label's checkpoint goes ('%' spelt 'pct' in the folder's name)."""
    return Path(out) / label.replace("%", "pct")


def fisher_of(base: str, base_hash: str, out: Path, n: int) -> dict:
    """The base's Fisher information on n calibration pairs, computed once (keyed by the base's hash)."""
    f, key = out / "fisher.safetensors", f"{base_hash}:{n}"
    if f.exists():
        from safetensors import safe_open

        with safe_open(str(f), "pt") as h:
            if (h.metadata() or {}).get("key") == key:
                return load_file(str(f))
    model, tok = load_model(base, dtype="float32")
    t0 = time.perf_counter()
    fi = fisher(model, tok, calibration_pairs(n), QM.quantizable(model))
    print(f"fisher: {n} calibration pairs, {time.perf_counter() - t0:.0f} s")
    with data.atomic_path(f) as tmp:
        save_file({k: v.contiguous() for k, v in fi.items()}, str(tmp), metadata={"key": key})
    return fi


# Each method's checkpoint format; one built in another is built again. int8 2: its scale rounded
# up to a bf16, the dtype the CPU int8 kernel takes it in (quant.uniform.int8).
VERSION = {"int8": 2}


def build(labels: list[str], base: str = BASE, out: str | Path = OUT, n_calib: int = 256) -> list[Path]:
    out = Path(out) if Path(out).is_absolute() else REPO_ROOT / out
    cfgs = [parse(lb) for lb in labels]  # every label checked before any work
    path = locate(base)
    base_hash = model_hash(Path(path))
    dtype = stored_dtype(path) or torch.bfloat16
    needs_fisher = any(c.method == "squeeze" and c.fisher for c in cfgs)
    fi = fisher_of(base, base_hash, out, n_calib) if needs_fisher else None
    ident = {"base": repo_relative(path), "base_sha256": base_hash, "n_calibration": n_calib}
    done = []
    for cfg in cfgs:
        dest = folder(out, cfg.label)
        if cfg.method == "none":
            continue
        same = ident | {"version": VERSION.get(cfg.method, 1)}
        built = QM.is_quantized(dest) and {k: QM.read_meta(dest).get(k, 1 if k == "version" else None)
                                           for k in same} == same  # fmt: skip
        if built and artifacts.reusable(dest, cfg.label):  # and its files as they were written
            print(f"{cfg.label}: built already ({repo_relative(dest)})")
            done.append(dest)
            continue
        model, tok = load_model(base, dtype="float32")
        before = QM.nbytes(model, {})
        t0 = time.perf_counter()
        q = QM.quantize(model, cfg, fi)
        secs = time.perf_counter() - t0
        size = QM.nbytes(model, q)
        meta = {**same, "seconds": round(secs, 1), "bytes": size, "bf16_bytes": before,
                "outliers_nnz": sum(w.nnz for w in q.values())}  # fmt: skip
        QM.save(dest, model, tok, cfg, q, dtype, meta)
        mb, bf16_mb = size["total"] / 1e6, before["total"] / 1e6
        print(f"{cfg.label}: {mb:.1f} MB ({bf16_mb:.1f} MB in bf16), {secs:.0f} s")
        done.append(dest)
    return done


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--labels", nargs="+", default=LABELS, help="quantizations (config.parse's labels)")
    ap.add_argument("--base", default=BASE, help="the checkpoint to quantize")
    ap.add_argument("--out", default=OUT, help="folder of the quantized checkpoints")
    ap.add_argument(
        "--n-calibration", type=int, default=256, help="calibration pairs for the Fisher information"
    )
    a = ap.parse_args(argv)
    build(a.labels, a.base, a.out, a.n_calibration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
