"""Running configurations on a preset: the models (device and dtype resolved once) and one cached
configuration (run); a sweep with the vanilla-large baseline around it is experiments.sweeps.

Latency method (also in README): batch 1; torch.set_num_threads(threads) fixed for the whole
sweep; each configuration first decodes `warmup` examples untimed; every configuration runs on
the same examples, interleaved: example by example, each configuration in turn
(experiments.interleave); each example's latency is the wall time of its decode call
(synchronised on GPU). With batch_size > 1 (decoding.batch) a call decodes a chunk of examples,
chunk by chunk interleaved, and each example's latency is its chunk's time over the chunk's size
(its small_s and large_s likewise: the chunk's model-call times over its size). Vanilla large
runs in the same sweep `baseline_repeats` times, and normalized latency = mean latency of a
configuration / mean vanilla-large latency over the same examples (analysis.summarize; averaged
over the repeats, whose spread is reported).

A configuration interrupted part-way, or stopped by an error, keeps its finished examples in
<key>.partial.parquet and resumes from there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from transformers import AutoConfig

from bildlib import data
from bildlib.decoding.common import check_count
from bildlib.experiments import cache, interleave, measure, presets
from bildlib.experiments.config import Config
from bildlib.experiments.settings import RunSettings, checkpoint_pairs
from bildlib.models import (
    LM,
    auto_engine,
    check_dtype,
    check_engine,
    check_pair,
    locate,
    resolve_device,
    resolve_dtype,
    small_policy,
    stored_dtype,
)
from bildlib.models.early_exit import exit_views


def with_checkpoints(p: presets.Preset, checkpoints) -> presets.Preset:
    """The preset with some of its small / aligned / large checkpoints replaced (a dict or
    RunSettings.checkpoints' pairs; folders relative to the working directory or the repository
    root, or hub ids; see models.locate)."""
    checkpoints = dict(checkpoint_pairs(checkpoints))
    cands = {k: checkpoints.pop(k) for k in list(checkpoints) if presets.is_candidate(k)}
    # the built ones and the candidates are found when used (Preset.model says how to build them)
    new = {k: v if k in presets.BUILT else locate(v) for k, v in checkpoints.items()}
    if cands:
        new["candidates"] = tuple(sorted((dict(p.candidates) | cands).items()))
    return dataclasses.replace(p, **new)


class Models:
    """The preset's checkpoints, loaded on first use and checked to share one vocabulary.
    `device` ("cpu", "cuda", "cuda:N" or "auto") and the dtype policy ("default", "auto",
    "float32", "bfloat16", or "mixed": the small models in float32, the others as "auto";
    models.resolve_dtype, small_policy) are resolved here, once; only the resolved
    torch.device and each model's torch.dtype go further."""

    def __init__(
        self, preset: presets.Preset, device: str | torch.device = "cpu", dtype="default", engine="auto"
    ):
        check_dtype(dtype)
        check_engine(engine)
        self.preset, self.device, self.policy, self.engine = preset, resolve_device(device), dtype, engine
        self._lm: dict = {}  # (which, engine) -> LM
        self._views: tuple[LM, LM] | None = None  # the early-exit model's two views (views())
        self._engines: dict = {}  # (which, engine) -> the resolved engine, read once per sweep

    @classmethod
    def of(cls, preset: presets.Preset, settings: RunSettings) -> Models:
        """The models of `preset` (its checkpoints already applied) as settings asks."""
        return cls(preset, settings.device, settings.dtype, settings.engine)

    def __getitem__(self, which: str) -> LM:
        return self.get(which)

    def get(self, which: str, engine: str | None = None) -> LM:
        """`which` on `engine` (None: the run's). One HF model per checkpoint: each engine's LM
        wraps the same loaded weights."""
        engine = engine or self.engine
        if (which, engine) not in self._lm:
            if (loaded := next((lm for (w, _), lm in self._lm.items() if w == which), None)) is not None:
                lm = LM(loaded.model, loaded.tok, loaded.name, engine)
            else:
                dtype = self._policy(which)  # "int8" goes on as it is (weights float32, products int8)
                dtype = dtype if dtype == "int8" else self._local_dtype(which) or dtype
                lm = LM.from_pretrained(self.preset.model(which), self.device, dtype, engine)
            if presets.is_small(which):
                check_pair(lm, self.get("large", engine))
            self._lm[which, engine] = lm
        return self._lm[which, engine]

    def views(self, engine: str | None = None) -> tuple[LM, LM]:
        """(small view, large view) of the preset's early-exit model (models.early_exit): its first
        `exit_layer` decoder layers and all of them, on one lean engine over the weights get("ee")
        loaded. Early exit runs a layer at a time, so engine "hf" is an error."""
        engine = engine or self.engine
        if engine == "hf":
            raise ValueError("engine: early-exit BiLD runs the lean engine (a layer at a time), not 'hf'")
        if self._views is None:
            full = self.get("ee", "lean")
            self._views = exit_views(full.model, full.tok, full.name, self.preset.exit_layer)
        return self._views

    def engine_of(self, which: str, engine: str | None = None) -> str:
        """The engine `which` runs on ("native", "lean" or "hf"), from its config, without its
        weights ("auto" as models.engine.make resolves it)."""
        engine = engine or self.engine
        if engine != "auto":
            return engine
        if which not in self._engines:
            path = self.preset.model(which)
            cfg = AutoConfig.from_pretrained(path) if Path(path).is_dir() else self.get(which).model.config
            self._engines[which] = auto_engine(cfg, self.dtype(which), self.device)
        return self._engines[which]

    def _policy(self, which: str) -> str | torch.dtype:
        """`which`'s policy: the run's, except under "mixed" (models.small_policy)."""
        return small_policy(self.policy, presets.is_small(which))

    def _local_dtype(self, which: str) -> torch.dtype | None:
        """The resolved dtype of `which` from a local folder's weights without loading them; None
        for a hub id, whose stored dtype only loading tells (load_model resolves the policy then)."""
        stored = stored_dtype(self.preset.model(which))
        return None if stored is None else resolve_dtype(self._policy(which), self.device, stored)

    def dtype(self, which: str) -> torch.dtype:
        """The dtype `which` runs in; for a local folder without loading it (a cache hit loads
        no model)."""
        loaded = any(w == which for w, _ in self._lm)
        if not loaded and (dtype := self._local_dtype(which)):
            return dtype
        return self.get(which).model.dtype

    def dtype_name(self, which: str) -> str:
        """What `which` computes in, as results name it: "int8" under that policy, else its dtype."""
        return "int8" if self._policy(which) == "int8" else str(self.dtype(which)).removeprefix("torch.")

    def identity(self, which: str) -> str:
        """What the results depend on: the hash of the weights, config, generation config and
        tokenizer files (local; cache.model_files) or the hub commit."""
        path = Path(self.preset.model(which))
        if path.is_dir():
            return "sha256:" + cache.model_hash(path)
        commit = getattr(self.get(which).model.config, "_commit_hash", None)
        return f"hub:{self.preset.model(which)}@{commit}"


def examples(preset: presets.Preset, split: str, n_examples: int) -> data.Split:
    check_count("n_examples", n_examples)
    try:
        s = data.load(preset.dataset, split, n_examples)
    except data.DataError as e:  # a dataset whose schema moved: say which preset needs it
        raise data.DataError(f"preset {preset.name}: {e}") from e
    if len(s) < n_examples:
        raise ValueError(f"n_examples={n_examples} but {preset.dataset} {split} has {len(s)} examples")
    return s


@dataclass
class Job:
    """One configuration on a preset's first n examples, checked and keyed, not yet run."""

    preset: presets.Preset
    config: Config
    examples: data.Split
    models: Models
    spec: dict  # everything the result depends on; its hash is the cache key
    path: Path  # <results>/<preset>/<key>.parquet

    @property
    def key(self) -> str:
        return self.path.stem

    def cached(self) -> pd.DataFrame | None:
        """The finished result, if the cache holds it whole."""
        if not self.path.exists() or (df := cache.read(self.path, self.key)) is None:
            return None
        return df if len(df) == len(self.examples) else None


def plan(
    preset: str,
    config: Config,
    split: str = "val",
    n_examples: int = 100,
    settings: RunSettings | None = None,
    models: Models | None = None,
    loaded: data.Split | None = None,
    shard: dict | None = None,
) -> Job:
    """Check a run, load its examples and key it, without decoding anything (run's arguments;
    sweep plans every configuration before the first runs). settings: the run's RunSettings
    (None: its defaults). models and loaded: what the caller already loaded (a sweep loads the
    models and its examples once for every shard; models are then as settings says, and their
    device, dtype and checkpoints win). shard: the sweep's shard the job belongs to
    (experiments.sweeps), part of its key; None for an unsharded run, whose key has no such
    field. A batch_size of 1, the paper's setting, keeps every existing key: only a batch > 1
    is part of the key."""
    if not isinstance(config, Config):
        raise TypeError(f"config must be an experiments.Config, got {type(config).__name__}")
    s = check_settings(settings)
    if s.batch_size > 1:
        measure.check_batchable(config)
    p = with_checkpoints(presets.get(preset), s.checkpoints)
    models = models or Models.of(p, s)
    ex = examples(p, split, n_examples) if loaded is None else loaded
    if loaded is not None and (loaded.split, len(loaded)) != (split, n_examples):
        have = f"{len(loaded)} {loaded.split} examples"
        raise ValueError(f"loaded holds {have}, not the first {n_examples} of {split}")
    spec = {
        "preset": p.name, "config": dataclasses.asdict(config), "split": split, "n_examples": n_examples,
        "examples": cache.examples_hash(ex.pairs), "code": cache.code_version(),
        "models": {w: models.identity(w) for w in config.needs()},
        "dtypes": {w: models.dtype_name(w) for w in config.needs()},
        "engines": {w: models.engine_of(w, config.runs_on) for w in config.needs()},
        "device": models.device.type, "threads": s.threads, "warmup": s.warmup,
        "max_new_tokens": p.max_new_tokens, "prefix": p.prefix, **({"suffix": p.suffix} if p.suffix else {}),
        **({"max_source_tokens": p.max_source_tokens} if p.max_source_tokens else {}),
    }  # fmt: skip
    if shard is not None:
        spec["shard"] = shard
    if s.batch_size > 1:
        spec["batch_size"] = s.batch_size
    path = Path(s.results or cache.RESULTS) / p.name / f"{cache.key(spec)}.parquet"
    return Job(p, config, ex, models, spec, path)


def run(
    preset: str,
    config: Config,
    split: str = "val",
    n_examples: int = 100,
    settings: RunSettings | None = None,
    models: Models | None = None,
    flush_every: int = 20,
    progress: bool = True,
) -> pd.DataFrame:
    """One row per example (id, source, reference, output, latency_s, trace counters), cached.
    settings: device, dtype, engine, threads, warmup, checkpoints (what-if runs), the results
    folder and the batch size (RunSettings; None: its defaults). models: models already loaded
    (their device, dtype and checkpoints then win over settings'). df.attrs holds the corpus
    score, its signature, how the run was made and the machine's load while it ran."""
    return execute(plan(preset, config, split, n_examples, settings, models), flush_every, progress)


def check_settings(settings) -> RunSettings:
    """settings, or the defaults for None; anything else is a TypeError naming the parameter."""
    if settings is None:
        return RunSettings()
    if not isinstance(settings, RunSettings):
        raise TypeError(f"settings must be an experiments.RunSettings, got {type(settings).__name__} "
                        "(a dict of device, dtype, ... goes in as RunSettings(**that))")  # fmt: skip
    return settings


def execute(job: Job, flush_every: int = 20, progress: bool = True) -> pd.DataFrame:
    """The job's result: from the cache, or computed while holding its lock (a second process
    that wants the same key waits, then reads the finished file)."""
    check_count("flush_every", flush_every)
    return interleave.compute([job], flush_every, progress)[0]
