"""The notebooks: one typed, commented parameters cell each, no outputs in git, and each runs
end to end with papermill on the shipped Multi30k pair (a few examples, a tiny grid)."""

import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import CELL_TIMEOUT, REPO, as_git_has_it

NOTEBOOKS = ["fig2", "fig4", "fig5", "fig9", "fig10", "latency_scatter", "table3", "table5", "fig8", "peers",
             "fig7", "fig6", "small_models", "pet", "quantized"]  # fmt: skip
# the end-to-end run's two halves, about 45 s each here; a notebook that reuses another's cached rows
# runs after it, in its half (fig10, fig8 and latency_scatter: fig4's; fig6: fig7's)
HALVES = [["fig4", "fig10", "fig8", "latency_scatter", "table3", "peers", "fig2", "fig5", "fig9"],
          ["fig7", "fig6", "table5", "small_models", "pet", "quantized"]]  # fmt: skip
# small_models runs on the shipped small and aligned models standing in for the students (make
# models-candidates builds them)
ALIGNED = "data/checkpoints/multi30k-small-aligned"
TRIAL = {
    "candidates": {"small": "data/checkpoints/multi30k-small", "aligned": ALIGNED},
    "fallbacks": [0.5], "lossless_fallbacks": [0.5], "step_rounds": 1, "tolerance": 100.0,
}  # fmt: skip
# fig6 / fig7 run on the shipped large standing in for the early-exit models (make models-ee
# builds the real ones): its untrained layer-1 exit decodes badly, but every path runs
STAND_IN = {
    "checkpoints": {"ee": "data/checkpoints/multi30k-large", "calm": "data/checkpoints/multi30k-large"}
}


@pytest.mark.parametrize("name", [*NOTEBOOKS, "tutorial", "table2_lm"])
def test_notebook_is_clean_and_parameterised(name):
    import papermill

    path = REPO / "notebooks" / f"{name}.ipynb"
    nb = json.loads(as_git_has_it(path))
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    assert nb["metadata"]["kernelspec"]["display_name"] == "Python 3 (ipykernel)"  # as Lab saves it
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1
    assert tagged[0]["source"][0].startswith("# Parameters: papermill's parameters cell"), (
        "the parameters cell says what it is in its first line (a reader in Lab sees no tag)"
    )
    for c in nb["cells"]:
        if c["cell_type"] == "code":
            assert c["outputs"] == [] and c["execution_count"] is None, "strip outputs before committing"
    params = papermill.inspect_notebook(str(path))
    from bildlib import notebook

    assert {k: dict(v) for k, v in params.items()} == notebook.parameters(name)  # the kernels' own reading
    cached = () if name == "tutorial" else ("results_dir",)  # the tutorial caches nothing
    for p in ("preset", "split", "n_examples", "device", "dtype", "threads", "out_dir", *cached):
        assert p in params
    for p in params.values():
        assert p["inferred_type_name"] != "None" and p["help"], (
            f"{name}: {p['name']} needs a type and a comment"
        )


def nbstrip_flags() -> list[str]:
    """The flags make setup gives nbstripout's git filter (Makefile, NBSTRIP)."""
    import re
    import shlex

    return shlex.split(re.search(r"^NBSTRIP := (.*)$", (REPO / "Makefile").read_text(), re.M)[1])


def lab_saved(name: str) -> dict:
    """The committed notebook as Lab would save it after a run: outputs, counts, the kernel's Python."""
    nb = json.loads(as_git_has_it(REPO / "notebooks" / f"{name}.ipynb"))
    nb["metadata"]["language_info"] |= {
        "version": "3.11.2", "mimetype": "text/x-python", "file_extension": ".py",
        "codemirror_mode": {"name": "ipython", "version": 3}, "nbconvert_exporter": "python",
        "pygments_lexer": "ipython3"}  # fmt: skip
    nb["metadata"]["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] == "code":
            c["execution_count"] = i + 1
            c["outputs"] = [{"name": "stdout", "output_type": "stream", "text": ["ran\n"]}]
            c["metadata"]["execution"] = {"iopub.status.busy": "2026-01-01T00:00:00Z"}
    return nb


ALL = [*NOTEBOOKS, "tutorial", "table2_lm"]


def test_git_filter_gives_back_what_git_has(tmp_path):
    # the clean filter make setup installs: a notebook saved with outputs is committed as it was
    import subprocess
    import sys

    from bildlib.notebook import jupyter

    assert nbstrip_flags() == ["--keep-id", "--extra-keys", " ".join(jupyter.EXTRA_KEYS)]  # one list of keys
    for name in ALL:
        saved = json.dumps(lab_saved(name), indent=1, ensure_ascii=False) + "\n"
        (tmp_path / f"{name}.ipynb").write_text(saved)
    files = [str(tmp_path / f"{n}.ipynb") for n in ALL]
    subprocess.run([sys.executable, "-m", "nbstripout", *nbstrip_flags(), *files], check=True)  # in place
    for name in ALL:
        got = (tmp_path / f"{name}.ipynb").read_text()
        assert got == as_git_has_it(REPO / "notebooks" / f"{name}.ipynb"), (
            f"{name}: pass it through the filter (nbstripout -t {' '.join(nbstrip_flags())})")


def test_lab_saves_the_project_notebooks_as_git_has_them(tmp_path):
    # make lab's pre-save hook: same bytes as git has, so the file's size and git status do not change
    from types import SimpleNamespace

    import nbformat

    from bildlib.notebook import jupyter

    lab = SimpleNamespace(root_dir=str(REPO))
    for name in ALL:
        model = {"type": "notebook", "content": lab_saved(name)}
        jupyter.strip_before_save(model=model, path=f"notebooks/{name}.ipynb", contents_manager=lab)
        assert nbformat.writes(model["content"]) + "\n" == as_git_has_it(REPO / "notebooks" / f"{name}.ipynb")
    mine = {"type": "notebook", "content": lab_saved("fig4")}  # a user's own notebook keeps its outputs
    jupyter.strip_before_save(model=mine, path="scratch/fig4.ipynb", contents_manager=lab)
    assert mine["content"]["cells"][1]["outputs"]
    assert "--ContentsManager.pre_save_hook=bildlib.notebook.jupyter.strip_before_save" in jupyter.command()


@pytest.fixture(scope="module")
def shipped(multi30k_dir):
    for m in ("small", "small-aligned", "large"):
        if not (REPO / "data" / "checkpoints" / f"multi30k-{m}" / "model.safetensors").is_file():
            pytest.skip(f"multi30k-{m} is not trained yet (make models)")


def test_notebooks_run_end_to_end(shipped, tmp_path):
    """Every notebook's cells, with the parameters injected after its parameters cell, in two
    processes side by side, one per CPU (bildlib.experiments.paper.dryrun.execute: one import of
    torch each, where a kernel each cost about 5 s more here). Each notebook runs on 1 thread and
    nothing here is a timing, so the halves may share the 2 CPUs; they share the results cache,
    which computes a configuration once (test_integrity). Kernels run notebooks elsewhere: the
    paper dry run through papermill, the bad parameters through papermill's command line, the
    tutorial and the course under nbgrader."""
    import subprocess
    import sys
    import time

    tiny = {
        "n_examples": 2,
        "device": "auto",  # resolved where it enters (experiments.Models)
        "threads": 1,
        "out_dir": str(tmp_path / "fig"),
        "results_dir": str(tmp_path / "res"),
    }
    from bildlib.experiments.paper.dryrun import GRID as grid
    from bildlib.experiments.paper.dryrun import NOTEBOOKS as TINY_GRIDS

    # the paper dry run's small grids (fig10, fig8 and latency_scatter reuse fig4's cached rows), here
    # with two seeds for table3's sampled mean ± std and two α_FB for table5 (its points are checked below)
    extra = TINY_GRIDS | {
        "table3": grid | {"windows": [3], "seeds": [0, 1]},  # greedy and sampled
        "table5": {"fallbacks": [0.4, 0.6], "rollbacks": [2.0], "seeds": [0, 1]},
        "fig7": STAND_IN
        | {
            "fallbacks": [0.6],
            "rollbacks": [1.0],
            "thresholds": [0.0, 1.0],
            "taus": [0],
            "two_model": False,
        },  # fmt: skip
        "fig6": STAND_IN | {"fallbacks": [0.6], "rollbacks": [1.0]},  # fig7's rows, cached
        # the aligned model stands in for the student (make models-student builds the real one)
        "fig4": TINY_GRIDS["fig4"] | {"student": "yes", "checkpoints": {"student": ALIGNED}},
        "peers": TINY_GRIDS["peers"] | {"student": "yes", "checkpoints": {"student": ALIGNED}},
        "small_models": TRIAL,
        "pet": {"runs": {"none": TRIAL["candidates"]["small"], "pairs": TRIAL["candidates"]["aligned"]},
                "step_rounds": 1},  # fmt: skip
        # two quantizations fast to build, int8 (run on its codes) and round-to-nearest 3-bit (run
        # dequantized), each timed against the bf16 large
        "quantized": {"labels": ["bf16", "int8", "rtn3"], "timed": ["int8", "rtn3"], "fallbacks": [0.5],
                      "quant_dir": str(tmp_path / "quant")},  # fmt: skip
    }
    from bildlib.quant.build import build

    build(["int8", "rtn3"], out=tmp_path / "quant")
    run = "\n".join(["import json, sys", "from bildlib.experiments.paper import dryrun",
                     "for nb, params in json.load(open(sys.argv[1])):", "    dryrun.execute(nb, params)"])
    assert sorted(sum(HALVES, [])) == sorted(NOTEBOOKS)
    procs = []
    for i, half in enumerate(HALVES):  # plan and output in files: a full pipe would stall its half
        (tmp_path / f"half{i}.json").write_text(json.dumps([(name, tiny | extra[name]) for name in half]))
        with open(tmp_path / f"half{i}.log", "w") as log:
            procs.append(subprocess.Popen([sys.executable, "-c", run, str(tmp_path / f"half{i}.json")],
                                          stdout=log, stderr=subprocess.STDOUT, cwd=REPO))  # fmt: skip
    deadline = time.monotonic() + 2 * CELL_TIMEOUT  # both halves: about 75 s here; a hang fails in minutes
    try:
        for i, proc in enumerate(procs):
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.returncode == 0, (HALVES[i], (tmp_path / f"half{i}.log").read_text()[-3000:])
    finally:
        for proc in procs:
            proc.kill()  # a no-op once it has exited; a hang must not outlive the test
    for name in NOTEBOOKS:
        fig = f"{name}_points" if name in ("table3", "table5") else name  # their CSVs are the tables
        assert (tmp_path / "fig" / f"{fig}.png").stat().st_size > 1000
        assert (tmp_path / "fig" / f"{fig}.pdf").is_file()
        checks = json.loads((tmp_path / "fig" / f"{name}_checks.json").read_text())  # printed checks, kept
        assert checks, name
        if name == "table3":
            t3, t4 = (pd.read_csv(tmp_path / "fig" / f"table{i}.csv") for i in (3, 4))
            assert list(t3["mode"]) == ["greedy"] * 4 + ["sampled"] * 4 and set(t4["mode"]) == {
                "greedy",
                "sampled",
            }
            spec = t3[t3["method"] == "Speculative (best window)"]
            assert (
                spec[["score", "speedup", "rejected_pct"]].notna().all().all() and (spec["speedup"] > 0).all()
            )
            greedy = t3[t3["mode"] == "greedy"].set_index("method")["score"]
            assert greedy["Speculative (best window)"] == greedy["Vanilla (large)"]  # lossless
            sampled = t3[(t3["mode"] == "sampled") & (t3["method"] != "Vanilla (large)")]
            assert sampled[["speedup_lo", "delta_lo"]].notna().all().all()  # over seeds and sentences
        elif name == "table5":  # vanilla and three BiLD rows, mean ± std over 2 seeds
            t5 = pd.read_csv(tmp_path / "fig" / "table5.csv")
            assert (
                t5["row"].tolist()[0] == "Vanilla (large)"
                and len(t5) == 4
                and (t5["seeds"].dropna() == 2).all()
            )
            cols = ["score_mean", "score_std", "speedup_mean", "speedup_std", "speedup_lo", "delta_lo"]
            vals = t5[cols].dropna()  # the intervals: over seeds and sentences
            assert len(vals) >= 1 and np.isfinite(vals.to_numpy()).all()
            pts = pd.read_csv(tmp_path / "fig" / "table5_points.csv")
            assert len(pts[pts["method"] == "bild"]) == 2 and (pts["seeds"] == 2).all()
        elif name == "fig8":  # FLOPs, bytes and intensity of vanilla large and BiLD, and the projection
            t = pd.read_csv(tmp_path / "fig" / "fig8.csv").set_index(["pair", "run"])
            assert len(t) == 6 and np.isfinite(t[["flops", "bytes", "intensity"]].to_numpy()).all()  # 3 pairs
            assert "T5-small/large" in t.index.get_level_values("pair")[0]  # the paper's pair first
            assert (
                (t.xs("vanilla large", level="run")[["flops_rel", "bytes_rel", "intensity_rel"]] == 1)
                .all()
                .all()
            )
            p = pd.read_csv(tmp_path / "fig" / "fig8_roofline.csv")
            assert (
                set(p["gpu"]) == {"T4", "A100", "H100"} and (p["speedup"] > 0).all() and len(p) == 3 * 3 * 3
            )
        elif name == "peers":  # every headline row; the lossless ones write vanilla large's score
            h = pd.read_csv(tmp_path / "fig" / "peers.csv").set_index("decoder")
            assert len(h) == 13 and (h["ms"] > 0).all() and (h["speedup_same_engine"] > 0).all()
            assert h["label"]["BiLD lossless (exact), with student"].startswith("bild-student-")
            assert "verify-below" in h["label"][h.index.str.contains("verify_end_below")].iloc[0]
            assert h["ran_on"]["vanilla large (hf engine)"] == "hf"
            v = h["score"]["vanilla large (native engine)"]  # auto: native, built here as in CI
            for lossless in ("HF generate (large, greedy)", "HF assisted generation, defaults",
                             "vanilla large (hf engine)", "BiLD lossless (exact)",
                             "BiLD lossless (exact), with student"):  # fmt: skip
                assert h["score"][lossless] == v
            assert len(pd.read_csv(tmp_path / "fig" / "peers_all.csv")) == 19  # 7 peers; 4 BiLD, 2 below each
        elif name in ("fig6", "fig7"):  # speedups against the full early-exit model's vanilla decoding
            s = pd.read_csv(tmp_path / "fig" / f"{name}.csv").set_index("label")
            assert checks["baseline"] == "vanilla ee" and np.isfinite(s["speedup"]).all()
            assert (s["speedup"] > 0).all() and "vanilla-ee" in s.index
            best = pd.read_csv(tmp_path / "fig" / f"{name}_best.csv")
            assert set(best["curve"]) == (
                {"early-exit BiLD", "CALM"} if name == "fig7" else {"early-exit BiLD"}
            )
            if name == "fig7":  # lambda 1 never exits: the full model's output and score
                assert s["score"]["calm-state-l1.0-tau0"] == s["score"]["vanilla-ee"]
                assert len(pd.read_csv(tmp_path / "fig" / "fig7_matched.csv")) == 5
        elif name == "small_models":  # two candidates, then the faster at 10 and 16 small steps in a row
            prof = pd.read_csv(tmp_path / "fig" / "small_models_profile.csv").set_index("label")
            assert list(prof.index) == ["small", "aligned"] and prof["agreement"].between(0, 1).all()
            assert (prof[["step_ms_float32", "step_ms_bfloat16", "large_step_ms_float32"]] > 0).all().all()
            from safetensors.torch import load_file  # each stored tensor once, as the count

            stored = sum(t.numel() for t in load_file(REPO / ALIGNED / "model.safetensors").values())
            assert list(prof["params_m"]) == [pytest.approx(stored / 1e6, abs=1e-4)] * 2  # 4 decimals
            assert (prof["positions"] > 3).all()
            h = pd.read_csv(tmp_path / "fig" / "small_models.csv")
            assert list(h["candidate"]) == ["small", "aligned"] and (h["max_small_steps"] == 10).all()
            lim = pd.read_csv(tmp_path / "fig" / "small_models_limits.csv")
            win = json.loads((tmp_path / "fig" / "small_models_limits_checks.json").read_text())["winner"]
            assert win == h.loc[h["best_speedup"].idxmax(), "candidate"]  # the faster one within tolerance
            assert list(lim["candidate"]) == [win, win] and list(lim["max_small_steps"]) == [10, 16]
            for t in (h, lim):
                assert (t["lossless_bleu"] == t["large_bleu"]).all()  # lossless: vanilla large's outputs
            assert len(pd.read_csv(tmp_path / "fig" / "small_models_all.csv")) == 4
            assert len(pd.read_csv(tmp_path / "fig" / "small_models_reliability.csv")) >= 2
            from bildlib.bench import smallmodels  # its report block, as make report renders it

            text = smallmodels.block(tmp_path, "fig")
            assert "| `aligned` | 2.07 M |" in text and "lossless BiLD ≥ 1.8×: " in text
            assert "BiLD within 100 BLEU ≥ 2.0×" in text
            assert f"The winner, `{win}` (the fastest within 100 BLEU above)" in text and "\n| 16 | " in text
        elif name == "pet":  # PET's ablation rows, PET's reported BLEU beside ours
            t = pd.read_csv(tmp_path / "fig" / "pet.csv")
            assert list(t["label"]) == ["none", "pairs"] and list(t["pet_reported_bleu"]) == [34.24, 34.57]
            assert t["bleu_vs_none"].iloc[0] == 0
            from bildlib.reports import petstudy  # its report block, as make report renders it

            assert "| `pairs` | layer pairs (L1, L3), (L2, L4) | 2.07 M |" in petstudy.block(tmp_path, "fig")
            assert (t[["step_ms_float32", "step_ms_bfloat16"]] > 0).all().all()
        elif name == "latency_scatter":  # one row per example: vanilla large against BiLD
            e = pd.read_csv(tmp_path / "fig" / f"{name}.csv")
            assert list(e["id"]) == list(range(tiny["n_examples"]))
            assert (e[["vanilla_s", "bild_s"]] > 0).all().all()
        elif name == "quantized":  # bytes, BLEU, and each timed large against the bf16 one
            q = pd.read_csv(tmp_path / "fig" / "quantized.csv").set_index("label")
            assert list(q.index) == ["bf16", "int8", "rtn3"]
            assert q["phi"]["bf16"] == 1 and q["phi"]["rtn3"] < 0.4
            assert q["delta_bleu"]["bf16"] == 0 and np.isfinite(q["delta_bleu"]["rtn3"])
            assert (q.loc[["int8", "rtn3"], ["alone_speedup", "lossless_speedup"]] > 0).all().all()
            assert pd.isna(q["lossless_speedup"]["bf16"])  # untimed
            assert q["alone_projected"]["int8"] == pytest.approx(1 / q["phi"]["int8"], rel=1e-3)
            sweeps = checks["sweeps"]
            assert set(sweeps) == {"int8", "rtn3"} and sweeps["int8"]["baseline"] == "vanilla base"
        elif name != "fig9":  # fig9 shows text; the others save the plotted summary
            s = pd.read_csv(tmp_path / "fig" / f"{name}.csv")
            assert {"label", "score", "norm_latency", "speedup", "fallback_pct", "large_pct"} <= set(
                s.columns
            )
            assert s[["score", "norm_latency", "latency_s"]].notna().all().all()
            assert (s["latency_s"] > 0).all() and s["score"].between(0, 100).all()
    t = pd.read_csv(tmp_path / "fig" / "table1.csv")
    models = ["Vanilla (large)"] + ["BiLD (unaligned)"] * 3 + ["BiLD (aligned)"] * 3 + ["BiLD (student)"] * 3
    assert list(t["model"]) == models * 2 and list(t["rule"]) == ["interval"] * 10 + ["point"] * 10
    assert {"speedup_lo", "speedup_hi", "delta_lo", "dtype", "engine", "n"} <= set(t)
    best = pd.read_csv(tmp_path / "fig" / "fig5_best.csv")  # each ablation's best points, with its intervals
    assert set(best["variant"]) == {"BiLD", "No rollback", "No fallback (window)"} and "speedup_lo" in best


def test_a_missing_early_exit_model_names_the_command_that_builds_it(tmp_path):
    """fig6's cells in this process (dryrun.execute, as papermill injects the parameters): a kernel
    and papermill's command line cost 15 s more, and the bad-parameters test below runs them."""
    from bildlib.experiments.paper import dryrun

    params = {"results_dir": str(tmp_path / "res"), "out_dir": str(tmp_path / "fig"),
              "checkpoints": {"ee": "data/checkpoints/not-built-ee"}}  # fmt: skip
    with pytest.raises(FileNotFoundError, match="make models-ee"):
        dryrun.execute("fig6", params)
    assert not (tmp_path / "res").exists()  # it stopped before computing anything


def test_no_notebook_run_writes_to_figures_unless_asked(capsys, monkeypatch, tmp_path):
    """A run in Jupyter or papermill writes build/figures/<notebook>/ (other parameters: a folder
    of their own); figures/ only in a make target's run (BILD_PUBLISH=1), where out_dir names
    it: by hand, `-p out_dir figures` once replaced the committed fig4 with a 2-sentence run.
    An out_dir that is a file is refused, named."""
    from bildlib import REPO_ROOT, notebook

    monkeypatch.delenv(notebook.PUBLISH, raising=False)
    d0 = notebook.defaults("fig4")
    for out_dir in ("figures", "figures/full", str(REPO_ROOT / "figures" / "x"), "figures/../figures"):
        with pytest.raises(ValueError, match=re.escape(f"out_dir={out_dir!r}: figures/ holds the committed")):
            notebook.outputs("fig4", d0 | {"out_dir": out_dir, "n_examples": 2})
    (tmp_path / "f").write_text("")
    with pytest.raises(ValueError, match="out_dir=.*f'.* is a file, not a folder"):
        notebook.outputs("fig4", d0 | {"out_dir": str(tmp_path / "f")})
    monkeypatch.setenv(notebook.PUBLISH, "1")  # as the make targets run papermill

    d = notebook.defaults("fig4")
    assert d["n_examples"] == 100 and d["out_dir"] == "" and d["rules"] == "ours"
    build = REPO_ROOT / "build" / "figures"
    assert notebook.outputs("fig4", d) == build / "fig4"
    assert notebook.outputs("fig4", d | {"results_dir": "/tmp/elsewhere"}) == build / "fig4"
    trial = notebook.outputs("fig4", d | {"n_examples": 4})
    assert trial.parent == REPO_ROOT / "build" / "figures" and trial.name.startswith("fig4-")
    assert notebook.outputs("fig4", d | {"n_examples": 4}) == trial  # one folder per run
    assert notebook.outputs("fig4", d | {"n_examples": 5}) != trial
    assert "n_examples=4" in capsys.readouterr().out
    assert notebook.outputs("fig4", d | {"n_examples": 4, "out_dir": "/tmp/x"}) == Path("/tmp/x")
    assert notebook.outputs("fig4", d | {"out_dir": "figures"}) == REPO_ROOT / "figures"
    assert notebook.outputs("fig4", d | {"out_dir": "figures/full"}) == REPO_ROOT / "figures" / "full"
    for name in [*NOTEBOOKS, "tutorial", "table2_lm"]:
        assert notebook.outputs(name, notebook.defaults(name)).is_relative_to(REPO_ROOT / "build")


@pytest.mark.parametrize("name", [*NOTEBOOKS, "tutorial", "table2_lm"])
def test_each_notebook_refuses_figures_as_out_dir_before_it_computes(name, tmp_path, monkeypatch):
    """The notebook's own cells, out_dir injected after its parameters cell as papermill does
    (`-p out_dir figures`, without make's BILD_PUBLISH): refused, out_dir named, nothing computed."""
    from bildlib import notebook
    from bildlib.experiments.paper import dryrun

    monkeypatch.delenv(notebook.PUBLISH, raising=False)
    cached = {} if name == "tutorial" else {"results_dir": str(tmp_path / "res")}
    built = {"small_models": TRIAL, "quantized": {"labels": ["bf16"], "timed": []},  # models this clone has
             "pet": {"runs": {"none": TRIAL["candidates"]["small"]}}}.get(name, {})  # fmt: skip
    with pytest.raises(ValueError, match=re.escape("out_dir='figures': figures/ holds the committed")):
        dryrun.execute(name, {"out_dir": "figures", "n_examples": 2} | cached | built)
    assert not (tmp_path / "res").exists()


def test_tables_show_compact_and_keep_what_varies():
    from bildlib import notebook

    df = pd.DataFrame({"label": ["a", "b"], "speedup": [1.23456, np.nan], "n": [100, 100],
                       "dtype": ["bfloat16", "float32"]})  # fmt: skip
    html = notebook.show(df, 2).to_html()
    assert "1.23" in html and "1.2346" not in html and "–" in html  # digits, a missing value
    assert ">n<" not in html and "float32" in html  # a constant run column is left out, a varying one kept
    assert 'class="row_heading' not in html  # no index column


def test_make_targets_publish_only_the_default_runs():
    """make fig4 writes build/ (a newcomer's run leaves the checkout clean); make fig4 PUBLISH=1
    and make figures pass out_dir figures, but not with PRESET or DEVICE (make -n prints the
    commands without running them)."""
    import subprocess

    def cmd(*args):
        p = subprocess.run(["make", "-n", *args], cwd=REPO, capture_output=True, text=True)
        return " ".join(p.stdout.split())

    assert "out_dir" not in cmd("fig4")
    assert "-p out_dir figures notebooks/fig4.ipynb" in cmd("fig4", "PUBLISH=1")
    assert re.search(r"BILD_PUBLISH=1 (\S+=\S+ )*\S*bin/papermill ", cmd("fig4", "PUBLISH=1"))  # outputs asks
    assert "-p out_dir figures notebooks/$nb.ipynb" in cmd("figures")  # fig4 among the notebooks
    assert "out_dir" not in cmd("fig4", "PUBLISH=1", "PRESET=cnndm-t5")
    assert "out_dir" not in cmd("fig4", "PUBLISH=1", "DEVICE=cuda")
    assert "--out figures/batch" in cmd("bench-batch")


def test_a_make_targets_terminal_shows_the_sweeps_progress(shipped, tmp_path):
    """make fig4, as a newcomer runs it (here on 2 examples, one configuration, the lean engine, a
    results folder of its own): what reaches make's output is the sweep's own progress,
    configurations x examples with its rate and ETA, line by line, not only papermill's cell counter."""
    import subprocess

    args = "-p n_examples 2 -p threads 1 -p engine lean -p results_dir " + str(tmp_path / "results")
    args += " -y '{fallbacks: [0.5], rollbacks: [1.0]}'"
    env = {**os.environ, "BILD_PROGRESS_EVERY": "0.01"}
    p = subprocess.run(["make", "--no-print-directory", "fig4", f"PM_ARGS={args}"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    said = re.search(r"to decode: (\d+) configurations x 2 examples, (\d+) decodes", out)
    assert said, out[-3000:]
    k, n = said.groups()  # the grid, its baselines and the small models alone, each on 2 examples
    states = re.findall(rf"^{k} configurations interleaved: +(\d+)%\|[ #0-9]*\| *(\d+)/{n} \[", out, re.M)
    assert len(states) > 2 and states[-1] == ("100", n), out[-3000:]  # each state a line, the last whole
    assert "\r" not in out  # no carriage returns: a log relays each line once


def test_every_notebook_execution_has_a_timeout():
    """A notebook that hangs fails, naming its cell, within its limit: every papermill run of a make
    target passes --execution-timeout, and every execution in the package and the tests passes
    papermill's execution_timeout (or runs under a subprocess timeout, or nbgrader's)."""
    import re
    import subprocess

    targets = ["fig4", "figures", "figures-full", "headline", "bench-grid", "fig4-authors", "figures-ee",
               "figures-lm", "small-models", "pet"]  # fmt: skip
    for t in targets:
        out = subprocess.run(["make", "-n", t], cwd=REPO, capture_output=True, text=True).stdout
        runs = [ln for ln in out.splitlines() if "bin/papermill " in ln]
        assert runs, t
        assert all("--execution-timeout" in ln for ln in runs), (t, runs)
        # and shows its progress in the terminal: papermill relays the notebook's text lines
        assert all("--log-output" in ln and "BILD_PROGRESS=text" in ln for ln in runs), (t, runs)
    for f in [*(REPO / "bildlib").rglob("*.py"), *(REPO / "tests").glob("*.py")]:
        text = f.read_text()
        for m in re.finditer(r"execute_notebook\(", text):
            assert "execution_timeout" in text[m.start() : m.start() + 300], f"{f.name}: no execution_timeout"
        for m in re.finditer(r'"-m", "papermill"', text):
            assert "--execution-timeout" in text[m.start() : m.start() + 400], f"{f.name}: no limit"


@pytest.mark.parametrize("name", [*NOTEBOOKS, "tutorial", "table2_lm"])
def test_parameters_are_type_checked(name):
    from bildlib import notebook

    d = notebook.defaults(name)
    notebook.check_parameters(name, d)  # the defaults pass
    wrong = {"n_examples": "abc", "threads": 2.5, "preset": 3, "split": None}
    for k, v in wrong.items():
        with pytest.raises(TypeError, match=rf"{name}: parameter {k} must be \w+, got {v!r}"):
            notebook.check_parameters(name, d | {k: v})
    with pytest.raises(TypeError, match="n_examples must be int, got True"):
        notebook.check_parameters(name, d | {"n_examples": True})
    lists = [k for k, p in notebook.parameters(name).items() if p["inferred_type_name"] == "list"]
    for k in lists:
        with pytest.raises(TypeError, match=rf"parameter {k} must be list, got '\[0.5\]' \(str\).*-y"):
            notebook.check_parameters(name, d | {k: "[0.5]"})


def test_bad_parameters_stop_a_notebook_with_a_message_that_names_them(tmp_path):
    """Through papermill's command line, which passes -p 2.5 as a float. A grid with NaN (-y
    "{fallbacks: [.nan]}") or without configurations stops in bild_grid, which each notebook calls
    before its sweep: checked here directly, as a kernel for each cost 9 s."""
    import subprocess
    import sys

    from bildlib import experiments as X

    cmd = [sys.executable, "-m", "papermill", "notebooks/fig4.ipynb", str(tmp_path / "out.ipynb"),
           "-p", "results_dir", str(tmp_path / "res"), "-p", "out_dir", str(tmp_path / "fig"),
           "-p", "n_examples", "2.5", "--execution-timeout", str(CELL_TIMEOUT)]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=2 * CELL_TIMEOUT)
    message = "fig4: parameter n_examples must be int, got 2.5 (float)"
    assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stderr[-2000:]
    with pytest.raises(ValueError, match="fallback must be a number in \\[0, 1\\] or None, got nan"):
        X.bild_grid("multi30k", fallbacks=[float("nan")])
    with pytest.raises(ValueError, match="the BiLD grid is empty: verify_end has no values"):
        X.bild_grid("multi30k", verify_end=[])
    assert not (tmp_path / "res").exists()  # nothing was computed
