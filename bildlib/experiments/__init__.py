"""Experiments: run decoder configurations on a preset and cache one result file each.

    from bildlib import analysis as A, experiments as X
    s = X.RunSettings(threads=2)  # device, dtype, engine, threads, warmup, checkpoints, results, batch
    df = X.sweep("multi30k", X.bild_grid("multi30k"), n_examples=100, settings=s)
    table = A.summary_table(A.summarize(df))

`config` (what to run), `settings` (RunSettings: what a run takes besides its configurations),
`measure` (the decoder a configuration runs and the timed call: the code the cache key hashes,
with the decoders, models and kernels), `cache` (keys, parquet files, the lock), `busy` (the
machine's load while a configuration ran), `runner` (models, plan, run), `sweeps` (a sweep),
`shards` (its unit of work), `cluster` (shards on Ray), `calls` (the model calls behind a
sweep's rows, for bildlib.analysis.cost). Reading the results is bildlib.analysis.
"""

from bildlib.experiments.cache import RESULTS, code_version
from bildlib.experiments.calls import calls_of, recording
from bildlib.experiments.config import (
    FIELDS,
    Config,
    bild,
    bild_grid,
    calm_grid,
    ee_grid,
    sampling_of,
    speculative,
    vanilla,
)
from bildlib.experiments.runner import Job, Models, execute, plan, run, with_checkpoints
from bildlib.experiments.settings import RunSettings
from bildlib.experiments.sweeps import EXECUTORS, sweep

__all__ = [
    "EXECUTORS", "FIELDS", "RESULTS", "Config", "Job", "Models", "RunSettings", "bild", "bild_grid",
    "calm_grid", "calls_of", "code_version", "ee_grid", "execute", "plan", "recording", "run",
    "sampling_of", "speculative", "sweep", "vanilla", "with_checkpoints",
]  # fmt: skip
