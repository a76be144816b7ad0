"""Results that cannot lie (docs/experiments.md): one process computes each configuration, each result
records the machine's load, the cache key knows the data, and bad input fails before anything
runs. The harness runs a paper preset's plumbing on tiny models (conftest: mirror, env)."""

import gzip
import json
import math
import os
import shutil
import subprocess
import sys
import time
import warnings

import pytest

from bildlib import analysis as A
from bildlib import experiments as X
from bildlib.experiments import busy, measure, presets
from conftest import PRESET, REPO, sentences

NAN = math.nan


# --- 1. concurrent runs are serialised; load is recorded and warned about -----------------------

SWEEP = """
import dataclasses, json, os, sys, time
from pathlib import Path
from bildlib import data
from bildlib.experiments import presets
from bildlib import analysis as A
from bildlib import experiments as X
from bildlib.experiments import measure

P = "{preset}"
presets.PRESETS[P] = dataclasses.replace(presets.PRESETS[P], max_new_tokens=10)
pairs = json.loads(os.environ["PAIRS"])
task = data.Task("iwslt2017", "translation", "de", "en")
data.load = lambda name, split="val", n=None: data.Split(task, split, pairs[:n])
real, log = measure.decode, Path(os.environ["LOG"])

def logged(config, *a, **k):  # every decode, warm-up included, one line per call
    with open(log, "a") as f:
        f.write(config.label + "\\n")
    time.sleep(0.05)  # long enough that the two sweeps overlap
    return real(config, *a, **k)

measure.decode = logged
ready = Path(os.environ["READY"])
(ready / sys.argv[1]).touch()
while len(list(ready.iterdir())) < 2:  # start together
    time.sleep(0.01)
df = X.sweep(P, [X.bild("small", 0.5, 1.0)], n_examples=4, baseline_repeats=1,
             settings=X.RunSettings(results=os.environ["RESULTS"]), progress=False)
df.drop(columns=["output_ids"]).to_json(sys.argv[1] + ".json")
"""


def test_two_concurrent_sweeps_compute_each_configuration_once(env, mirror, tmp_path):
    pairs = list(zip(sentences(12, 0), sentences(12, 1), strict=True))
    (tmp_path / "ready").mkdir()
    run_env = os.environ | {
        "BILD_MODELS": str(mirror), "PAIRS": json.dumps(pairs), "LOG": str(tmp_path / "log"),
        "READY": str(tmp_path / "ready"), "RESULTS": str(env), "PYTHONPATH": str(REPO),
    }  # fmt: skip
    code = SWEEP.format(preset=PRESET)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, name], cwd=tmp_path, env=run_env, stderr=subprocess.PIPE
        )
        for name in ("a", "b")
    ]
    errs = [p.communicate(timeout=600)[1].decode() for p in procs]
    assert all(p.returncode == 0 for p in procs), errs
    calls = (tmp_path / "log").read_text().split()
    labels = ["vanilla-large", "vanilla-small", "bild-small-fb0.5-rb1.0"]
    assert {lab: calls.count(lab) for lab in labels} == {lab: 2 + 4 for lab in labels}  # warm-up + 4, once
    assert "waiting for another process" in "".join(errs)
    a, b = (json.loads((tmp_path / f"{n}.json").read_text()) for n in "ab")
    assert a == b  # the second sweep read the first one's files: the same latencies


def test_each_result_records_the_load_it_ran_under(env):
    df = X.run(
        PRESET,
        X.vanilla("small"),
        n_examples=5,
        progress=False,
        flush_every=2,
        settings=X.RunSettings(results=env),
    )
    load = df.attrs["load"]
    assert load["threads"] == 2 and load["cpus"] == busy.cpus()
    (seg,) = load["segments"]
    assert seg["examples"] == [0, 5] and seg["wall_s"] > 0 and seg["cpu_s"] > 0
    assert seg["load_start"] >= 0 and seg["load_end"] >= 0


def test_a_configuration_timed_on_a_busy_machine_is_named(env, monkeypatch):
    grid, kw = [X.bild("small", 0.5, 1.0)], dict(n_examples=3, baseline_repeats=1, progress=False)
    monkeypatch.setattr(busy, "run_queue_wait", lambda: None)  # as where the kernel does not say
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error", busy.BusyMachineWarning)
        quiet = X.sweep(PRESET, grid, settings=X.RunSettings(results=env / "idle"), **kw)
    assert not quiet["busy"].any()
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 9.0, 9.0))
    with pytest.warns(
        busy.BusyMachineWarning, match="3 configuration.*bild-small-fb0.5-rb1.0 .load average 9.0"
    ):
        df = X.sweep(PRESET, grid, settings=X.RunSettings(results=env / "busy"), **kw)
    assert df["busy"].all() and A.summarize(df)["busy"].all()  # the figures' CSVs carry it
    assert not A.summarize(quiet.drop(columns="busy"))["busy"].any()  # results without the column
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # a cache hit keeps its record
    with pytest.warns(busy.BusyMachineWarning):
        X.sweep(PRESET, grid, settings=X.RunSettings(results=env / "busy"), **kw)


def test_busy_means_waiting_for_a_cpu():
    def load(at, wait, cpus=2):
        seg = {"load_start": at, "load_end": at, "cpu_s": 1.9, "wall_s": 1.0, "wait_s": wait}
        return {"cpus": cpus, "threads": 2, "segments": [seg]}

    assert busy.busy(load(1.9, 0.01)) is None  # alone: the load is its own, hardly any wait
    assert "waited for a CPU 38%" in busy.busy(load(1.3, 0.38))  # the load average lags; the wait does not
    assert busy.busy(load(9.0, 0.0)) is None  # the wait, where reported, decides
    assert busy.busy(load(2.4, None)) is None and "load average 2.6" in busy.busy(load(2.6, None))
    assert busy.busy(load(5.0, None, cpus=16)) is None


@pytest.mark.skipif(busy.run_queue_wait() is None, reason="the kernel reports no run-queue wait")
def test_the_run_queue_wait_sees_a_competing_process():
    """This thread and a CPU-bound process pinned to one CPU: the thread waits for it a good part
    of the time (alone it hardly waits). The kernel's behaviour the busy warning relies on."""
    cpu, mine = min(os.sched_getaffinity(0)), os.sched_getaffinity(0)
    burn = "import time\nt = time.time()\nwhile time.time() - t < 4: pass"
    other = subprocess.Popen([sys.executable, "-c", burn], preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    os.sched_setaffinity(0, {cpu})  # this thread only
    try:
        time.sleep(0.5)  # the other process is up
        m = busy.Meter(0)
        t = time.perf_counter()
        while time.perf_counter() - t < 1.0:
            pass
        seg = m.segment(1)
    finally:
        os.sched_setaffinity(0, mine)
        other.kill()
        other.wait()
    assert seg["wait_s"] / seg["wall_s"] > busy.WAIT


# --- 2. the cache key knows the examples -------------------------------------------------------


def test_a_changed_reference_file_changes_the_key(multi30k_dir, tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    shutil.copytree(multi30k_dir, data_dir / "multi30k", ignore=shutil.ignore_patterns("train*"))
    monkeypatch.setenv("BILD_DATA_DIR", str(data_dir))
    ref = data_dir / "multi30k" / "val.en.gz"
    lines = gzip.decompress(ref.read_bytes()).decode().splitlines()

    def key():
        return X.plan(
            "multi30k", X.vanilla("large"), n_examples=5, settings=X.RunSettings(results=tmp_path / "res")
        ).key

    before = key()
    for i, changed in ((99, True), (2, False)):  # line 100 is past the 5 examples; line 3 is used
        lines[i] += " (edited)"
        ref.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
        assert (key() == before) is changed
    assert (
        X.plan(
            "multi30k", X.vanilla("large"), n_examples=6, settings=X.RunSettings(results=tmp_path / "res")
        ).key
        != key()
    )


# --- 3-6. decoders: see test_decoding (batch input, ids, vocabularies); thresholds here ---------


def test_nan_is_refused_wherever_a_number_is_checked():
    with pytest.raises(ValueError, match="fallback"):
        X.bild_grid(PRESET, fallbacks=[0.5, NAN])  # papermill -y '{fallbacks: [.nan]}'
    with pytest.raises(ValueError, match="rollback"):
        X.bild_grid(PRESET, rollbacks=[NAN])
    with pytest.raises(ValueError, match="rollback"):
        X.bild("aligned", None, NAN, window=3)
    with pytest.raises(ValueError, match="threshold"):
        X.Config("oracle", "small", threshold=NAN)
    with pytest.raises(ValueError, match="window"):
        X.Config("speculative", "small", window=NAN)
    with pytest.raises(ValueError, match="temperature"):
        X.Config("vanilla", "small", temperature=NAN)
    with pytest.raises(ValueError, match="top_p"):
        X.Config("vanilla", "small", temperature=1.0, top_p=NAN)


def test_a_grid_without_configurations_is_an_error(env):
    for kw, what in [
        ({"verify_end": []}, "verify_end"),
        ({"models": ()}, "models"),
        ({"fallbacks": []}, "fallbacks"),
    ]:
        with pytest.raises(ValueError, match=f"grid is empty: {what}"):
            X.bild_grid(PRESET, **kw)
    with pytest.raises(ValueError, match="configs is empty"):
        X.sweep(PRESET, [], settings=X.RunSettings(results=env))


# --- 7, 9. a sweep is checked before its first example runs ------------------------------------


@pytest.fixture
def no_decoding(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("decoded before the sweep's input was checked")

    monkeypatch.setattr(measure, "decode", fail)


def test_a_sweep_checks_everything_before_the_first_example(env, no_decoding):
    good = X.bild("small", 0.5, 1.0)
    with pytest.raises(TypeError, match="must hold experiments.Config objects"):
        X.sweep(PRESET, [good, {"method": "bild"}], n_examples=3, settings=X.RunSettings(results=env))
    for n in ("abc", 2.5, 0):
        with pytest.raises(ValueError, match="n_examples must be an integer >= 1"):
            X.sweep(PRESET, [good], n_examples=n, settings=X.RunSettings(results=env))
    with pytest.raises(ValueError, match="n_examples=50 but"):
        X.sweep(PRESET, [good], n_examples=50, settings=X.RunSettings(results=env))
    with pytest.raises(ValueError, match="threads"):
        X.sweep(PRESET, [good], n_examples=3, settings=X.RunSettings(threads=0, results=env))


def test_an_unwritable_results_folder_fails_before_decoding(env, no_decoding, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    for results in (blocked / "results", blocked):
        with pytest.raises(OSError, match="not writable"):
            X.sweep(
                PRESET,
                [X.bild("small", 0.5, 1.0)],
                n_examples=3,
                progress=False,
                settings=X.RunSettings(results=results),
            )
        with pytest.raises(OSError, match="not writable"):
            X.run(
                PRESET,
                X.vanilla("small"),
                n_examples=3,
                progress=False,
                settings=X.RunSettings(results=results),
            )


def test_a_finished_cache_needs_no_write_access(env, monkeypatch):
    grid = [X.bild("small", 0.5, 1.0)]
    df = X.sweep(
        PRESET, grid, n_examples=3, baseline_repeats=1, progress=False, settings=X.RunSettings(results=env)
    )
    monkeypatch.setattr("bildlib.experiments.cache.check_writable", lambda d: pytest.fail(f"checked {d}"))
    again = X.sweep(
        PRESET, grid, n_examples=3, baseline_repeats=1, progress=False, settings=X.RunSettings(results=env)
    )
    assert list(again["output"]) == list(df["output"])


def test_planning_a_run_loads_no_model(env):
    """Keys come from the weights' hash and stored dtype, so checking a sweep costs no loading."""
    models = X.Models(presets.get(PRESET))
    job = X.plan(
        PRESET, X.bild("aligned", 0.5, 1.0), n_examples=3, models=models, settings=X.RunSettings(results=env)
    )
    assert job.cached() is None and not models._lm
