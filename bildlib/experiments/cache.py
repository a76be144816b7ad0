"""The results cache: one parquet per configuration, keyed by what decides its numbers.

data/results/<preset>/<key>.parquet, key = hash of the run's spec (runner.plan): the models'
identities (every file that decides a checkpoint's outputs: model_files), the configuration,
split, n_examples and a hash of those examples' sources and references, the code that decides
outputs and timings (CODE), device, dtypes, threads and warm-up. Files are written atomically,
with a SHA-256 of their rows in their metadata (rows_hash); one that does not read back as what
its key promises, or whose rows no longer hash to it (an edited output, a stale summary beside
it), is deleted with a warning and recomputed.
Computing a key is exclusive across processes (a file lock beside the result), so two runs never
time the same configuration at once.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from filelock import FileLock, Timeout

from bildlib import REPO_ROOT, data

RESULTS = REPO_ROOT / "data" / "results"
# The code that decides outputs and timings: decoders, model adapters, kernels, the timed call.
CODE = ["bildlib/decoding/*.py", "bildlib/models/*.py", "bildlib/experiments/measure.py"]
CODE += ["kernels/__init__.py", "kernels/dispatch.py", "kernels/reference.py", "kernels/triton_*.py"]
CODE += ["kernels/cpu.py", "kernels/*.cpp", "kernels/*.h"]  # the native engine: its build and its C++
CODE += ["bildlib/quant/model.py", "bildlib/quant/uniform.py", "bildlib/quant/weights.py"]  # int8 codes' path


def code_files(root: Path = REPO_ROOT) -> list[Path]:
    return sorted({f for pattern in CODE for f in root.glob(pattern)})


def code_version(root: Path = REPO_ROOT) -> str:
    h = hashlib.sha256()
    for f in code_files(root):
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def key(spec: dict) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]


def examples_hash(pairs: list[tuple[str, str]]) -> str:
    """SHA-256 of the (source, reference) pairs a run decodes and scores: changed data, new key."""
    return hashlib.sha256(json.dumps(pairs, ensure_ascii=False).encode()).hexdigest()[:20]


_HASHES: dict = {}
# Besides the weights, the files that decide a checkpoint's outputs: its architecture and
# generation settings, its tokenizer (transformers' and sentencepiece's file names), and a quantized
# checkpoint's quant.json (int8 runs its codes: models.linear.Int8). A model
# card (README.md) or a training log does not.
DEFINING = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "special_tokens_map.json", "added_tokens.json", "spiece.model", "sentencepiece.bpe.model",
            "vocab.json", "vocab.txt", "merges.txt", "quant.json"]  # fmt: skip


def model_files(folder: Path) -> list[Path]:
    """The files of a checkpoint folder that decide its outputs: the weight files and DEFINING."""
    folder = Path(folder)
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    if not weights:
        raise FileNotFoundError(f"{folder} holds no model weights (*.safetensors or *.bin)")
    return weights + [folder / n for n in DEFINING if (folder / n).is_file()]


def model_hash(folder: Path) -> str:
    """SHA-256 over a checkpoint folder's model_files (names and contents), memoised by their
    paths, sizes and times: a changed config or tokenizer file gives a new hash, as new weights do."""
    files = model_files(folder)
    k = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    if k not in _HASHES:
        h = hashlib.sha256()
        for f in files:
            h.update(f.name.encode() + b"\0" + data.sha256(f).encode())
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
        if meta.get("rows_sha256") != rows_hash(table):
            raise ValueError("its rows do not hash to what was recorded when it was written (edited?)")
        df.attrs.update(meta)
        return df
    except Exception as e:  # unreadable, truncated, foreign: recompute
        warnings.warn(
            f"recomputing {path.name}: the cached file is unusable ({type(e).__name__}: {e})", stacklevel=3
        )
        path.unlink(missing_ok=True)
        return None


def rows_hash(table: pa.Table) -> str:
    """SHA-256 of a table's columns and values (not its metadata), as written and as read back."""
    doc = {"columns": table.column_names, "rows": table.to_pydict()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def write(df: pd.DataFrame, path: Path, meta: dict) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False)
    meta = meta | {"rows_sha256": rows_hash(table)}
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"bildlib": json.dumps(meta)})
    with data.atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def check_writable(folder: Path) -> None:
    """Refuse a results folder that cannot be written, before anything is computed for it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as e:
        raise OSError(f"results folder {folder} is not writable ({e}); pass a folder you can write") from e


@contextmanager
def exclusive(path: Path, what: str) -> Iterator[None]:
    """Hold the lock of one result file (path with suffix .lock) across processes; a second
    process that wants it says so and waits. The operating system releases the lock of a
    process that dies, so a killed run blocks nobody."""
    lock = FileLock(path.with_suffix(".lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        print(f"waiting for another process computing {what} ({path.name})", file=sys.stderr, flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
