"""The results cache: one parquet per configuration, keyed by what decides its numbers.

data/results/<preset>/<key>.parquet, key = hash of the run's spec (runner.run): the models'
identities, the configuration, split, n_examples, the code that decides outputs and timings
(CODE), device, dtypes, threads and warm-up. Files are written atomically; one that does not
read back as what its key promises is deleted with a warning and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from bildlib import REPO_ROOT, data

RESULTS = REPO_ROOT / "data" / "results"
# The code that decides outputs and timings: decoders, model adapters, kernels, the timed call.
CODE = ["bildlib/decoding/*.py", "bildlib/models/*.py", "bildlib/experiments/measure.py"]
CODE += ["kernels/__init__.py", "kernels/reference.py", "kernels/triton_policy.py"]


def code_files(root: Path = REPO_ROOT) -> list[Path]:
    return sorted({f for pattern in CODE for f in root.glob(pattern)})


def code_version(root: Path = REPO_ROOT) -> str:
    h = hashlib.sha256()
    for f in code_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def key(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


_HASHES: dict = {}


def weights_hash(folder: Path) -> str:
    """SHA-256 over a checkpoint folder's weight files, memoised by their paths, sizes and times."""
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no model weights (*.safetensors or *.bin)")
    k = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    if k not in _HASHES:
        h = hashlib.sha256()
        for f in files:
            h.update(data.sha256(f).encode())
        _HASHES[k] = h.hexdigest()
    return _HASHES[k]


def read(path: Path, key: str) -> pd.DataFrame | None:
    """The cached rows if the file is whole and belongs to key; None (and a warning) otherwise."""
    try:
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[b"bildlib"])
        df = table.to_pandas()
        if meta["key"] != key or list(df["id"]) != list(range(len(df))):
            raise ValueError("key or example ids do not match")
        df.attrs.update(meta)
        return df
    except Exception as e:  # unreadable, truncated, foreign: recompute
        warnings.warn(
            f"recomputing {path.name}: the cached file is unusable ({type(e).__name__}: {e})", stacklevel=3
        )
        path.unlink(missing_ok=True)
        return None


def write(df: pd.DataFrame, path: Path, meta: dict) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"bildlib": json.dumps(meta)})
    with data.atomic_path(path) as tmp:
        pq.write_table(table, tmp)
