"""A sweep: configurations plus their vanilla baselines on the same examples, computed in this
process (executor="local") or on a Ray cluster (executor="ray", experiments.cluster).

Shards. Latency is only comparable on one device, so the unit of work is a shard: a set of
configurations together with its own vanilla baseline (repeated first, in the middle and last),
computed interleaved on one device (experiments.interleave). Configurations go to shards round
robin in grid order, so that neighbouring thresholds, which cost alike, land on different shards
and the shards take about equally long. Normalized latency and speedup are computed within each
shard against its own baseline (analysis.summarize). Every configuration decodes every example,
so its quality is corpus-level whichever worker ran it.

Each job's key holds its shard (index, count and members: the configurations, and the weights and
dtype of every model they run): a row timed in one sweep never serves another sweep or shard, so
every ratio compares rows timed together, interleaved. Two notebooks that sweep the same grid
(fig4, fig10, fig8, latency_scatter) share their rows; a sweep with other members (fig5,
table3's greedy BiLD rows) times its own baseline. Another sharding of the grid recomputes. A
configuration given twice, or equal to a baseline (e.g. Config("vanilla", "small") beside the
automatic vanilla small), runs once under one label.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pandas as pd

from bildlib.decoding import Sampling
from bildlib.decoding.common import check_count
from bildlib.experiments import busy, presets
from bildlib.experiments.config import FIELDS, Config, unique, vanilla
from bildlib.experiments.runner import Models, check_settings, examples, with_checkpoints
from bildlib.experiments.settings import RunSettings
from bildlib.experiments.shards import Loaded, Result, compute, shard

EXECUTORS = ("local", "ray")


BASELINES = ("large", "ee", "base")  # the models a sweep's speedups can be against


def sweep(
    preset: str,
    configs: list[Config],
    split: str = "val",
    n_examples: int = 100,
    baseline_repeats: int = 3,
    progress: bool = True,
    flush_every: int = 20,
    sampling: Sampling | None = None,
    baseline: str = "large",
    executor: str = "local",
    address: str | None = None,
    shards: int | None = None,
    retries: int = 1,
    settings: RunSettings | None = None,
    models: Models | None = None,
) -> pd.DataFrame:
    """Run configs plus the vanilla-large baseline (repeated first, in the middle and last) and
    vanilla small/aligned; one DataFrame with a `label` column, the config's fields, `busy`,
    `shard`, and per row the `worker` (host:pid) and `device_name` that computed it. Every
    configuration is checked and keyed (plan) before the first example runs. settings: the
    run's RunSettings, whole (device, dtype, engine, threads, warmup, checkpoints, results,
    batch_size; None: its defaults); models: models already loaded, as in run. With a
    batch_size > 1 every configuration, baselines included, decodes chunks of that many
    examples per call (decoding.batch); speedups are then against batched vanilla large.
    sampling: the baselines' decoding (None: greedy; a sampled sweep compares with vanilla
    decoding under the same sampling). A configuration timed on a busy machine
    (experiments.busy) is named in a BusyMachineWarning, and its rows have busy=True.
    baseline: the model of the baseline ("large"; "ee" for early exit, whose speedups are against
    the full early-exit model; "base", the checkpoint settings name as {"base": ...}, for a
    variant of the large timed against the original: the quantized large against bf16), recorded
    in the result's attrs for analysis.

    executor: "local" (this process) or "ray" (experiments.cluster: one Ray task per shard;
    address: None starts a local Ray instance, "auto" or "ray://host:port" joins a cluster;
    retries: how often Ray reruns a shard whose worker died). shards: how many shards (module
    docstring); None: 1 locally, one per GPU (or per `threads` CPUs) of the Ray cluster.
    attrs["decoded"]: {shard: examples this call decoded}; the other rows came from the cache."""
    check_count("baseline_repeats", baseline_repeats)
    check_count("flush_every", flush_every)
    check_count("shards", shards, optional=True)
    settings = check_settings(settings)
    configs = list(configs)
    if not configs:
        raise ValueError("configs is empty: a sweep needs at least one configuration besides its baselines")
    if bad := [c for c in configs if not isinstance(c, Config)]:
        raise TypeError(f"configs must hold experiments.Config objects, got {bad[0]!r}")
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {baseline!r}")
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "local" and address is not None:
        raise ValueError("address names a Ray cluster: pass it with executor='ray'")
    base = [vanilla(baseline, r, sampling) for r in range(baseline_repeats)]
    smalls = sorted({c.model for c in configs if c.model != baseline})
    smalls = [vanilla(m, sampling=sampling) for m in smalls]
    others = unique(base, smalls + configs)  # one label, one set of rows each (config.unique)
    if executor == "ray":
        from bildlib.experiments import cluster  # Ray is an optional extra

        if models is not None:
            raise ValueError("models: a Ray worker loads its own; pass device, dtype and engine in settings")
        results, decoded = cluster.run(preset, base, others, shards, split, n_examples, settings,
                                       flush_every, progress, address, retries)  # fmt: skip
    else:
        p = with_checkpoints(presets.get(preset), settings.checkpoints)
        models = models or Models.of(p, settings)  # loaded once, and the examples once, for every shard
        loaded = Loaded(models, examples(p, split, n_examples))
        results, decoded = [], {}
        for s in shard(base, others, shards or 1):
            decoded[s.index] = 0

            def count(what: str, k: int, i=s.index) -> None:
                decoded[i] += k if what == "done" else 0

            results += compute(preset, s, split, n_examples, settings, flush_every, progress, count, loaded)
    out = assemble(results, preset, baseline)
    out.attrs["decoded"] = decoded  # {shard: examples decoded by this call}; the rest came from the cache
    return out


def assemble(results: list[Result], preset: str, baseline: str) -> pd.DataFrame:
    """The sweep's rows from its shards' results, labelled; baselines are labelled by shard
    where there are several, so that each shard's repeats stay apart."""
    frames, suspect = [], []
    for r in results:
        c, df = r.config, r.df
        why = busy.busy(r.attrs["load"]) if "load" in r.attrs else None
        if why:
            suspect.append(f"{c.label} ({why}; {Path(r.path).name})")
        fields = {f: getattr(c, f) for f in FIELDS}
        used = r.spec["engines"][c.needs()[-1]]  # the engine the configuration ran on, resolved
        k = r.spec.get("shard", {"index": 0, "of": 1})
        own = k["of"] > 1 and c.method == "vanilla" and c.model == baseline  # in every shard
        label = c.label + (f"[shard {k['index']}]" if own else "")
        df = df.assign(**{col: df[col] if col in df else "" for col in ("worker", "device_name")})  # old rows
        frames.append(
            df.assign(
                label=label,
                **fields,
                score=r.attrs["score"],
                busy=why is not None,
                ran_on=used,
                dtype=r.spec["dtypes"][c.needs()[-1]],  # what the configuration's (large) model ran in
                small_dtype=next((r.spec["dtypes"][w] for w in c.needs() if presets.is_small(w)), ""),
                shard=k["index"],
                batch_size=r.spec.get("batch_size", 1),
            )  # fmt: skip
        )
    if suspect:
        warnings.warn(
            f"{len(suspect)} configuration(s) were timed on a busy machine, so their latencies are "
            "suspect; delete their result files and rerun on an idle machine: " + "; ".join(suspect),
            busy.BusyMachineWarning,
            stacklevel=3,
        )
    out = pd.concat(frames, ignore_index=True)
    out.attrs = {
        "preset": preset,
        "metric": results[0].attrs["metric"],
        "signature": results[0].attrs["signature"],
        "baseline": baseline,
        "threads": results[0].spec["threads"],
        "shards": max(r.spec.get("shard", {"of": 1})["of"] for r in results),
        "batch_size": results[0].spec.get("batch_size", 1),
    }
    return out
