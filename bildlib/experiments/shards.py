"""A sweep's unit of work (experiments.sweeps): a shard, its configurations with their own
vanilla baseline interleaved on one device, and one shard's computation, in this process or on a
Ray worker (experiments.cluster); both sweeps and cluster build on it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from bildlib import data
from bildlib.experiments import cache, interleave, presets
from bildlib.experiments.config import Config
from bildlib.experiments.runner import Models, examples, plan, with_checkpoints
from bildlib.experiments.settings import RunSettings


@dataclass
class Shard:
    """Configurations that share a baseline and a device; `key` goes into their jobs' keys."""

    index: int
    of: int
    configs: list[Config]  # in interleaving order, baselines included

    def key(self, models: Models) -> dict:
        """Every job of a shard is keyed by the shard's members: a row timed in one sweep never
        stands in another (like for like: a ratio only compares rows timed together). A member is
        its configuration and the weights and dtype of each model it runs, so that a baseline is
        not read back into a sweep whose other members changed only there (dtype "mixed", or
        another folder for a "student:<label>")."""
        needs = sorted({w for c in self.configs for w in c.needs()})
        runs = {w: [models.identity(w), str(models.dtype(w))] for w in needs}
        members = cache.key({"configs": [dataclasses.asdict(c) for c in self.configs], "models": runs})
        return {"index": self.index, "of": self.of, "members": members}


@dataclass
class Result:
    """One computed (or cached) job of a shard, as a worker returns it to the driver."""

    config: Config
    spec: dict
    path: str
    df: pd.DataFrame
    attrs: dict  # df.attrs, kept apart: they are the result's metadata wherever df travels


def arrange(base: list[Config], configs: list[Config]) -> list[Config]:
    """One shard's interleaving order: the first baseline repeat, the configurations with the
    middle repeats half way, the last repeat at the end."""
    todo = [base[0]] + configs
    if len(base) > 1:
        mid = len(todo) // 2
        todo = todo[:mid] + base[1:-1] + todo[mid:] + base[-1:]
    return list(dict.fromkeys(todo))


def shard(base: list[Config], configs: list[Config], n: int) -> list[Shard]:
    """n shards (at most one per configuration), round robin, each with the whole baseline."""
    n = min(n, len(configs))
    return [Shard(k, n, arrange(base, configs[k::n])) for k in range(n)]


@dataclass
class Loaded:
    """What a sweep loaded once for every shard in this process: the models and the examples."""

    models: Models
    examples: data.Split


def compute(
    preset: str, s: Shard, split: str, n_examples: int, settings: RunSettings, flush_every: int,
    progress: bool, report: interleave.Report | None = None, loaded: Loaded | None = None,
) -> list[Result]:  # fmt: skip
    """Plan and compute one shard's jobs interleaved (on a Ray worker, or in this process).
    loaded: the models and examples, where the caller holds them for several shards; None (a
    Ray worker): loaded here, as settings says."""
    if loaded is None:
        p, models = models_for(preset, settings)
        loaded = Loaded(models, examples(p, split, n_examples))  # a hub dataset loads slowly
    key = s.key(loaded.models)
    jobs = [plan(preset, c, split, n_examples, settings, loaded.models, loaded.examples, shard=key)
            for c in s.configs]  # fmt: skip
    dfs = interleave.compute(jobs, flush_every, progress, report)
    pairs = zip(jobs, dfs, strict=True)
    return [Result(j.config, j.spec, str(j.path), df, dict(df.attrs)) for j, df in pairs]


def models_for(preset: str, settings: RunSettings) -> tuple[presets.Preset, Models]:
    """The preset with settings' checkpoints, and new models on settings' device, dtype and engine."""
    p = with_checkpoints(presets.get(preset), settings.checkpoints)
    return p, Models.of(p, settings)
