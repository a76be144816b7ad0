"""Sweeps on Ray (sweep(executor="ray")): one Ray task per shard (experiments.sweeps), asking for
one GPU when the sweep runs on CUDA, else `threads` CPUs. The task plans its jobs on its worker,
so the keys hold the worker's device, and computes them interleaved there.

Results. Workers write into the results folder with the cache's atomic writes and locks, exactly
as a local sweep does, and return their rows to the driver. The folder must be one the driver
and every worker see: a local Ray instance shares this machine's; on a cluster pass
`results=` a folder on a shared filesystem (the driver checks that it sees what workers wrote).
Nothing is lost when a worker dies: Ray reruns its shard `retries` times, and a rerun resumes
from the partial files (<key>.partial.parquet) the dead worker flushed. When a shard still
fails, the driver waits for the others and raises; rerunning the sweep computes only what is
missing. An interrupted driver (Ctrl-C) stops its workers, whose flushed rows stay.

Progress. Workers report what they decode to a small actor; the driver shows one tqdm bar.
"""

from __future__ import annotations

import os
import socket

from bildlib.decoding.common import check_count
from bildlib.experiments.config import Config
from bildlib.experiments.progress import bar as progress_bar
from bildlib.experiments.runner import check_settings
from bildlib.experiments.settings import RunSettings
from bildlib.experiments.shards import Result, compute, shard

INSTALL = "pip install -e '.[cluster]' (or: pip install 'ray>=2.9')"


class ShardFailedError(RuntimeError):
    """A shard's worker died (or raised) after its retries; the other shards' results are kept."""


def ray_module():
    """Ray, or an error that says how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ModuleNotFoundError(f"executor='ray' needs Ray, which is not installed: {INSTALL}") from e
    return ray


def _endpoint(address: str) -> tuple[str, int]:
    """(host, port) of "host:port" or "ray://host:port"."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address must be 'auto', 'host:port' or 'ray://host:port', got {address!r}")
    return host, int(port)


def connect(address: str | None):
    """Ray, connected: the instance this process already joined; else a new local instance
    (address None) or the cluster at `address`. An address where nothing answers is an error
    within seconds (ray.init itself would retry for a minute)."""
    ray = ray_module()
    if ray.is_initialized():
        return ray
    if address is None:
        ray.init(include_dashboard=False, log_to_driver=False)
        return ray
    if not isinstance(address, str) or not address:
        raise ValueError(f"address must be 'auto', 'host:port' or 'ray://host:port', got {address!r}")
    if address != "auto":
        host, port = _endpoint(address)
        try:
            socket.create_connection((host, port), timeout=3).close()
        except OSError as e:
            raise ConnectionError(
                f"address {address!r}: no Ray cluster answers at {host}:{port} ({e}); start one with "
                "`ray start --head` (docs/experiments.md, Sweeps on a cluster) or leave address empty for a "
                "local one"
            ) from e
    try:
        ray.init(address=address, log_to_driver=False)
    except ConnectionError as e:
        raise ConnectionError(f"address {address!r}: no Ray cluster found ({e})") from e
    return ray


def resources(ray, device: str, threads: int) -> tuple[dict, str]:
    """What one shard's task asks Ray for, and the device its worker runs on: a whole GPU (Ray
    makes it the worker's cuda:0), or `threads` CPUs."""
    have = ray.cluster_resources()  # {"CPU": n, "GPU": n, ...}
    gpu = device.startswith("cuda") or device == "auto" and have.get("GPU", 0) >= 1
    need = {"GPU": 1, "CPU": 1} if gpu else {"CPU": threads}
    ask = {f"num_{r.lower()}s": v for r, v in need.items()}  # ray's option names: num_gpus, num_cpus
    if short := [f"{v} {r}s" for r, v in need.items() if have.get(r, 0) < v]:
        cpus, gpus = have.get("CPU", 0), have.get("GPU", 0)
        raise ValueError(f"a shard asks for {' and '.join(short)} (device={device!r}, threads={threads}), "
                         f"more than the Ray cluster has ({cpus:g} CPUs, {gpus:g} GPUs)")  # fmt: skip
    return ask, "cuda" if gpu else "cpu"


class Progress:
    """Per shard, the examples its worker has to decode and has decoded (a Ray actor)."""

    def __init__(self):
        self.counts: dict[int, dict[str, int]] = {}

    def add(self, shard: int, what: str, k: int) -> None:
        self.counts.setdefault(shard, {"total": 0, "done": 0, "finished": 0})[what] += k

    def get(self) -> dict[int, dict[str, int]]:
        return self.counts


def _shard(preset, s, split, n_examples, settings, flush_every, progress) -> tuple[list[Result], int]:
    """The body of a shard's Ray task: its results and how many examples it decoded (counted
    here: the progress actor's count may lag behind the task's return)."""
    done = [0]

    def report(what: str, k: int) -> None:
        progress.add.remote(s.index, what, k)
        done[0] += k if what == "done" else 0

    return compute(preset, s, split, n_examples, settings, flush_every, False, report), done[0]


def default_shards(ray, gpu: bool, threads: int) -> int:
    """One shard per GPU of the cluster, or per `threads` of its CPUs."""
    have = ray.cluster_resources()
    return max(1, int(have.get("GPU", 0)) if gpu else int(have.get("CPU", 1)) // threads)


def run(
    preset: str, base: list[Config], configs: list[Config], shards: int | None, split: str, n_examples: int,
    settings: RunSettings, flush_every: int, progress: bool, address: str | None, retries: int,
) -> tuple[list[Result], dict[int, int]]:  # fmt: skip
    """Every shard's results, computed on the cluster (sweeps.sweep's executor="ray"), and how many
    examples each shard decoded ({shard: n}; its other rows were cached). Each worker gets
    settings as they are, but for the device its task was given and the results folder made
    absolute (the workers' working directory may differ)."""
    check_count("retries", retries, minimum=0)
    settings = check_settings(settings)
    ray = connect(address)
    ask, device = resources(ray, settings.device, settings.threads)
    results = None if settings.results is None else settings.results.resolve()
    worker = settings.replace(device=device, results=results)
    n = shards or default_shards(ray, device == "cuda", settings.threads)
    groups = shard(base, configs, n)
    meter = ray.remote(num_cpus=0)(Progress).remote()
    task = ray.remote(_shard).options(max_retries=retries, **ask)
    refs = {task.remote(preset, s, split, n_examples, worker, flush_every, meter): s for s in groups}
    n_configs = sum(len(s.configs) for s in groups)
    bar = progress_bar(0, f"{len(groups)} shards on Ray", disable=not progress, unit="example")
    done, failed, pending = {}, {}, list(refs)
    try:
        while pending:
            ready, pending = ray.wait(pending, timeout=0.5)
            for r in ready:
                try:
                    done[refs[r].index] = ray.get(r)
                except Exception as e:  # RayTaskError (it raised), WorkerCrashedError (it died), ...
                    failed[refs[r].index] = e
            counts = ray.get(meter.get.remote())  # {shard: {"total": n, "done": n, "finished": n}}
            sums = {k: sum(c[k] for c in counts.values()) for k in ("total", "done", "finished")}
            bar.total, bar.n, finished = sums["total"], sums["done"], sums["finished"]
            bar.set_postfix_str(f"configurations {finished}/{n_configs}")
    except KeyboardInterrupt:  # the driver interrupted: stop its workers (their flushed rows stay)
        for r in pending:
            ray.cancel(r, force=True)
        raise
    finally:
        bar.close()
    if failed:
        k, e = next(iter(failed.items()))
        if isinstance(cause := getattr(e, "cause", None), ValueError | TypeError | FileNotFoundError):
            raise cause  # bad input, the same on every worker: the driver's own error
        raise ShardFailedError(
            f"{len(failed)} of {len(groups)} shards failed (shard {k}: {type(e).__name__}: {e}); the other "
            "shards' results and the failed ones' flushed examples are cached: rerun the same sweep to "
            "compute only what is missing"
        ) from e
    results = [r for k in sorted(done) for r in done[k][0]]
    decoded = {k: done[k][1] for k in sorted(done)}  # every shard, as none failed
    if lost := [r.path for r in results if not os.path.exists(r.path)]:
        raise FileNotFoundError(
            f"the workers wrote {lost[0]} (and {len(lost) - 1} more) where this process does not see "
            "it: pass results= a folder on a filesystem the driver and every worker share"
        )
    return results, decoded
