"""Experiment harness: run decoder configurations on a preset, cache the rows, summarise.

    from bildlib import experiments as X
    df = X.sweep("multi30k", X.bild_grid("multi30k"), n_examples=100)
    table = X.summary_table(X.summarize(df))

Latency method (also in README): batch 1; torch.set_num_threads(threads) fixed for the whole
sweep; each configuration first decodes `warmup` examples untimed; every configuration runs on
the same examples; each example's latency is the wall time of its decode call (synchronised on
GPU). Vanilla large runs in the same sweep `baseline_repeats` times (first, middle, last), and
normalized latency = mean latency of a configuration / mean vanilla-large latency over the same
examples (averaged over the repeats, whose spread is reported).

Results cache: one parquet per configuration, data/results/<preset>/<key>.parquet, with key =
hash of the model identities, the configuration, split, n_examples, the decoder code and the
timing setup. Files are written atomically; a configuration interrupted part-way keeps its
finished examples in <key>.partial.parquet and resumes from there; a file that does not read
back as what its key promises is recomputed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tqdm.auto import tqdm

from bildlib import REPO_ROOT, data, metrics, presets
from bildlib import decoding as D
from bildlib.evaluate import machine
from bildlib.models import LM, check_dtype, check_pair, resolve_device, resolve_dtype, stored_dtype

RESULTS = REPO_ROOT / "data" / "results"
CODE = ["bildlib/decoding.py", "bildlib/models.py", "kernels/__init__.py", "kernels/reference.py"]
CODE += ["kernels/triton_policy.py", "bildlib/experiments.py"]
COUNTERS = ["tokens", "small_tokens", "large_tokens", "small_calls", "large_calls", "large_call_tokens"]
COUNTERS += ["drafted", "fallbacks", "rollbacks", "discarded", "small_s", "large_s"]


@dataclass(frozen=True)
class Config:
    """One decoder configuration. `model` is the model of vanilla decoding ("small", "aligned",
    "large") or the small model of the two-model methods (whose large model is "large")."""

    method: str  # "vanilla" | "bild" | "speculative" | "oracle"
    model: str = "small"
    fallback: float | None = None
    rollback: float | None = None
    window: int | None = None
    max_small_steps: int | None = 10
    distance: str = "ce"
    threshold: float | None = None
    verify_end: bool | None = None  # bild: large model checks the final small tokens (None: exact only)
    repeat: int = 0  # repeated runs of one configuration (the vanilla-large baseline)

    def __post_init__(self):
        if self.method not in ("vanilla", "bild", "speculative", "oracle"):
            raise ValueError(f"method must be vanilla, bild, speculative or oracle, got {self.method!r}")
        if self.model not in ("small", "aligned", "large"):
            raise ValueError(f"model must be small, aligned or large, got {self.model!r}")
        if self.method != "vanilla" and self.model == "large":
            raise ValueError(f"{self.method} needs a small model (small or aligned), got model='large'")

    @property
    def label(self) -> str:
        if self.method == "vanilla":
            return f"vanilla-{self.model}" + (f"#{self.repeat}" if self.repeat else "")
        if self.method == "oracle":
            return f"oracle-{self.model}-t{self.threshold}"
        if self.method == "speculative":
            return f"speculative-{self.model}-w{self.window}"
        fb = f"fb{self.fallback}" if self.fallback is not None else f"nofb-w{self.window}"
        rb = f"rb{self.rollback}" if self.rollback is not None else "norb"
        end = {True: "-verify", False: "-noverify", None: ""}[self.verify_end]
        return f"bild-{self.model}-{fb}-{rb}" + ("-exact" if self.distance == "exact" else "") + end

    def decode(self, models: Models, src: list[int], max_new_tokens: int):
        if self.method == "vanilla":
            return D.vanilla(models[self.model], src, max_new_tokens=max_new_tokens)
        small, large = models[self.model], models["large"]
        if self.method == "oracle":
            return D.oracle(small, large, src, self.threshold, max_new_tokens=max_new_tokens)
        if self.method == "speculative":
            return D.speculative_sampling(
                small, large, src, window=self.window, max_new_tokens=max_new_tokens
            )
        return D.bild(
            small, large, src, fallback=self.fallback, rollback=self.rollback, window=self.window,
            max_small_steps=self.max_small_steps, distance=self.distance, max_new_tokens=max_new_tokens,
            verify_end=self.verify_end,
        )  # fmt: skip


def vanilla(model: str, repeat: int = 0) -> Config:
    return Config("vanilla", model, repeat=repeat, max_small_steps=None)


def bild(model: str, fallback, rollback, window: int | None = None, verify_end: bool | None = None) -> Config:
    steps = None if window else 10  # the No-FB ablation's window replaces the step limit
    return Config("bild", model, fallback, rollback, window, steps, verify_end=verify_end)


def bild_grid(
    preset: str, models=("small", "aligned"), fallbacks=None, rollbacks=None, verify_end=(None,)
) -> list[Config]:
    """BiLD over the preset's α_FB × α_RB grid, for each small model and each verify_end value
    (decoding.bild; None or False: Algorithm 1, which stops at the small model's EOS unchecked)."""
    p = presets.get(preset)
    fbs = p.fallback_grid if fallbacks is None else fallbacks
    rbs = p.rollback_grid if rollbacks is None else rollbacks
    for name, vals in (("fallbacks", fbs), ("rollbacks", rbs)):
        if isinstance(vals, str) or not all(isinstance(v, int | float) for v in vals):
            raise ValueError(
                f"{name} must be a list of numbers, got {vals!r} "
                f"(papermill command line: -y '{{{name}: [0.3, 0.5]}}')"
            )
    if isinstance(verify_end, str) or not all(v in (None, False, True) for v in verify_end):
        raise ValueError(f"verify_end must be a list of true/false, got {verify_end!r}")
    ends = dict.fromkeys(v or None for v in verify_end)  # False is Algorithm 1, as None; once each
    return [bild(m, fb, rb, verify_end=v) for v in ends for m in models for fb in fbs for rb in rbs]


def with_checkpoints(p: presets.Preset, checkpoints: dict | None) -> presets.Preset:
    """The preset with some of its small / aligned / large checkpoints replaced (folders relative
    to the working directory or the repository root, or hub ids)."""
    bad = set(checkpoints or {}) - {"small", "aligned", "large"}
    if bad:
        raise ValueError(f"checkpoints: keys must be small, aligned or large, got {sorted(bad)}")

    def where(v) -> str:  # a folder (as given, or from the repository root) or a hub id
        for f in (Path(v), REPO_ROOT / str(v)):
            if f.is_dir():
                return str(f.resolve())
        return str(v)

    return dataclasses.replace(p, **{k: where(v) for k, v in (checkpoints or {}).items()})


class Models:
    """The preset's checkpoints, loaded on first use and checked to share one vocabulary."""

    def __init__(self, preset: presets.Preset, device: str = "cpu", dtype: str = "default"):
        self.dtype = None if dtype in ("default", None) else dtype  # None: fp32 on CPU, stored on GPU
        check_dtype(self.dtype)
        self.preset, self.device, self._lm = preset, device, {}

    def __getitem__(self, which: str) -> LM:
        if which not in self._lm:
            lm = LM.from_pretrained(self.preset.model(which), self.device, self.dtype)
            if which != "large":
                check_pair(lm, self["large"])
            self._lm[which] = lm
        return self._lm[which]

    def dtype_of(self, which: str) -> str:
        """The dtype `which` runs in; for a local folder without loading it (a cache hit loads
        no model)."""
        stored = None if which in self._lm else stored_dtype(self.preset.model(which))
        if stored is None:
            return str(self[which].model.dtype).removeprefix("torch.")
        return str(resolve_dtype(self.dtype, resolve_device(self.device), stored)).removeprefix("torch.")

    def identity(self, which: str) -> str:
        """What the results depend on: the weights' hash (local) or the hub commit."""
        path = Path(self.preset.model(which))
        if path.is_dir():
            return "sha256:" + _weights_hash(path)
        commit = getattr(self[which].model.config, "_commit_hash", None)
        return f"hub:{self.preset.model(which)}@{commit}"


_HASHES: dict = {}


def _weights_hash(folder: Path) -> str:
    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    if not files:
        raise FileNotFoundError(f"{folder} holds no model weights (*.safetensors or *.bin)")
    key = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files)
    if key not in _HASHES:
        h = hashlib.sha256()
        for f in files:
            h.update(data.sha256(f).encode())
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def code_version() -> str:
    h = hashlib.sha256()
    for f in CODE:
        h.update((REPO_ROOT / f).read_bytes())
    return h.hexdigest()[:16]


def _examples(preset: presets.Preset, split: str, n_examples: int) -> data.Split:
    if n_examples < 1:
        raise ValueError(f"n_examples must be >= 1, got {n_examples}")
    s = data.load(preset.dataset, split, n_examples)
    if len(s) < n_examples:
        raise ValueError(f"n_examples={n_examples} but {preset.dataset} {split} has {len(s)} examples")
    return s


def _read(path: Path, key: str) -> pd.DataFrame | None:
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


def _write(df: pd.DataFrame, path: Path, meta: dict) -> None:
    table = pa.Table.from_pandas(df, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"bildlib": json.dumps(meta)})
    with data.atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def run(
    preset: str,
    config: Config,
    split: str = "val",
    n_examples: int = 100,
    device: str = "cpu",
    dtype: str = "default",
    checkpoints: dict | None = None,
    threads: int = 2,
    warmup: int = 2,
    models: Models | None = None,
    results: Path | None = None,
    flush_every: int = 20,
    progress: bool = True,
) -> pd.DataFrame:
    """One row per example (id, source, reference, output, latency_s, trace counters), cached.
    df.attrs holds the corpus score, its signature and how the run was made. dtype: what the
    models run in ("default": fp32 on CPU as the model cards, the stored dtype on GPU; "auto":
    the stored dtype where the hardware computes it natively; see models.resolve_dtype).
    checkpoints: replaces some of the preset's models, e.g. {"aligned": folder} (what-if runs).
    dtype and checkpoints are ignored when `models` is given."""
    p = with_checkpoints(presets.get(preset), checkpoints)
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    models = models or Models(p, device, dtype)
    ex = _examples(p, split, n_examples)
    spec = {
        "preset": p.name, "config": dataclasses.asdict(config), "split": split, "n_examples": n_examples,
        "models": {w: models.identity(w) for w in _needs(config)}, "code": code_version(),
        "dtypes": {w: models.dtype_of(w) for w in _needs(config)},
        "device": torch.device(models.device).type, "threads": threads, "warmup": warmup,
        "max_new_tokens": p.max_new_tokens, "prefix": p.prefix,
    }  # fmt: skip
    key = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:20]
    out = Path(results or RESULTS) / p.name / f"{key}.parquet"
    partial = out.with_suffix(".partial.parquet")
    if out.exists() and (df := _read(out, key)) is not None and len(df) == n_examples:
        return df
    done = _read(partial, key) if partial.exists() else None
    rows = done.to_dict("records") if done is not None else []

    torch.set_num_threads(threads)
    tok = models[config.model]
    encode = lambda text: tok.encode(p.prefix + text)  # noqa: E731
    for s, _ in ex.pairs[:warmup]:  # untimed: allocator, caches, lazy init
        config.decode(models, encode(s), p.max_new_tokens)
    meta = {"key": key, "label": config.label, "spec": spec, "machine": machine()}
    bar = tqdm(range(len(rows), n_examples), desc=config.label, disable=not progress, leave=False)
    for i in bar:
        src, ref = ex.pairs[i]
        ids = encode(src)
        t0 = time.perf_counter()
        out_ids, tr = config.decode(models, ids, p.max_new_tokens)
        if torch.device(models.device).type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        row = {"id": i, "source": src, "reference": ref, "output": tok.decode(out_ids), "latency_s": dt}
        row["output_ids"] = out_ids
        rows.append(row | tr.counters() | {"trace": "".join(tr.source)})
        if (i + 1) % flush_every == 0 and i + 1 < n_examples:
            _write(pd.DataFrame(rows), partial, meta)
    df = pd.DataFrame(rows)
    sc = metrics.score(p.metric, list(df["output"]), list(df["reference"]))
    meta |= {"metric": p.metric, "score": sc.value, "signature": sc.signature}
    _write(df, out, meta)
    partial.unlink(missing_ok=True)
    df.attrs.update(meta)
    return df


def _needs(config: Config) -> list[str]:
    return [config.model] if config.method == "vanilla" else [config.model, "large"]


def sweep(
    preset: str,
    configs: list[Config],
    split: str = "val",
    n_examples: int = 100,
    baseline_repeats: int = 3,
    progress: bool = True,
    **kw,
) -> pd.DataFrame:
    """Run configs plus the vanilla-large baseline (repeated first, in the middle and last) and
    vanilla small/aligned; one DataFrame with a `label` column and the config's fields."""
    if baseline_repeats < 1:
        raise ValueError(f"baseline_repeats must be >= 1, got {baseline_repeats}")
    base = [vanilla("large", r) for r in range(baseline_repeats)]
    smalls = sorted({c.model for c in configs if c.model != "large"})
    todo = [base[0]] + [vanilla(m) for m in smalls] + configs
    mid = len(todo) // 2
    todo = todo[:mid] + base[1:-1] + todo[mid:] + base[-1:] if baseline_repeats > 1 else todo
    seen, plan = set(), []
    for c in todo:
        if c not in seen:
            seen.add(c)
            plan.append(c)
    p = with_checkpoints(presets.get(preset), kw.get("checkpoints"))
    models = kw.pop("models", None) or Models(p, kw.get("device", "cpu"), kw.get("dtype", "default"))
    frames = []
    for c in tqdm(plan, desc=f"{preset} sweep", disable=not progress):
        df = run(preset, c, split, n_examples, models=models, progress=progress, **kw)
        frames.append(
            df.assign(label=c.label, **{f: getattr(c, f) for f in _FIELDS}, score=df.attrs["score"])
        )
    out = pd.concat(frames, ignore_index=True)
    out.attrs = {
        "preset": preset,
        "metric": frames[0].attrs["metric"],
        "signature": frames[0].attrs["signature"],
    }
    return out


_FIELDS = [f.name for f in dataclasses.fields(Config)]


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration: score, mean latency, speedup and normalized latency against
    vanilla large (mean over its repeats), and the fallback / rollback / large-token rates."""
    base = df[(df["method"] == "vanilla") & (df["model"] == "large")]
    if base.empty:
        raise ValueError("no vanilla-large rows: run the sweep with its baseline")
    per_repeat = base.groupby("repeat")["latency_s"].mean()
    ref = per_repeat.mean()
    g = (df if "verify_end" in df else df.assign(verify_end=None)).groupby("label", sort=False)
    s = g.agg(
        method=("method", "first"), model=("model", "first"), fallback=("fallback", "first"),
        rollback=("rollback", "first"), window=("window", "first"), threshold=("threshold", "first"),
        repeat=("repeat", "first"), score=("score", "first"), latency_s=("latency_s", "mean"),
        tokens=("tokens", "sum"), fallbacks=("fallbacks", "sum"), rollbacks=("rollbacks", "sum"),
        large_tokens=("large_tokens", "sum"), n=("id", "count"), verify_end=("verify_end", "first"),
    )  # fmt: skip
    s["verify_end"] = s["verify_end"].map(lambda v: v in (True,))  # None (Algorithm 1) -> False
    for c in ("fallback", "rollback", "window", "threshold"):  # None where unused -> NaN
        s[c] = pd.to_numeric(s[c], errors="coerce").astype(float)
    s["norm_latency"] = s["latency_s"] / ref
    s["speedup"] = ref / s["latency_s"]
    s["fallback_pct"] = 100 * s["fallbacks"] / s["tokens"]
    s["rollback_pct"] = 100 * s["rollbacks"] / s["tokens"]
    s["large_pct"] = 100 * s["large_tokens"] / s["tokens"]
    s.attrs = dict(df.attrs) | {
        "baseline_latency_s": float(ref),
        "baseline_spread_pct": float(100 * (per_repeat.max() - per_repeat.min()) / ref),
        "baseline_repeats": int(len(per_repeat)),
    }
    return s.reset_index()


def pareto(s: pd.DataFrame) -> pd.DataFrame:
    """The configurations no other beats on both normalized latency (lower) and score (higher)."""
    s = s.sort_values(["norm_latency", "score"], ascending=[True, False])
    keep, best = [], float("-inf")
    for i, r in s.iterrows():
        if r["score"] > best:
            keep.append(i)
            best = r["score"]
    return s.loc[keep]


REGIMES = (("no loss", 0.2), ("≤ 0.5 point", 0.5), ("≤ 1 point", 1.0))


def summary_table(s: pd.DataFrame, regimes=REGIMES) -> pd.DataFrame:
    """Paper Table 1 from summarize(): vanilla large's score, and for unaligned and aligned BiLD
    the best speedup whose score stays within 0.2 of vanilla ("no loss") and within 1 point (the
    paper's two regimes), and within 0.5 (this project's benchmark bar)."""
    vanilla_score = float(s.loc[(s["method"] == "vanilla") & (s["model"] == "large"), "score"].mean())
    rows = [{"model": "Vanilla (large)", "regime": "", "score": vanilla_score, "speedup": 1.0}]
    for m, name in (("small", "BiLD (unaligned)"), ("aligned", "BiLD (aligned)")):
        b = s[(s["method"] == "bild") & (s["model"] == m) & s["fallback"].notna() & s["rollback"].notna()]
        for regime, tol in regimes:
            ok = b[b["score"] >= vanilla_score - tol]
            if ok.empty:
                rows.append({"model": name, "regime": regime})
                continue
            r = ok.loc[ok["speedup"].idxmax()]
            rows.append(
                {"model": name, "regime": regime, "score": r["score"], "speedup": r["speedup"]}
                | {"fallback": r["fallback"], "rollback": r["rollback"], "verify_end": r["verify_end"]}
                | {"fallback_pct": r["fallback_pct"], "rollback_pct": r["rollback_pct"]}
            )
    return pd.DataFrame(rows)


def repair_examples(df: pd.DataFrame, label: str, k: int = 3) -> list[dict]:
    """Fig 9: the k examples where `label` (a BiLD run) gains most sentence BLEU over vanilla
    small while taking some tokens from the large model; each with the outputs of reference,
    large, small and BiLD, BiLD's as (token text, "S" | "L") pieces."""
    from sacrebleu.metrics import BLEU

    sb = BLEU(effective_order=True)
    by = {lab: g.set_index("id") for lab, g in df.groupby("label")}
    bild_rows, small, large = by[label], by["vanilla-" + by[label]["model"].iloc[0]], by["vanilla-large"]
    gain = []
    for i, r in bild_rows.iterrows():
        if "L" not in r["trace"] or r["output"] == small.loc[i, "output"]:
            continue
        g = sb.sentence_score(r["output"], [r["reference"]]).score
        g -= sb.sentence_score(small.loc[i, "output"], [r["reference"]]).score
        gain.append((g, i))
    out = []
    for _, i in sorted(gain, reverse=True)[:k]:
        r = bild_rows.loc[i]
        out.append(
            {
                "id": int(i),
                "source": r["source"],
                "reference": r["reference"],
                "large": large.loc[i, "output"],
            }
            | {"small": small.loc[i, "output"], "bild": r["output"], "ids": list(r["output_ids"])}
            | {"trace": r["trace"]}
        )
    return out


def token_pieces(tokenizer, ids: list[int], trace: str) -> list[tuple[str, str]]:
    """(text, "S" | "L") per output token, spaces restored from sentencepiece's "▁"."""
    pieces = tokenizer.convert_ids_to_tokens(list(ids))
    special = set(tokenizer.all_special_tokens)
    return [(p.replace("▁", " "), who) for p, who in zip(pieces, trace, strict=True) if p not in special]


def thresholds_of(table: pd.DataFrame, model: str, regime: str) -> tuple[float, float]:
    """(α_FB, α_RB) of a summary_table row, e.g. ("BiLD (aligned)", "≤ 1 point")."""
    row = table.set_index(["model", "regime"]).loc[(model, regime)]
    if pd.isna(row.get("fallback")):
        raise ValueError(f"no {model} configuration reaches the {regime!r} regime in this sweep")
    return float(row["fallback"]), float(row["rollback"])
