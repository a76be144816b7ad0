"""Sweeps in shards, in this process and on a local Ray instance with 2 CPUs (experiments.sweeps,
experiments.cluster). Ray workers are processes of their own, so the Ray tests run the shipped
Multi30k pair on real data (a monkeypatched stand-in would not reach them)."""

import json
import os
import signal
import threading
import time

import pandas as pd
import pyarrow.parquet as pq
import pytest

from bildlib import analysis as A
from bildlib import experiments as X
from bildlib.experiments import cluster
from conftest import PRESET, run_python

GRID = [X.bild("aligned", 0.5, 1.0), X.bild("aligned", 0.8, 3.0), X.bild("small", 0.6, 2.0)]
COUNTERS = ["tokens", "small_tokens", "large_tokens", "fallbacks", "rollbacks"]


def own_baselines_hold(df: pd.DataFrame) -> None:
    """Every configuration's speedup is its own shard's vanilla-large latency over its own."""
    s = A.summarize(df).set_index("label")
    base = A.vanilla_large(df)
    refs = base.groupby(["shard", "repeat"])["latency_s"].mean().groupby("shard").mean()
    assert len(refs) == df["shard"].nunique() == df.attrs["shards"]
    for label, r in s.iterrows():
        assert r["speedup"] == pytest.approx(refs[r["shard"]] / r["latency_s"], rel=1e-12), label
    assert s.attrs["shard_baselines_s"] == pytest.approx({int(k): v for k, v in refs.items()})


def test_local_shards_have_their_own_baselines_and_keys(env):
    run = dict(n_examples=4, baseline_repeats=2, progress=False)
    one = X.sweep(PRESET, GRID, settings=X.RunSettings(results=env / "one"), **run)
    two = X.sweep(PRESET, GRID, shards=2, settings=X.RunSettings(results=env / "two"), **run)
    # one shard keys its rows by its members too (like for like), as 1 of 1
    assert one.attrs["shards"] == 1 and set(one["shard"]) == {0}
    specs = [json.loads(pq.read_schema(f).metadata[b"bildlib"])["spec"] for f in (env / "one").rglob("*.pa*")]
    assert specs and all(spec["shard"]["of"] == 1 and spec["shard"]["index"] == 0 for spec in specs)
    assert two.attrs["shards"] == 2 and set(two["shard"]) == {0, 1}
    base = two[two["method"] == "vanilla"].query("model == 'large'")
    assert set(base["label"]) == {f"vanilla-large{r}[shard {k}]" for r in ("", "#1") for k in (0, 1)}
    # configurations round robin: each exactly once, in one shard; baselines in both
    configs = two[two["method"] != "vanilla"].groupby("label")["shard"].unique()
    assert all(len(v) == 1 for v in configs) and len(configs) == len(GRID)
    own_baselines_hold(two)
    # every configuration's outputs equal the unsharded sweep's
    for label, rows in two.groupby("label"):
        ref = one[one["label"] == label.split("[")[0]].set_index("id")
        assert list(rows.set_index("id")["output"]) == list(ref["output"]), label
    # files: 4 baselines (2 repeats x 2 shards) + vanilla small/aligned + 3 BiLD, keyed apart from one's
    files = {f.name for f in (env / "two" / PRESET).glob("*.parquet")}
    assert len(files) == 9 and not files & {f.name for f in (env / "one" / PRESET).glob("*.parquet")}
    assert two.attrs["decoded"] == {0: 4 * 5, 1: 4 * 4}  # shard 0: 2 baselines + 3 configs; shard 1: 2 + 2
    again = X.sweep(PRESET, GRID, shards=2, settings=X.RunSettings(results=env / "two"), **run)
    assert again.attrs["decoded"] == {0: 0, 1: 0}
    pd.testing.assert_frame_equal(two, again, check_like=True)


def test_bad_executor_arguments_are_clear_errors(env, monkeypatch):
    with pytest.raises(ValueError, match="executor must be one of local, ray"):
        X.sweep(PRESET, GRID, n_examples=2, executor="slurm", settings=X.RunSettings(results=env))
    with pytest.raises(ValueError, match="address names a Ray cluster"):
        X.sweep(PRESET, GRID, n_examples=2, address="auto", settings=X.RunSettings(results=env))
    with pytest.raises(ValueError, match="shards must be an integer >= 1"):
        X.sweep(PRESET, GRID, n_examples=2, shards=0, settings=X.RunSettings(results=env))
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # Ray not installed
    with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[cluster\]'"):
        X.sweep(PRESET, GRID, n_examples=2, executor="ray", settings=X.RunSettings(results=env))


def test_unreachable_address_fails_within_seconds(tmp_path):
    """In a fresh interpreter (this one may have joined the test's local instance)."""
    code = """
import time
from bildlib import experiments as X
t = time.perf_counter()
for address in ("127.0.0.1:1", "ray://127.0.0.1:1"):
    try:
        X.sweep("multi30k", [X.bild("aligned", 0.5, 1.0)], n_examples=2, executor="ray", address=address)
    except ConnectionError as e:
        assert "no Ray cluster answers at 127.0.0.1:1" in str(e), e
    else:
        raise AssertionError("no error")
try:
    X.sweep("multi30k", [X.bild("aligned", 0.5, 1.0)], n_examples=2, executor="ray", address="nohost")
except ValueError as e:
    assert "address must be 'auto', 'host:port' or 'ray://host:port'" in str(e), e
print(f"{time.perf_counter() - t:.1f} s")
"""
    run_python(code, tmp_path)


@pytest.fixture(scope="module")
def ray2(multi30k_dir):
    """A local Ray instance with 2 CPUs, on loopback, for this module's Ray tests."""
    import ray

    os.environ.setdefault("BILD_DATA_DIR", str(multi30k_dir.parent))  # the workers inherit it
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


# Two 1-thread shards and Ray's own processes share the 2 CPUs: the busy meter says so, rightly.
pytestmark_busy = pytest.mark.filterwarnings("ignore::bildlib.experiments.busy.BusyMachineWarning")
RAY_GRID = [X.bild("aligned", 0.5, 1.0), X.bild("aligned", 0.9, 3.0), X.bild("small", 0.6, 2.0)]
RUN = dict(n_examples=4, baseline_repeats=1, progress=False)
ONE = X.RunSettings(threads=1, warmup=1)  # one thread a shard, one warm-up example


@pytestmark_busy
def test_ray_sweep_in_two_shards_equals_local(ray2, tmp_path, capsys):
    local = X.sweep("multi30k", RAY_GRID, shards=2, settings=ONE.replace(results=tmp_path / "local"), **RUN)
    shown = dict(RUN, progress=True)
    on_ray = ONE.replace(results=tmp_path / "ray")
    rayed = X.sweep("multi30k", RAY_GRID, executor="ray", shards=2, settings=on_ray, **shown)
    bar = capsys.readouterr().err  # one bar on the driver, fed by both workers
    assert "2 shards on Ray" in bar and "28/28" in bar and "configurations 7/7" in bar
    assert rayed.attrs["shards"] == 2 and rayed.attrs["signature"] == local.attrs["signature"]
    # the same keys: a sharded sweep's files do not depend on the executor
    files = {f.name for f in (tmp_path / "ray" / "multi30k").glob("*.parquet")}
    assert files == {f.name for f in (tmp_path / "local" / "multi30k").glob("*.parquet")} and len(files) == 7
    cols = ["label", "id", "output", "score", "shard"] + COUNTERS
    pd.testing.assert_frame_equal(
        local[cols].sort_values(["label", "id"]).reset_index(drop=True),
        rayed[cols].sort_values(["label", "id"]).reset_index(drop=True),
    )
    # computed by two Ray worker processes, not this one; each row says which and on what
    workers = rayed.groupby("shard")["worker"].unique()
    assert all(len(w) == 1 for w in workers) and workers[0][0] != workers[1][0]
    assert f":{os.getpid()}" not in " ".join(rayed["worker"]) and rayed["device_name"].str.len().gt(0).all()
    assert rayed.attrs["decoded"] == {0: 4 * 4, 1: 4 * 3}  # baseline + vanilla aligned/small + 3 BiLD
    own_baselines_hold(rayed)


N_KILL = 8  # examples a job: shard 1 flushes every 2 and is killed before its last
KILL = dict(RUN, n_examples=N_KILL, flush_every=2)
KILL_SETTINGS = ONE.replace(warmup=0)


def sweep_and_kill_shard_1(results, retries: int) -> tuple[dict, int]:
    """Run a 2-shard Ray sweep in a thread, SIGKILL shard 1's worker once it has flushed rows,
    and wait for the sweep: ({"df": ...} or {"error": ...}, the killed pid)."""
    out = {}

    def sweep():
        try:
            out["df"] = X.sweep("multi30k", RAY_GRID, executor="ray", shards=2, retries=retries,
                                settings=KILL_SETTINGS.replace(results=results), **KILL)  # fmt: skip
        except Exception as e:  # noqa: BLE001 - the test inspects it
            out["error"] = e

    t = threading.Thread(target=sweep)
    t.start()
    victim, deadline = None, time.monotonic() + 300
    while victim is None and time.monotonic() < deadline and t.is_alive():
        for f in (results / "multi30k").glob("*.partial.parquet"):
            try:
                df = pd.read_parquet(f)
                shard = json.loads(pq.read_schema(f).metadata[b"bildlib"])["spec"]["shard"]["index"]
            except Exception:  # noqa: BLE001 - being replaced this instant; look again
                continue
            if shard == 1 and len(df):
                victim = int(df["worker"].iloc[0].rsplit(":", 1)[1])
                break
        time.sleep(0.02)
    assert victim is not None, "shard 1 never flushed a partial file"
    os.kill(victim, signal.SIGKILL)
    t.join(timeout=300)
    return out, victim


TOTAL = N_KILL * 7  # 2 baselines + 5 configurations, N_KILL examples each


def all_rows_once(df: pd.DataFrame, results) -> None:
    assert len(df) == TOTAL and not df.duplicated(["label", "id"]).any()
    assert df.groupby("label")["id"].apply(sorted).map(lambda ids: ids == list(range(N_KILL))).all()
    assert not list((results / "multi30k").glob("*.partial.parquet"))


@pytestmark_busy
def test_killed_worker_then_rerun_recomputes_only_the_lost_rows(ray2, tmp_path):
    out, _ = sweep_and_kill_shard_1(tmp_path, retries=0)
    assert isinstance(out.get("error"), cluster.ShardFailedError), out
    assert "1 of 2 shards failed" in str(out["error"])
    on_disk = sum(len(pd.read_parquet(f)) for f in (tmp_path / "multi30k").glob("*.parquet"))
    assert N_KILL * 4 < on_disk < TOTAL  # shard 0 (4 jobs) whole, shard 1 (3 jobs) in part: what it flushed

    on_ray = KILL_SETTINGS.replace(results=tmp_path)
    again = X.sweep("multi30k", RAY_GRID, executor="ray", shards=2, retries=0, settings=on_ray, **KILL)
    assert again.attrs["decoded"] == {0: 0, 1: TOTAL - on_disk}  # only the lost shard's missing rows
    all_rows_once(again, tmp_path)


@pytestmark_busy
def test_a_killed_worker_is_retried_and_resumes(ray2, tmp_path):
    out, victim = sweep_and_kill_shard_1(tmp_path, retries=1)
    df = out.get("df")
    assert df is not None, out
    all_rows_once(df, tmp_path)
    shard1 = df[df["shard"] == 1]
    assert shard1["worker"].nunique() == 2 and f":{victim}" in " ".join(shard1["worker"])  # dead, then retry
    assert 0 < df.attrs["decoded"][1] < N_KILL * 3  # the retry resumed: fewer decodes than the whole shard
