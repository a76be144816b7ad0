"""Results that cannot lie, round two: the cache knows every file of a checkpoint, batched sweeps
time per row and survive their last chunk and their errors, perplexity reads only lists of
texts, and lenient inputs get clear errors. The harness runs a paper preset's plumbing on tiny
models (conftest: mirror, env)."""

import json
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from bildlib import analysis as A
from bildlib import experiments as X
from bildlib.analysis import perplexity as P
from bildlib.experiments import measure, preflight, presets
from bildlib.models import LM, load_pair
from bildlib.models.batch import Looped
from conftest import PRESET, tiny_model, tiny_tokenizer

# --- the cache key covers every file that decides a model's outputs ------------------------------


def _edit(path, how):
    if how == "epsilon":  # the probe's change: it moves every output of the model
        cfg = json.loads(path.read_text())
        path.write_text(json.dumps(cfg | {"layer_norm_epsilon": 0.5}))
    else:  # any change of the bytes
        path.write_text(path.read_text() + "\n")


@pytest.mark.parametrize(
    "name, how",
    [("config.json", "epsilon"), ("generation_config.json", "bytes"), ("tokenizer.json", "bytes"),
     ("tokenizer_config.json", "bytes")],
)  # fmt: skip
def test_a_changed_config_or_tokenizer_file_is_recomputed(env, mirror, tmp_path, monkeypatch, name, how):
    folder = tmp_path / "small"
    shutil.copytree(mirror / presets.get(PRESET).small, folder)
    assert (folder / name).is_file(), sorted(p.name for p in folder.iterdir())
    kw = dict(
        n_examples=3, progress=False, settings=X.RunSettings(results=env, checkpoints={"small": folder})
    )
    before = X.run(PRESET, X.vanilla("small"), **kw)
    calls = {"n": 0}
    real = measure.decode

    def counted(*a, **k):
        calls["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(measure, "decode", counted)
    (folder / "README.md").write_text("a model card changes no output\n")
    assert X.run(PRESET, X.vanilla("small"), **kw).attrs["key"] == before.attrs["key"] and calls["n"] == 0
    _edit(folder / name, how)
    after = X.run(PRESET, X.vanilla("small"), **kw)
    assert after.attrs["key"] != before.attrs["key"] and calls["n"] > 0
    if how == "epsilon":
        assert list(after["output_ids"].map(list)) != list(before["output_ids"].map(list))


# --- batched sweeps: per-row times, a short last chunk on every engine, errors keep rows ---------


def test_a_batched_sweeps_loop_overhead_is_never_negative(env):
    grid = [X.bild("aligned", 0.5, 1.0), X.speculative("aligned", 3)]
    df = X.sweep(
        PRESET,
        grid,
        n_examples=8,
        baseline_repeats=1,
        progress=False,
        settings=X.RunSettings(results=env, batch_size=4),
    )
    s = A.summarize(df, intervals=False)
    assert s["loop_pct"].notna().all() and (s["loop_pct"] >= 0).all(), s[["loop_pct"]]
    assert (s["loop_us_per_token"] >= 0).all()
    chunk = df[(df["label"] == "vanilla-large") & df["id"].between(0, 3)]
    assert chunk["large_s"].nunique() == 1  # the chunk's call time split over its 4 rows
    assert chunk["large_s"].iloc[0] <= chunk["latency_s"].iloc[0]


def test_a_batched_sweep_on_the_hf_engine_runs_its_short_last_chunk(env):
    grid = [X.bild("aligned", 0.5, 1.0)]
    kw = dict(n_examples=6, baseline_repeats=1, progress=False)
    hf = X.RunSettings(results=env, engine="hf")
    four = X.sweep(PRESET, grid, settings=hf.replace(batch_size=4), **kw)  # chunks of 4 and 2
    one = X.sweep(PRESET, grid, settings=hf, **kw)
    m = one.merge(four, on=["label", "id"])
    assert len(m) == len(one) == 18 and (m["output_ids_x"].map(list) == m["output_ids_y"].map(list)).all()


def test_looped_takes_fewer_rows_than_before(mirror):
    lm = LM.from_pretrained(mirror / presets.get(PRESET).small, engine="hf")
    rows = Looped(lm, 4)
    assert rows.start([[5, 6, 1], [7, 1], [8, 9, 1], [3, 1]]) == [0] * 4 and len(rows.ids) == 4
    assert rows.start([[5, 6, 1], [7, 1]]) == [0, 0] and len(rows.ids) == 2


def test_a_sweep_stopped_by_an_error_keeps_its_finished_rows(env, monkeypatch):
    grid = [X.bild("aligned", 0.5, 1.0)]
    kw = dict(
        n_examples=10,
        settings=X.RunSettings(results=env),
        baseline_repeats=1,
        progress=False,
        flush_every=100,
    )
    real, calls = measure.decode, {"n": 0}

    def fails(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3 * 2 + 3 * 5 + 2:  # warm-ups, 5 examples of each, one more, then the error
            raise RuntimeError("out of memory")
        return real(*a, **k)

    monkeypatch.setattr(measure, "decode", fails)
    with pytest.raises(RuntimeError, match="out of memory"):
        X.sweep(PRESET, grid, **kw)
    kept = sorted(len(pd.read_parquet(f)) for f in (env / PRESET).glob("*.partial.parquet"))
    assert kept == [5, 5, 6]  # no flush was due (flush_every 100): every finished row written on the error
    calls["n"] = -1000
    done = X.sweep(PRESET, grid, **kw)
    assert calls["n"] + 1000 == 3 * 2 + 5 + 5 + 4 and not done.duplicated(["label", "id"]).any()


# --- perplexity reads a list of texts ------------------------------------------------------------


def test_perplexity_stream_refuses_a_string_and_skips_empty_texts():
    tok = tiny_tokenizer()
    with pytest.raises(TypeError, match=r"texts must be a list of strings, got a str \(one text: \[text\]\)"):
        P.stream(tok, "w3 w4 w5")
    with pytest.raises(TypeError, match=r"texts\[1\] must be a string"):
        P.stream(tok, ["w3", 4])
    assert P.stream(tok, ["w3 w4", "", "  ", "w5"]) == P.stream(tok, ["w3 w4", "w5"]) == [3, 4, 1, 5, 1]


def test_perplexity_windows_and_batch_are_whole_numbers():
    model = tiny_model("gpt2", seed=0)
    ids = P.stream(tiny_tokenizer(), ["w3 w4 w5 w6 w7 w8"] * 4)
    with pytest.raises(ValueError, match="window must be an integer >= 2, got 10.5"):
        P.score(model, ids, window=10.5, stride=4)
    with pytest.raises(ValueError, match="batch must be an integer >= 1, got 0"):
        P.score(model, ids, window=8, stride=4, batch=0)
    with pytest.raises(ValueError, match="stride must be an integer >= 1, got 2.5"):
        P.score(model, ids, window=8, stride=2.5)


# --- lenient inputs ------------------------------------------------------------------------------


def test_plan_runs_for_this_machine_and_refuses_bad_arguments(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    preflight.main([])
    assert "plan for preset multi30k on cpu" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        preflight.main(["--device", "tpu"])
    assert "invalid choice: 'tpu'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        preflight.main(["--n-examples", "-1"])
    assert "--n-examples must be an integer >= 1, got -1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda, got 'tpu'"):
        preflight.plan("multi30k", "tpu")
    with pytest.raises(ValueError, match="n_examples must be an integer >= 1"):
        preflight.plan("multi30k", "cpu", n_examples=0)


@pytest.mark.parametrize("device", ["meta", "mps", torch.device("meta")])
def test_load_pair_refuses_devices_it_does_not_run_on(mirror, device):
    p = presets.get(PRESET)
    with pytest.raises(ValueError, match="device must be cpu, cuda, cuda:N or auto"):
        load_pair(mirror / p.small, mirror / p.large, device=device)


def test_end_rules_and_thresholds_read_as_meant():
    with pytest.raises(ValueError, match="verify_end=False turns the end check off"):
        X.Config("bild", "small", 0.5, 1.0, verify_end=False, verify_end_below=0.8)
    with pytest.raises(ValueError, match="verify_end must be True, False or None, got 1"):
        X.Config("bild", "small", 0.5, 1.0, verify_end=1)
    with pytest.raises(ValueError, match="verify_end must be a list of true/false"):
        X.bild_grid(PRESET, fallbacks=[0.5], rollbacks=[1.0], verify_end=[1])
    # numpy's float32 is accepted as float64 is, and keys as the Python float it holds
    c = X.bild("small", np.float32(0.5), np.float32(1.0))
    assert c == X.bild("small", 0.5, 1.0) and type(c.fallback) is float
    grid = X.bild_grid(PRESET, fallbacks=[np.float32(0.5)], rollbacks=[np.float64(1.0)])
    assert grid == [c, X.bild("aligned", 0.5, 1.0)]
    json.dumps(X.Config("bild", "small", np.float32(0.25), np.float64(1.0)).__dict__)


# --- only make targets write figures/ -----------------------------------------------------------


def test_batchbench_writes_figures_only_with_its_defaults(multi30k_dir, monkeypatch, tmp_path, capsys):
    from bildlib.bench import batchbench
    from conftest import REPO

    committed = {f: f.read_bytes() for f in (REPO / "figures" / "batch").iterdir() if f.is_file()}
    with pytest.raises(SystemExit):
        batchbench.main(["--check", "--n", "8", "--out", "figures/batch"])
    assert "--out figures/batch holds the committed run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        batchbench.main(["--n", "8", "--batches", "2", "--out", str(REPO / "figures" / "batch")])
    monkeypatch.setattr(batchbench, "REPO_ROOT", tmp_path)  # the trial run's default place, under tmp
    assert batchbench.main(["--check", "--n", "2"]) == 0
    j = json.loads((tmp_path / "build" / "figures" / "batch" / "exact.json").read_text())
    assert {c["rows"] for c in j["cases"].values()} == {2}
    assert committed == {f: f.read_bytes() for f in (REPO / "figures" / "batch").iterdir() if f.is_file()}
