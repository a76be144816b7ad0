"""make gpu-check's logic on CPU (bildlib.gpucheck): lossless BiLD equals vanilla, a failing setting
becomes a row with its error, and the docs' block refuses a run with one."""

import json
import shutil

import pandas as pd
import pytest
import torch

from bildlib import REPO_ROOT, gpucheck

CPU = torch.device("cpu")


def test_lossless_rows_on_cpu(tmp_path):
    df = gpucheck.lossless(CPU, 3, 1, settings=(("float32", "lean"), ("float64", "lean")), out=tmp_path)
    ok = df[df["dtype"] == "float32"].set_index("decoder")
    assert list(ok.index) == list(gpucheck.DECODERS)
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
        gpucheck.lossless(CPU, 3, 3, settings=())


def test_block_refuses_a_failed_setting(tmp_path):
    folder = tmp_path / "figures" / "gpu-check"
    shutil.copytree(REPO_ROOT / "figures" / "gpu-check", folder)
    assert "lossless" in gpucheck.block(tmp_path)  # the committed run renders
    df = pd.read_csv(folder / "bild.csv", dtype={"error": str})
    df.loc[len(df)] = {"dtype": "bfloat16", "engine": "lean", "error": "RuntimeError: CUDA out of memory"}
    df.to_csv(folder / "bild.csv", index=False)
    with pytest.raises(ValueError, match="bild.csv: a setting failed: bfloat16 lean"):
        gpucheck.block(tmp_path)


def test_summary_is_made_from_the_files(tmp_path):
    for f in ("machine.json", "bild.csv", "kernels.csv", "kernel-tests.txt"):
        shutil.copy(REPO_ROOT / "figures" / "gpu-check" / f, tmp_path / f)
    text = gpucheck.summary(tmp_path)
    assert json.loads((tmp_path / "machine.json").read_text())["device"] in text.splitlines()[0]
    assert "passed" in text and "bild_lossless" in text and "speculative_accept" in text
