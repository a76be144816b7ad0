"""The experiment harness on a paper preset's plumbing, with tiny random models saved under the
preset's hub names ($BILD_MODELS) and a tiny stand-in dataset."""

import dataclasses

import pandas as pd
import pytest

from bildlib import analysis as A
from bildlib import experiments as X
from bildlib.experiments import cache, measure, presets
from bildlib.experiments import interleave as I
from conftest import PRESET, run_python

GRID = [X.bild("small", 0.5, 1.0), X.bild("aligned", 0.5, 1.0), X.bild("aligned", 0.8, 3.0)]


def test_presets_name_the_papers_checkpoints():
    p = presets.get("iwslt2017-mt5")
    assert (p.small, p.aligned, p.large) == (
        "kssteven/mT5-small-iwslt2017-de-en",
        "kssteven/mT5-small-iwslt2017-de-en-bild-aligned",
        "kssteven/mT5-large-iwslt2017-de-en",
    )
    x = presets.get("xsum-t5")
    assert (x.small, x.aligned, x.large) == (
        "kssteven/T5-small-xsum",
        "kssteven/T5-small-xsum-bild-aligned",
        "kssteven/T5-large-xsum",
    )
    assert x.prefix == "summarize: " and x.metric == "rougeL"
    assert presets.get("cnndm-t5").large == "kssteven/T5-large-cnndm"
    assert presets.get("wmt2014-mt5").aligned == "kssteven/mT5-small-wmt2014-de-en-bild-aligned"
    assert min(p.fallback_grid) == 0.5 and max(p.fallback_grid) == 0.9 and max(p.rollback_grid) == 10
    assert min(x.fallback_grid) == 0.2 and max(x.rollback_grid) == 6
    with pytest.raises(ValueError, match="preset must be one of"):
        presets.get("nope")


def test_sweep_rows_metrics_and_cache(env, monkeypatch):
    df = X.sweep(
        PRESET, GRID, n_examples=8, baseline_repeats=2, progress=False, settings=X.RunSettings(results=env)
    )
    labels = list(dict.fromkeys(df["label"]))
    assert labels[0] == "vanilla-large" and labels[-1] == "vanilla-large#1"
    assert {"vanilla-small", "vanilla-aligned"} <= set(labels) and len(labels) == 7
    assert (df.groupby("label")["id"].apply(list) == [list(range(8))] * 7).all()  # same examples everywhere
    assert "nrefs:1" in df.attrs["signature"] and df["latency_s"].gt(0).all()
    assert (df["small_tokens"] + df["large_tokens"] == df["tokens"]).all()
    assert len(list((env / PRESET).glob("*.parquet"))) == 7

    def no_decoding(*a, **k):
        raise AssertionError("cached results were recomputed")

    monkeypatch.setattr(measure, "decode", no_decoding)
    again = X.sweep(
        PRESET, GRID, n_examples=8, baseline_repeats=2, progress=False, settings=X.RunSettings(results=env)
    )
    pd.testing.assert_frame_equal(
        df.drop(columns="latency_s"), again.drop(columns="latency_s"), check_like=True
    )
    assert (df["latency_s"] == again["latency_s"]).all()


def test_interrupted_sweep_resumes_without_loss_or_duplicates(env, monkeypatch):
    """A sweep runs its configurations interleaved, example by example; one finished before outside
    the sweep is not reused (the sweep times its own rows); an interrupted sweep keeps every
    configuration's flushed examples and resumes each from there, decoding only what is missing."""
    X.run(
        PRESET, X.vanilla("small"), n_examples=10, progress=False, settings=X.RunSettings(results=env)
    )  # timed outside the sweep
    calls = {"n": 0, "order": []}
    decode = measure.decode

    def dies(config, *a, **k):
        calls["n"] += 1
        calls["order"].append(config.label)
        if calls["n"] == 67:
            raise KeyboardInterrupt
        return decode(config, *a, **k)

    monkeypatch.setattr(measure, "decode", dies)
    kw = dict(n_examples=10, baseline_repeats=1, flush_every=3, progress=False)
    kw["settings"] = X.RunSettings(results=env)
    with pytest.raises(KeyboardInterrupt):
        X.sweep(PRESET, GRID, **kw)
    partial = list((env / PRESET).glob("*.partial.parquet"))
    n_configs = running = 6  # vanilla large, small, aligned + 3 BiLD, all timed in the sweep
    assert len(partial) == running
    kept = [len(pd.read_parquet(f)) for f in partial]
    assert kept == [9] * running  # 12 warm-ups, then 54 decodes: 9 whole rounds, flushed at 3, 6, 9
    timed = calls["order"][2 * running :]
    assert timed[:running] == timed[running : 2 * running]  # round robin: each config once per example
    assert len(set(timed[:running])) == running

    calls["n"] = -(10**9)  # no more interruptions; count what the resumed sweep decodes
    df = X.sweep(PRESET, GRID, **kw)
    assert len(df) == 10 * n_configs and not df.duplicated(["label", "id"]).any()
    assert calls["n"] + 10**9 == sum(10 - k for k in kept) + 2 * running  # the missing rows + warm-ups
    assert not list((env / PRESET).glob("*.partial.parquet"))


def test_a_sweep_says_its_size_and_how_long_it_will_take(env, capsys):
    X.sweep(
        PRESET, GRID, n_examples=12, baseline_repeats=1, progress=True, settings=X.RunSettings(results=env)
    )
    out = capsys.readouterr().out
    assert "to decode: 6 configurations x 12 examples, 72 decodes (0 configurations read back" in out
    assert "so the run takes about" in out and "papermill -p n_examples 10" in out
    # the first round's first-call costs count once: 12 s so far, then 9 more rounds of 1.5 s
    said = I.estimate([9.0, 1.0, 2.0], 12, 12)
    assert said.startswith("a round takes about 1.5 s, so the run takes about 0.4 min")
    X.sweep(
        PRESET, GRID, n_examples=12, baseline_repeats=1, progress=True, settings=X.RunSettings(results=env)
    )
    assert "to decode" not in capsys.readouterr().out  # all read back: nothing to announce


def test_corrupted_cache_file_is_recomputed(env):
    c = X.vanilla("small")
    df = X.run(PRESET, c, n_examples=4, progress=False, settings=X.RunSettings(results=env))
    f = next((env / PRESET).glob("*.parquet"))
    f.write_bytes(b"not a parquet file")
    with pytest.warns(UserWarning, match="recomputing"):
        again = X.run(PRESET, c, n_examples=4, progress=False, settings=X.RunSettings(results=env))
    assert list(again["output"]) == list(df["output"])


def test_summary_table_and_pareto():
    rows = [
        ("vanilla-large", "vanilla", "large", None, None, 30.0, 1.0),
        ("vanilla-small", "vanilla", "small", None, None, 25.0, 0.2),
        ("a", "bild", "small", 0.5, 1.0, 29.9, 0.6),  # no loss, 1/0.6
        ("b", "bild", "small", 0.3, 5.0, 29.1, 0.4),  # within one point, 1/0.4
        ("c", "bild", "small", 0.2, 9.0, 28.0, 0.3),  # too lossy
        ("d", "bild", "aligned", 0.5, 1.0, 29.5, 0.5),  # aligned: within one point
        ("e", "bild", "aligned", 0.6, 1.0, 29.9, 0.8),  # aligned, checking the end: no loss
    ]
    df = pd.DataFrame(
        [
            {"label": lab, "method": m, "model": mo, "fallback": fb, "rollback": rb, "window": None,
             "threshold": None, "repeat": 0, "score": sc, "latency_s": lat, "tokens": 10, "fallbacks": 1,
             "rollbacks": 2, "large_tokens": 3, "id": 0, "verify_end": True if lab == "e" else None}
            for lab, m, mo, fb, rb, sc, lat in rows
        ]
    )  # fmt: skip
    s = A.summarize(df)
    t = A.summary_table(s).set_index(["model", "regime"])
    assert t.loc[("BiLD (unaligned)", "no loss"), "speedup"] == pytest.approx(1 / 0.6)
    assert t.loc[("BiLD (unaligned)", "≤ 1 point"), "speedup"] == pytest.approx(1 / 0.4)
    assert t.loc[("BiLD (aligned)", "no loss"), "speedup"] == pytest.approx(1 / 0.8)
    assert (
        t.loc[("BiLD (aligned)", "no loss"), "verify_end"]
        and not t.loc[("BiLD (aligned)", "≤ 1 point"), "verify_end"]
    )
    assert list(A.summarize(df.drop(columns="verify_end"))["verify_end"]) == [False] * 7  # older results
    assert t.loc[("BiLD (aligned)", "≤ 1 point"), "speedup"] == pytest.approx(2.0)
    assert t.loc[("BiLD (unaligned)", "≤ 0.5 point"), "speedup"] == pytest.approx(1 / 0.6)
    assert t.loc[("BiLD (aligned)", "≤ 0.5 point"), "speedup"] == pytest.approx(2.0)
    assert t.loc[("BiLD (unaligned)", "no loss"), "rollback_pct"] == pytest.approx(20.0)
    front = A.pareto(s[s["method"] == "bild"])
    assert list(front["label"]) == ["c", "b", "d", "a"]  # e: slower than a at the same score


def test_bad_input(env):
    with pytest.raises(ValueError, match="n_examples"):
        X.run(PRESET, X.vanilla("small"), n_examples=0, settings=X.RunSettings(results=env))
    with pytest.raises(ValueError, match="n_examples=50 but"):
        X.run(PRESET, X.vanilla("small"), n_examples=50, settings=X.RunSettings(results=env))
    with pytest.raises(ValueError, match="method"):
        X.Config("beam")
    with pytest.raises(ValueError, match="needs a small model"):
        X.Config("bild", "large")
    with pytest.raises(ValueError, match="fallbacks must be a list of numbers"):
        X.bild_grid("multi30k", fallbacks="[0.3, 0.5]")  # papermill -p passes lists as strings


def test_paper_preset_offline_names_what_is_missing(tmp_path):
    proc = run_python(
        "from bildlib import experiments as X\n"
        "try:\n    X.run('xsum-t5', X.vanilla('large'), n_examples=2)\n"
        "except Exception as e:\n    print(type(e).__name__, e)\n",
        cwd=tmp_path,
        env={"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "BILD_MODELS": ""},
    )
    assert "EdinburghNLP/xsum" in proc.stdout or "kssteven/T5-large-xsum" in proc.stdout


def test_dtype_and_verify_end_are_part_of_the_results(env):
    c = X.vanilla("small")
    a = X.run(PRESET, c, n_examples=3, progress=False, settings=X.RunSettings(dtype="float32", results=env))
    b = X.run(PRESET, c, n_examples=3, progress=False, settings=X.RunSettings(dtype="bfloat16", results=env))
    assert a.attrs["key"] != b.attrs["key"] and len(list((env / PRESET).glob("*.parquet"))) == 2
    assert a.attrs["spec"]["dtypes"] == {"small": "float32"} and b.attrs["spec"]["dtypes"] == {
        "small": "bfloat16"
    }
    models = X.Models(presets.get(PRESET), dtype="bfloat16")
    again = X.run(PRESET, c, n_examples=3, progress=False, models=models, settings=X.RunSettings(results=env))
    assert again.attrs["key"] == b.attrs["key"] and not models._lm  # a cache hit loads no model
    grid = X.bild_grid(
        PRESET, models=("aligned",), fallbacks=[0.5], rollbacks=[1.0], verify_end=[False, True]
    )
    assert [g.label for g in grid] == ["bild-aligned-fb0.5-rb1.0", "bild-aligned-fb0.5-rb1.0-verify"]
    assert grid[1].verify_end and grid[0] == X.bild("aligned", 0.5, 1.0)  # False is Algorithm 1: same cache
    assert X.bild_grid(PRESET, fallbacks=[0.5], rollbacks=[1.0])[0].label == "bild-small-fb0.5-rb1.0"
    with pytest.raises(ValueError, match="verify_end must be"):
        X.bild_grid(PRESET, verify_end="[true]")  # papermill -p passes lists as strings
    with pytest.raises(ValueError, match="dtype must be"):
        X.run(PRESET, c, n_examples=3, settings=X.RunSettings(dtype="fp8", results=env))
    assert X.run(PRESET, c, n_examples=3, progress=False, settings=X.RunSettings(results=env)).attrs["spec"][
        "dtypes"
    ] == {"small": "float32"}


def test_checkpoints_replace_the_presets_models(env, mirror):
    p = presets.get(PRESET)
    a = X.run(PRESET, X.vanilla("aligned"), n_examples=4, progress=False, settings=X.RunSettings(results=env))
    b = X.run(
        PRESET,
        X.vanilla("small"),
        n_examples=4,
        progress=False,
        settings=X.RunSettings(checkpoints={"small": mirror / p.aligned}, results=env),
    )
    assert list(a["output"]) == list(b["output"])
    assert b.attrs["spec"]["models"]["small"] == a.attrs["spec"]["models"]["aligned"]  # the weights' hash
    q = X.with_checkpoints(presets.get("multi30k"), {"aligned": "data/checkpoints/multi30k-small"})
    assert q.model("aligned") == presets.get("multi30k").model("small")  # repository-relative folder
    with pytest.raises(ValueError, match="checkpoints: keys must be"):
        X.run(
            PRESET,
            X.vanilla("small"),
            n_examples=4,
            settings=X.RunSettings(checkpoints={"tiny": "x"}, results=env),
        )


def test_device_auto_and_sampling_and_rules_reach_the_results(env):
    c = X.vanilla("small")
    a = X.run(
        PRESET, c, n_examples=3, progress=False, settings=X.RunSettings(device="auto", results=env)
    )  # resolved once
    assert a.attrs["spec"]["device"] == "cpu"
    with pytest.raises(ValueError, match="device must be"):
        X.Models(presets.get(PRESET), device="gpu0")

    s1 = X.Config("bild", "aligned", 0.5, 1.0, temperature=1.0, top_p=0.9, seed=1)
    s2 = dataclasses.replace(s1, seed=2)
    r1, r2 = (
        X.run(PRESET, c, n_examples=6, progress=False, settings=X.RunSettings(results=env)) for c in (s1, s2)
    )
    again = X.run(
        PRESET,
        s1,
        n_examples=6,
        progress=False,
        flush_every=100,
        settings=X.RunSettings(warmup=0, results=env),
    )
    assert r1.attrs["key"] != r2.attrs["key"] and r1.attrs["spec"]["config"]["top_p"] == 0.9
    assert list(r1["output_ids"].map(list)) != list(r2["output_ids"].map(list))  # the seed is used
    assert list(r1["output_ids"].map(list)) == list(again["output_ids"].map(list))  # and reproducible
    assert s1.label == "bild-aligned-fb0.5-rb1.0-T1-p0.9-s1"
    with pytest.raises(ValueError, match="top_p"):
        X.Config("bild", "aligned", 0.5, 1.0, temperature=1.0, top_p=0.0)
    with pytest.raises(ValueError, match="oracle is greedy"):
        X.Config("oracle", "small", threshold=0.5, temperature=1.0)

    ours, authors = X.bild("aligned", 0.5, 1.0), X.bild("aligned", 0.5, 1.0, rules="authors")
    assert authors.label == ours.label + "-authors"
    df = X.run(PRESET, authors, n_examples=4, progress=False, settings=X.RunSettings(results=env))
    assert df["trace"].str.startswith("L").all()  # the authors' large model writes the first token
    with pytest.raises(ValueError, match="rules"):
        X.Config("vanilla", "small", rules="authors")


def test_cache_key_covers_the_code_that_decides_outputs(tmp_path):
    """Editing a decoder, model adapter, kernel or the timed call changes the code hash; editing
    the runner, the analysis or the plots does not."""
    import shutil

    from conftest import REPO

    for d in ("bildlib", "kernels"):
        shutil.copytree(REPO / d, tmp_path / d, ignore=shutil.ignore_patterns("__pycache__"))
    files = {f.relative_to(tmp_path).as_posix() for f in cache.code_files(tmp_path)}
    assert {"bildlib/decoding/bild.py", "bildlib/models/lm.py", "kernels/reference.py"} <= files
    assert "bildlib/experiments/measure.py" in files and "kernels/bench.py" not in files
    v = cache.code_version(tmp_path)
    for f in ("bildlib/analysis/__init__.py", "bildlib/plots/__init__.py", "bildlib/experiments/runner.py"):
        (tmp_path / f).write_text((tmp_path / f).read_text() + "\n# an edit\n")
        assert cache.code_version(tmp_path) == v, f
    assert {"kernels/cpu.py", "kernels/cpu_t5.cpp", "kernels/triton_attention.py"} <= files  # native, GPU
    for f in ("bildlib/decoding/bild.py", "bildlib/experiments/measure.py", "kernels/triton_policy.py",
              "kernels/cpu_t5.cpp", "kernels/cpu.py"):  # fmt: skip
        before = cache.code_version(tmp_path)
        (tmp_path / f).write_text((tmp_path / f).read_text() + "\n# an edit\n")
        assert cache.code_version(tmp_path) != before, f


def test_per_example_latency_and_best_quality():
    rows = [("vanilla-large", "vanilla", "large", 0, i, lat) for i, lat in enumerate([1.0, 2.0, 3.0])]
    rows += [("vanilla-large#1", "vanilla", "large", 1, i, lat) for i, lat in enumerate([3.0, 2.0, 1.0])]
    rows += [("b", "bild", "aligned", 0, i, lat) for i, lat in enumerate([1.0, 2.5, 0.5])]
    df = pd.DataFrame(rows, columns=["label", "method", "model", "repeat", "id", "latency_s"])
    e = A.per_example(df.assign(temperature=0.0), "b")
    assert list(e["vanilla_s"]) == [2.0, 2.0, 2.0] and list(e["slower"]) == [False, True, False]
    with pytest.raises(ValueError, match="rows labelled 'nope'"):
        A.per_example(df.assign(temperature=0.0), "nope")
    s = pd.DataFrame(
        {"label": ["x", "y", "z", "v"], "method": ["bild", "bild", "bild", "vanilla"],
         "model": ["aligned", "aligned", "small", "large"], "score": [30.0, 30.0, 31.0, 32.0],
         "speedup": [1.2, 1.5, 2.0, 1.0]}
    )  # fmt: skip
    assert A.best_quality(s, "aligned") == "y" and A.best_quality(s, "small") == "z"
    with pytest.raises(ValueError, match="no BiLD configuration"):
        A.best_quality(s[s["model"] != "small"], "small")


def test_sampled_speculative_and_sampled_baselines_are_reproducible(env):
    smp = X.sampling_of("sampled", 1.0, 0.8, 3)
    c = X.speculative("aligned", 3, smp)
    a = X.run(PRESET, c, n_examples=5, progress=False, settings=X.RunSettings(results=env / "a"))
    b = X.run(
        PRESET, c, n_examples=5, progress=False, settings=X.RunSettings(warmup=0, results=env / "b")
    )  # computed again
    assert list(a["output_ids"].map(list)) == list(b["output_ids"].map(list))
    df = X.sweep(
        PRESET,
        [c],
        n_examples=3,
        baseline_repeats=1,
        progress=False,
        sampling=smp,
        settings=X.RunSettings(results=env),
    )
    assert set(df["label"]) == {"vanilla-large-T1-p0.8-s3", "vanilla-aligned-T1-p0.8-s3", c.label}
    assert X.sampling_of("greedy", 1.0, 0.8, 3) is None
    with pytest.raises(ValueError, match="mode must be one of greedy, sampled"):
        X.sampling_of("beam", 1.0, 0.8, 3)


def test_a_sweep_loads_its_examples_once(env, monkeypatch):
    """A hub dataset loads slowly: the sweep loads it once and plans every configuration on it."""
    from bildlib import data

    load, n = data.load, {"calls": 0}

    def counted(*a, **k):
        n["calls"] += 1
        return load(*a, **k)

    monkeypatch.setattr(data, "load", counted)
    df = X.sweep(
        PRESET, GRID, n_examples=4, baseline_repeats=2, progress=False, settings=X.RunSettings(results=env)
    )
    assert n["calls"] == 1 and df["label"].nunique() == 7
    ex = data.load("iwslt2017", "val", 4)
    with pytest.raises(ValueError, match="loaded holds 4 val examples, not the first 5 of val"):
        X.plan(PRESET, GRID[0], n_examples=5, loaded=ex, settings=X.RunSettings(results=env))


def test_the_engine_is_in_the_key_and_changes_no_output(env):
    """A configuration runs on the run's engine ("auto" by default: native, the lean T5 with its
    C++ pieces, where it builds, as in this project's CI) or its own; the resolved engines are
    part of the cache key, and every engine writes the same tokens. transformers' generate and
    assisted generation run as configurations too, on HF's engine."""
    c = X.bild("aligned", 0.5, 1.0)
    kw = dict(n_examples=6, progress=False, settings=X.RunSettings(results=env))
    auto = X.run(PRESET, c, **kw)
    lean = X.run(PRESET, dataclasses.replace(c, engine="lean"), **kw)
    hf = X.run(PRESET, dataclasses.replace(c, engine="hf"), **kw)
    run_hf = X.run(PRESET, c, n_examples=6, progress=False, settings=X.RunSettings(engine="hf", results=env))
    assert auto.attrs["spec"]["engines"] == {"aligned": "native", "large": "native"}
    assert lean.attrs["spec"]["engines"] == {"aligned": "lean", "large": "lean"}
    assert hf.attrs["spec"]["engines"] == run_hf.attrs["spec"]["engines"] == {"aligned": "hf", "large": "hf"}
    assert len({auto.attrs["key"], lean.attrs["key"], hf.attrs["key"], run_hf.attrs["key"]}) == 4
    assert hf.attrs["label"].endswith("@hf") and not run_hf.attrs["label"].endswith("@hf")
    assert (
        list(auto["output_ids"].map(list))
        == list(lean["output_ids"].map(list))
        == list(hf["output_ids"].map(list))
        == list(run_hf["output_ids"].map(list))
    )
    large = X.run(
        PRESET, X.vanilla("large"), n_examples=6, progress=False, settings=X.RunSettings(results=env)
    )
    for peer in (X.Config("generate", "large"), X.Config("assisted", "aligned", window=3, threshold=0.3)):
        df = X.run(PRESET, peer, n_examples=6, progress=False, settings=X.RunSettings(results=env))
        assert set(df.attrs["spec"]["engines"].values()) == {"hf"}
        assert list(df["output_ids"].map(list)) == list(large["output_ids"].map(list))  # greedy: lossless
    bad_configs = (
        ({"method": "generate", "model": "small"}, "model must be 'large'"),
        ({"method": "assisted", "model": "aligned", "engine": "lean"}, "engine must be hf"),
        ({"method": "vanilla", "model": "large", "engine": "fast"}, "engine must be one of"),
    )
    for bad, what in bad_configs:
        with pytest.raises(ValueError, match=what):
            X.Config(**bad)


def test_a_configuration_equal_to_a_baseline_runs_once(env):
    """Config("vanilla", "small") beside the automatic vanilla small (whose unused max_small_steps
    differs), and a configuration given twice: one label and one set of rows each."""
    grid = [X.Config("vanilla", "small"), X.bild("small", 0.5, 1.0), X.bild("small", 0.5, 1.0)]
    df = X.sweep(
        PRESET, grid, n_examples=3, baseline_repeats=1, progress=False, settings=X.RunSettings(results=env)
    )
    counts = df.groupby("label").size()
    assert list(counts) == [3] * len(counts) and len(counts) == 3  # vanilla large, vanilla small, BiLD
    assert X.Config("vanilla", "small").canonical() == X.vanilla("small").canonical()
    assert X.bild("small", 0.5, 1.0).canonical() != X.bild("small", 0.5, 2.0).canonical()
    c = X.bild("small", 0.5, 1.0)
    assert dataclasses.replace(c, max_small_steps=5).label == "bild-small-fb0.5-rb1.0-max5"  # not 10: named
    twin = dataclasses.replace(c, max_small_steps=None)  # the label names no limit for 10 nor for None
    with pytest.raises(ValueError, match="share the label"):
        X.sweep(PRESET, [c, twin], n_examples=2, progress=False, settings=X.RunSettings(results=env))


def test_every_row_is_keyed_by_its_sweep(env, mirror):
    """Like for like: a configuration timed in one sweep is not reused by a sweep with other
    members (it times its own baseline); the same sweep again is all cached. A member is its
    models too: the same labels on other weights (or in another dtype) time their baseline again."""
    kw = dict(n_examples=2, baseline_repeats=1, progress=False, settings=X.RunSettings(results=env))
    a = X.sweep(PRESET, GRID[:1], **kw)
    again = X.sweep(PRESET, GRID[:1], **kw)
    b = X.sweep(PRESET, GRID[:2], **kw)
    assert again.attrs["decoded"] == {0: 0}
    assert b.attrs["decoded"] == {0: 2 * b["label"].nunique()}  # every row of b timed in b
    assert set(a["label"]) < set(b["label"])
    p, grid = presets.get(PRESET), [X.bild("student:a", 0.5, 1.0)]
    run = dict(n_examples=2, baseline_repeats=1, progress=False)
    s = X.RunSettings(results=env)
    c = X.sweep(PRESET, grid, settings=s.replace(checkpoints={"student:a": str(mirror / p.aligned)}), **run)
    d = X.sweep(PRESET, grid, settings=s.replace(checkpoints={"student:a": str(mirror / p.small)}), **run)
    assert d.attrs["decoded"] == {0: 2 * d["label"].nunique()}  # the vanilla-large baseline too
    assert "vanilla-large" in set(c["label"]) & set(d["label"])


def test_mixed_dtype_runs_the_small_models_in_float32(env, monkeypatch):
    import torch

    from bildlib.models import load as M
    from bildlib.models import load_pair

    monkeypatch.setattr(M, "native_bf16", lambda: True)  # the shipped pair is stored in bf16
    assert M.small_policy("mixed", True) == "float32" and M.small_policy("mixed", False) == "auto"
    assert (
        M.small_policy("bfloat16", True) == "bfloat16"
        and M.resolve_dtype("mixed", torch.device("cpu"), torch.bfloat16) == torch.bfloat16
    )
    p = presets.get("multi30k")
    m = X.Models(p, dtype="mixed")
    assert m.dtype("large") == torch.bfloat16
    assert (m.dtype("small"), m.dtype("aligned")) == (torch.float32, torch.float32) and not m._lm  # unloaded
    assert m.get("aligned").model.dtype == torch.float32 and m.get("large").model.dtype == torch.bfloat16
    s, lg = load_pair(p.model("aligned"), p.model("large"), dtype="mixed")
    assert (s.model.dtype, lg.model.dtype) == (torch.float32, torch.bfloat16)
    a = X.run(
        PRESET,
        X.bild("aligned", 0.5, 1.0),
        n_examples=2,
        progress=False,
        settings=X.RunSettings(dtype="mixed", results=env),
    )
    assert a.attrs["spec"]["dtypes"]["aligned"] == "float32"
    s = pd.DataFrame({"n": [2, 2], "dtype": ["bfloat16"] * 2, "small_dtype": ["", "float32"],
                      "ran_on": ["lean"] * 2, "device_name": ["cpu"] * 2})  # fmt: skip
    assert A.run_info(s)["dtype"] == "bfloat16, small models float32"
    assert A.run_info(s.assign(small_dtype=["", "bfloat16"]))["dtype"] == "bfloat16"


def test_run_settings_are_checked_once_frozen_and_travel_whole(env, monkeypatch):
    """RunSettings checks every field when made, naming it; it cannot be changed on its way (a copy
    with replace() is checked again); it pickles as Ray ships it; a dict where settings belong is
    a TypeError; and what a sweep loads (its models and examples) reaches every job beside the
    settings, not inside them."""
    import pickle
    from dataclasses import FrozenInstanceError

    from bildlib.experiments import shards

    bad = {"threads": 0, "warmup": -1, "batch_size": 0, "dtype": "fp8", "engine": "onnx", "device": "tpu",
           "checkpoints": {"tiny": "x"}}  # fmt: skip
    for name, value in bad.items():
        with pytest.raises(ValueError, match=name):
            X.RunSettings(**{name: value})
    s = X.RunSettings(results=str(env), checkpoints={"small": "a", "aligned": "b"}, threads=1)
    assert s.results == env and s.checkpoints == (("aligned", "b"), ("small", "a"))
    assert dict(s.checkpoints) == {"aligned": "b", "small": "a"} and pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(FrozenInstanceError):
        s.threads = 2
    with pytest.raises(ValueError, match="threads"):
        s.replace(threads=0)
    with pytest.raises(TypeError, match="settings must be an experiments.RunSettings"):
        X.run(PRESET, X.vanilla("small"), n_examples=2, settings={"results": env})
    seen = []
    real = shards.plan

    def plan(preset, config, split, n, settings, models, loaded, shard=None):
        seen.append((settings, models, len(loaded)))
        return real(preset, config, split, n, settings, models, loaded, shard=shard)

    monkeypatch.setattr(shards, "plan", plan)
    one = X.RunSettings(results=env, warmup=0)
    grid = [X.bild("small", 0.5, 1.0)]
    X.sweep(PRESET, grid, n_examples=2, baseline_repeats=1, progress=False, settings=one)
    assert len(seen) == 3 and all(x is one for x, _, _ in seen) and len({id(m) for _, m, _ in seen}) == 1
    assert all(n == 2 for _, _, n in seen)


def test_a_notebooks_parameters_map_onto_run_settings_in_one_place():
    from bildlib import REPO_ROOT, notebook

    params = notebook.defaults("fig4") | {"dtype": "bfloat16", "threads": 1, "checkpoints": {"aligned": "x"},
                                          "shards": 0, "address": ""}  # fmt: skip
    args = notebook.sweep_args(params)
    assert set(args) == {"split", "n_examples", "executor", "address", "shards", "settings"}
    assert args["address"] is None and args["shards"] is None
    s = args["settings"]
    assert (s.dtype, s.threads, s.engine, s.device) == ("bfloat16", 1, "auto", "cpu")
    assert s.results == REPO_ROOT / "data" / "results" and dict(s.checkpoints) == {"aligned": "x"}
    elsewhere = REPO_ROOT / "elsewhere"
    assert notebook.sweep_args(params, results=elsewhere)["settings"].results == elsewhere
    with pytest.raises(ValueError, match="threads"):
        notebook.sweep_args(params | {"threads": 0})
