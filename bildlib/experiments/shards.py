"""A sweep's unit of work (experiments.sweeps): a shard, its configurations with their own
vanilla baseline interleaved on one device, and one shard's computation, in this process or on a
Ray worker (experiments.cluster); both sweeps and cluster build on it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pandas as pd

from bildlib.experiments import cache, interleave, presets
from bildlib.experiments.config import Config
from bildlib.experiments.runner import Models, examples, plan, with_checkpoints


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


def compute(
    preset: str, s: Shard, split: str, n_examples: int, flush_every: int, progress: bool,
    report: interleave.Report | None = None, **kw,
) -> list[Result]:  # fmt: skip
    """Plan and compute one shard's jobs interleaved (on a Ray worker, or in this process);
    kw as experiments.run (device, dtype, engine, checkpoints, threads, warmup, results), plus
    `models` and `loaded` (the examples) where the caller holds them for several shards."""
    p, models = models_for(preset, kw)
    ex = kw.pop("loaded", None) or examples(p, split, n_examples)  # a hub dataset loads slowly
    key = s.key(models)
    jobs = [plan(preset, c, split, n_examples, models=models, loaded=ex, shard=key, **kw)
            for c in s.configs]  # fmt: skip
    dfs = interleave.compute(jobs, flush_every, progress, report)
    pairs = zip(jobs, dfs, strict=True)
    return [Result(j.config, j.spec, str(j.path), df, dict(df.attrs)) for j, df in pairs]


def models_for(preset: str, kw: dict) -> tuple[presets.Preset, Models]:
    """The preset (with kw's checkpoints) and kw's `models`, popped, or new ones for kw's device,
    dtype and engine."""
    p = with_checkpoints(presets.get(preset), kw.get("checkpoints"))
    models = kw.pop("models", None) or Models(
        p, kw.get("device", "cpu"), kw.get("dtype", "default"), kw.get("engine", "auto")
    )
    return p, models
