"""make gpu-check's logic on CPU (bildlib.bench.gpu): lossless BiLD equals vanilla, a failing setting
becomes a row with its error, and the docs' block refuses a run with one."""

import json
import shutil

import pandas as pd
import pytest
import torch

from bildlib import REPO_ROOT
from bildlib.bench.gpu import check, lossless, render

CPU = torch.device("cpu")


def test_lossless_rows_on_cpu(tmp_path):
    df = lossless.lossless(CPU, 3, 1, settings=(("float32", "lean"), ("float64", "lean")), out=tmp_path)
    ok = df[df["dtype"] == "float32"].set_index("decoder")
    assert list(ok.index) == list(lossless.DECODERS)
    assert ok.loc["bild_lossless", "same_as_vanilla"] == 1.0  # distance="exact" is lossless in float32
    assert ok.loc["bild_lossless", "bleu"] == ok.loc["vanilla", "bleu"]
    assert ok.loc["vanilla", "small_calls"] == 0 and ok.loc["vanilla", "large_calls"] > 0
    assert ok.loc["bild_lossless", "small_calls"] > 0
    assert ok.loc["vanilla", "speedup"] == 1.0 and (ok["same_as_reference"] <= 1).all()
    bad = df[df["dtype"] == "float64"]
    assert len(bad) == 1 and "dtype" in bad["error"].iloc[0]  # recorded, and the run went on
    assert pd.read_csv(tmp_path / "bild.csv").shape[0] == len(df)  # written after each setting


def test_warmup_must_leave_timed_sentences():
    with pytest.raises(ValueError, match="warmup"):
        lossless.lossless(CPU, 3, 3, settings=())


def test_block_refuses_a_failed_setting(tmp_path):
    folder = tmp_path / "figures" / "gpu"
    shutil.copytree(REPO_ROOT / "figures" / "gpu", folder)
    assert "lossless" in render.block(tmp_path)  # the committed run renders
    df = pd.read_csv(folder / "bild.csv", dtype={"error": str})
    df.loc[len(df)] = {"dtype": "bfloat16", "engine": "lean", "error": "RuntimeError: CUDA out of memory"}
    df.to_csv(folder / "bild.csv", index=False)
    with pytest.raises(ValueError, match="bild.csv: a setting failed: bfloat16 lean"):
        render.block(tmp_path)


def test_summary_is_made_from_the_files(tmp_path):
    for f in ("machine.json", "bild.csv", "kernels.csv", "kernel-tests.txt"):
        shutil.copy(REPO_ROOT / "figures" / "gpu" / f, tmp_path / f)
    text = render.summary(tmp_path)
    assert json.loads((tmp_path / "machine.json").read_text())["device"] in text.splitlines()[0]
    assert "passed" in text and "bild_lossless" in text and "speculative_accept" in text


def test_without_cuda_it_lists_its_plan_and_refuses_at_once(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        check.main(["--plan"])
    assert "needs a CUDA GPU" in str(e.value) and "nothing was run" in str(e.value)
    assert "python -m bildlib.bench.gpu --device cpu" in str(e.value)  # a command that exists
    plan = capsys.readouterr().out
    assert all(f"- {part}:" in plan for part in check.PLAN)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        check.main(["--out", "/nonexistent/never-written"])  # before anything is loaded or written
    check.main(["--plan", "--device", "cpu"])  # the plan alone, no refusal


def test_parts_on_cpu(tmp_path):
    """Every part but the kernels' benchmark (CUDA only) runs on CPU, and the folder renders."""
    check.main(["--device", "cpu", "--out", str(tmp_path), "--parts", "fig4", "steps", "probes", "regime",
                "--fig4-n", "3", "--rounds", "1"])
    rg = pd.read_csv(tmp_path / "regime.csv", keep_default_na=False).set_index("model")
    assert list(rg.index) == ["multi30k-small-aligned", "multi30k-large"]  # on CPU: the pair alone
    assert (rg["notes"] == "").all(), rg["notes"]  # every engine ran
    assert (rg[["hf_ms", "lean_ms", "static_eager_ms", "static_ms", "static_call10_ms"]] > 0).all().all()
    assert rg.loc["multi30k-large", "read_MB"] > 5 * rg.loc["multi30k-small-aligned", "read_MB"]
    assert "The paper's regime" in (tmp_path / "summary.md").read_text()
    steps = pd.read_csv(tmp_path / "steps.csv")
    engines = {"hf", "lean", "native"}  # on a CPU callbench times the native engine too
    assert set(steps["engine"]) == engines and set(steps["dtype"]) == {"float32", "bfloat16"}
    t1 = pd.read_csv(tmp_path / "fig4_table1.csv")
    assert {"model", "regime", "speedup"} <= set(t1.columns) and t1["n"].eq(3).all()
    assert "Table 1 from fig4's sweep" in (tmp_path / "summary.md").read_text()
    pr = pd.read_csv(tmp_path / "probes.csv")  # this machine's choices: every kind, each dtype
    assert set(pr["kind"]) == {"linear", "rows_mm", "attention"} and pr["invariant"].all(), pr
    assert {"float32", "bfloat16"} <= {k.split()[-1].strip("'()") for k in pr[pr["kind"] == "linear"]["key"]}
    assert "Row invariance on this GPU" in (tmp_path / "summary.md").read_text()
    assert "have a row-invariant path; those without one: none." in render._probes(tmp_path)[1]


def test_dryrun_part_writes_its_table_and_fails_naming_the_run(tmp_path, monkeypatch):
    from bildlib.experiments.paper import dryrun

    seen = {}

    def fake_run(root, plan, device):
        seen.update(device=device, plan=plan)
        return pd.DataFrame([{"preset": "cnndm-t5", "notebook": "fig4", "engine": "auto", "seconds": 1.5,
                              "error": ""},
                             {"preset": "iwslt-mt5", "notebook": "fig9", "engine": "auto", "seconds": 0.5,
                              "error": "RuntimeError: out of memory"}])  # fmt: skip

    monkeypatch.setattr(dryrun, "run", fake_run)
    with pytest.raises(RuntimeError, match="1 of 2 dry runs failed, first iwslt-mt5 / fig9: RuntimeError"):
        check.dryrun(CPU, tmp_path)
    assert seen["device"] == "cpu" and seen["plan"] == dryrun.covering()
    assert (tmp_path / "dryrun.csv").is_file()  # written before the failure is raised
    line = render._dryrun(tmp_path)[1]
    assert "1 of 2 runs passed (2 presets, 2 notebooks, 2 s)" in line and "iwslt-mt5 / fig9" in line


def test_a_failed_part_is_recorded_and_rendered(tmp_path, monkeypatch):
    def no_datasets(device, out):
        raise ModuleNotFoundError("No module named 'datasets'")

    monkeypatch.setattr(check, "dryrun", no_datasets)
    with pytest.raises(SystemExit, match="these parts failed: dryrun"):
        check.main(["--device", "cpu", "--out", str(tmp_path), "--parts", "dryrun"])
    assert render.failed(tmp_path) == ["dryrun (ModuleNotFoundError: No module named 'datasets')"]
    assert "Parts that failed on this run" in (tmp_path / "summary.md").read_text()
    folder = tmp_path / "figures" / "gpu"
    shutil.copytree(REPO_ROOT / "figures" / "gpu", folder)
    (folder / "failed.txt").write_text((tmp_path / "failed.txt").read_text())
    assert "`dryrun (ModuleNotFoundError" in render.block(tmp_path)
    (folder / "failed.txt").write_text("")  # a run where every part passed
    assert "failed" not in render.block(tmp_path).lower().replace("a setting failed", "")


def test_the_lut_part_renders_one_row_per_shape(tmp_path):
    """lut.csv (kernels.lut_bench's columns) as the summary's table: one row per weight shape at one row
    of x, a column per kernel and setting."""
    import pandas as pd

    from bildlib.bench.gpu import render

    rows = [{"out": o, "in": i, "k": k, "kernel": kern, "bits": b, "sparse": sp, "bytes": 1, "us": us,
             "gbps": 1.0, "vs_bf16": 1.0}
            for o, i in ((1024, 384), (4096, 4096)) for k in (1, 4)
            for kern, b, sp, us in (("torch bf16 mm", 16, 0.0, 10.0 * k), ("triton LUT", 4, 0.0, 5.0 * k),
                                    ("triton LUT", 3, 0.0045, 6.0 * k))]  # fmt: skip
    pd.DataFrame(rows).to_csv(tmp_path / "lut.csv", index=False)
    text = "\n".join(render._lut(tmp_path))
    assert "| 1,024 × 384 | 10.0 | 5.0 | 6.0 |" in text and "| 4,096 × 4,096 | 10.0 | 5.0 | 6.0 |" in text
    assert "torch bf16" in text and "3-bit + 0.45 %" in text and "LUT 3-bit" not in text  # only what ran


def test_projection_costs_table1s_calls_at_the_pairs_steps():
    """Vanilla: a large step a token; BiLD: a small step a draft plus a 10-token call a large call."""
    from bildlib.bench.gpu.projection import project

    regime = pd.DataFrame({"model": ["t5-small", "t5-large"], "static_ms": [0.5, 2.0],
                           "static_call10_ms": [0.7, 3.0]})  # fmt: skip
    fig4 = pd.DataFrame([
        {"method": "vanilla", "model": "large", "repeat": 0, "tokens": 100, "n": 10, "drafted": 0,
         "large_calls": 0, "fallback": None, "rollback": None},
        {"method": "bild", "model": "aligned", "repeat": 0, "tokens": 100, "n": 10, "drafted": 120,
         "large_calls": 30, "fallback": 0.5, "rollback": 1.0},
    ])  # fmt: skip
    table1 = pd.DataFrame([{"rule": "interval", "model": "BiLD (aligned)", "regime": "no loss",
                            "fallback": 0.5, "rollback": 1.0, "speedup": 1.7}])  # fmt: skip
    p = project(regime, fig4, table1)
    assert list(p["pair"]) == ["T5"]  # mT5's shapes are not in this regime table
    assert p["projected_speedup"].iloc[0] == pytest.approx((10 * 2.0) / (12 * 0.5 + 3 * 3.0))
    table1.loc[0, "rollback"] = 2.0  # Table 1 names a run fig4.csv does not hold
    with pytest.raises(ValueError, match="no single run of BiLD \\(aligned\\)"):
        project(regime, fig4, table1)
