"""The paper presets offline: the checkpoints' shapes, datasets in the hub's schema, the dry run
of every preset through every notebook, the real mT5-large / T5-large shapes on both engines, and
the hub's offline cache."""

import json
import os
import subprocess
import sys

import pandas as pd
import pytest
import torch

from bildlib import data, notebook
from bildlib.analysis import reported
from bildlib.experiments import presets
from bildlib.experiments.paper import dryrun, fixtures, shapes
from conftest import REPO, run_together

# Parameter counts of the public base models (T5 paper; mT5 paper, rounded): 60 M, 770 M, 300 M, 1.2 B.
PARAMS = {"t5-small": 60e6, "t5-large": 738e6, "mt5-small": 300e6, "mt5-large": 1.23e9}


@pytest.mark.parametrize("shape", sorted(PARAMS))
def test_shapes_have_the_base_models_sizes(shape):
    from transformers import AutoModelForSeq2SeqLM

    with torch.device("meta"):
        m = AutoModelForSeq2SeqLM.from_config(shapes.config(shape))
    n = sum(p.numel() for p in m.parameters())
    if shapes.shapes()["shapes"][shape].get("tie_word_embeddings") is False:
        n += m.lm_head.weight.numel()  # mT5's own lm_head (transformers ties it at init)
    assert abs(n / PARAMS[shape] - 1) < 0.05, (shape, n)


def test_every_paper_checkpoint_has_a_shape():
    s = shapes.shapes()
    for name in dryrun.PAPER:
        p = presets.get(name)
        for which in ("small", "aligned", "large"):
            shape = s["checkpoints"][getattr(p, which)]
            assert shape.endswith("large" if which == "large" else "small")
            assert shape.startswith("mt5" if "mt5" in name else "t5")


def test_dryrun_runs_each_family_in_process(tmp_path):
    """make test's fast path of the covering run below: one preset of each family through a
    notebook (mT5 on HF's forward, T5 through fig5's grid, GPT-2 through table2_lm), and the
    paper's rows beside Tables 1, 3, 4 and 5 of a run."""
    mt5, t5 = (next(p for p in dryrun.PAPER if p.endswith(f)) for f in ("-mt5", "-t5"))
    plan = [(mt5, "fig4", "hf"), (t5, "fig5"), (dryrun.LM_PAPER[0], "table2_lm"), (t5, "table3"),
            (mt5, "table5")]  # fmt: skip
    t = dryrun.run(tmp_path, plan=plan)
    assert len(t) == 5 and (t["error"] == "").all(), t.to_string()
    checks = json.loads((tmp_path / "figures" / mt5 / "fig4-hf" / "fig4_checks.json").read_text())
    assert checks["engine"] == "hf" and checks["code"] == notebook.code_state()
    # its Table 1 beside the paper's: every paper row kept, each number the one reported.csv holds
    side = pd.read_csv(tmp_path / "figures" / mt5 / "fig4-hf" / "table1_paper.csv")
    paper = reported.rows(mt5, "Table 1")
    assert len(side) == 2 * len(paper) and set(side["match"]) <= {"matched", "none qualifies", "not run"}
    assert list(side["paper_score"]) == pytest.approx(list(paper["score"]) * 2)
    for preset, nb, table in [(t5, "table3", "Table 3"), (t5, "table3", "Table 4"),
                              (mt5, "table5", "Table 5")]:  # fmt: skip
        side = pd.read_csv(tmp_path / "figures" / preset / nb / f"table{table[-1]}_paper.csv")
        paper = reported.rows(preset, table)
        assert set(side["paper_score"]) == set(paper["score"]) and len(side) % len(paper) == 0, (table, side)


@pytest.mark.e2e
def test_dryrun_covers_every_preset_and_every_notebook(tmp_path):
    """The covering subset of make paper-dryrun (which runs all 45): every notebook on an mT5
    translation and a T5 summarization preset, fig4 on every preset (and on HF's forward for one
    of each family), and GPT-2 on WikiText-2 through table2_lm, all passing."""
    plan = dryrun.covering()
    pairs, full = [x[:2] for x in plan], dryrun.matrix()
    assert set(pairs) <= set(full) and len(plan) == len(set(plan)) and len(set(pairs)) < len(full)
    assert {p for p, _ in pairs} == set(dryrun.PAPER + dryrun.LM_PAPER)
    hf = {x[0] for x in plan if x[2:] == ("hf",)}  # fig4 on HF's forward: one preset of each family
    assert {p.split("-")[-1] for p in hf} == {"mt5", "t5"}
    for nb in dryrun.NOTEBOOKS:  # each notebook meets both model families (and so both tasks)
        kinds = {p.split("-")[-1] for p, n in pairs if n == nb}
        assert kinds == ({"gpt2"} if nb == "table2_lm" else {"mt5", "t5"}), (nb, kinds)
    cmd = [sys.executable, "-m", "bildlib.experiments.paper.dryrun", "--covering", "--root", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    t = pd.read_csv(tmp_path / "dryrun.csv", dtype={"error": str}, keep_default_na=False)
    assert proc.returncode == 0, t[t["error"] != ""].to_string() + proc.stderr[-3000:]
    assert len(t) == len(plan) and (t["error"] == "").all()
    assert set(zip(t["preset"], t["notebook"], strict=True)) == set(pairs)
    lm = json.loads((tmp_path / "figures/wikitext2-gpt2/table2_lm/table2_lm_checks.json").read_text())
    assert lm["exact BiLD = vanilla large, % of examples"] == 100  # lossless on GPT-2's shapes too
    assert lm["α_FB 0 without the step limit = vanilla small, % of examples"] == 100
    for preset in dryrun.PAPER:  # the figures and their checks were written
        checks = json.loads((tmp_path / "figures" / preset / "fig4" / "fig4_checks.json").read_text())
        # engine auto: native where the C++ pieces load in the dry run's process (models.engine.auto_engine),
        # else lean; which one depends on the machine, never HF (its own run is checked below)
        assert checks["n"] == 2 and checks["engine"] in ("native", "lean"), checks["engine"]
    for preset in hf:
        checks = json.loads((tmp_path / "figures" / preset / "fig4-hf" / "fig4_checks.json").read_text())
        assert checks["engine"] == "hf"


def test_the_full_dryrun_is_every_preset_through_every_notebook_it_takes():
    t = dryrun.matrix()
    assert len(t) == len(dryrun.PAPER) * (len(dryrun.NOTEBOOKS) - 1) + len(dryrun.LM_PAPER)
    assert {nb for p, nb in t if p in dryrun.LM_PAPER} == {"table2_lm"}
    assert {nb for _, nb in dryrun.matrix(["xsum-t5"])} == set(dryrun.NOTEBOOKS) - {"table2_lm"}


def test_dryrun_through_papermill(tmp_path):
    """One notebook in its own kernel, as `papermill` on the command line runs it."""
    t = dryrun.run(tmp_path, ["cnndm-t5"], ["fig4"], use_papermill=True, engines={})
    assert (t["error"] == "").all(), t.to_string()
    assert (tmp_path / "figures" / "cnndm-t5" / "fig4" / "fig4.png").is_file()


def test_fixtures_load_through_load_hub(tmp_path, monkeypatch):
    fixtures.write(tmp_path)
    monkeypatch.setenv("BILD_HUB_DATA", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for name, spec in data.HUB_DATASETS.items():
        s = data.load_hub(name, "test", n=3)
        assert len(s) == 3 and s.task == spec.task
        if spec.task.kind == "translation":
            assert s.pairs[0] == fixtures.PAIRS[0]
        elif spec.task.kind == "language_modeling":  # n counts prompts; the texts stay whole
            assert s.texts == [x.strip() for x in fixtures.lines() if x.strip()] and len(s.texts) == 5
            prompt, rest = s.pairs[0]
            assert len(prompt.split()) == 24 and f"{prompt} {rest}" == s.texts[1]
        else:
            assert s.pairs[0] == fixtures.DOCUMENTS[0] and s.task.prefix == "summarize: "


def _rename(old, new):
    return lambda name, rows: [{(new if k == old else k): v for k, v in r.items()} for r in rows]


@pytest.mark.parametrize("preset,dataset,mutate,says", [
    ("xsum-t5", "xsum", _rename("document", "text"), "expected column 'document' (summarization)"),
    ("cnndm-t5", "cnn_dailymail", _rename("highlights", "summary"), "expected column 'highlights'"),
    ("wikitext2-gpt2", "wikitext2", _rename("text", "line"), "expected column 'text' (language_modeling)"),
    ("wmt2014-mt5", "wmt14", lambda n, rows: [{"translation": {"de_DE": r["translation"]["de"],
                                                               "en": r["translation"]["en"]}} for r in rows],
     "expected column 'translation' to hold {'de', 'en'}, found ['de_DE', 'en']"),
])  # fmt: skip
def test_a_broken_schema_names_preset_dataset_and_column(tmp_path, monkeypatch, preset, dataset, mutate,
                                                         says):  # fmt: skip
    from bildlib.experiments import runner

    fixtures.write(tmp_path, [dataset], mutate=mutate)
    monkeypatch.setenv("BILD_HUB_DATA", str(tmp_path))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    with pytest.raises(data.DataError) as e:
        runner.examples(presets.get(preset), "val", 2)
    msg = str(e.value)
    assert msg.startswith(f"preset {preset}: hub dataset {data.HUB_DATASETS[dataset].path!r}"), msg
    assert says in msg, msg


def test_hub_data_folder_without_the_file_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("BILD_HUB_DATA", str(tmp_path))
    no_file = r"BILD_HUB_DATA=.* has no wmt/wmt14/de-en/test\.parquet"
    with pytest.raises(data.DatasetUnavailableError, match=no_file):
        data.load_hub("wmt14", "test")


@pytest.mark.parametrize("shape,layers", [
    pytest.param("mt5-large", None, marks=pytest.mark.e2e),
    pytest.param("t5-large", None, marks=pytest.mark.e2e),
    ("t5-large", 2),  # every product at its real shape (and probed there), a twelfth of the layers
])  # fmt: skip
def test_real_shape_one_decode_step_on_each_engine(shape, layers):
    """The real mT5-large (1.2 B) and T5-large (738 M) shapes, random weights: one step and one
    3-token call. In fp32 the lean engine equals HF. In bf16 both round away from fp32 (a random
    24-layer mT5 is ill-conditioned: both land ~1 logit away), and the lean engine no further
    than HF does. make test runs T5-large's widths, vocabulary and heads at 2 layers (14 s against 36 on
    the Intel Xeon); make test-e2e the full depth of both."""
    from bildlib.models import LM

    real = shapes.shapes()["shapes"][shape]
    depth = shapes.Scale(d_model=real["d_model"], d_kv=real["d_kv"], heads=real["num_heads"],
                         d_ff=real["d_ff"], layers=layers, large_layers=layers)  # fmt: skip
    m = shapes.model_for(shape, depth if layers else None)
    assert (m.config.d_model, m.config.vocab_size) == (real["d_model"], real["vocab_size"])
    tok = shapes.tokenizer(shape.split("-")[0], fixtures.words())
    src = tok(fixtures.PAIRS[0][0])["input_ids"]

    def logits(engine: str) -> torch.Tensor:
        lm = LM(m, tok, shape, engine)
        assert lm.engine == engine
        bos = lm.start(src)
        return torch.cat([lm.forward([bos]), lm.forward([5, 6, 7])]).float()  # (4, V)

    ref = logits("hf")
    assert ref.shape == (4, m.config.vocab_size)
    # fp32: op order only. A random 24-layer mT5 magnifies it: HF's own logits lie 0.006 from
    # its float64 forward, the lean engine's 0.014 (its oneDNN products round about twice as far
    # from float64 as MKL's; measured on the AVX512 EPYC), up to 1.6e-3 of the largest logit.
    assert (logits("lean") - ref).abs().max() < 3e-3 * ref.abs().max()
    m = m.to(torch.bfloat16)
    err = {e: (logits(e) - ref).abs().mean().item() for e in ("lean", "hf")}
    assert err["lean"] <= 1.5 * err["hf"] + 1e-3, err


def test_offline_hub_cache_is_used(tmp_path):
    """HF_HUB_OFFLINE=1 with a checkpoint in the hub's cache layout (models--owner--name/
    snapshots/<rev>, refs/main): the hub id loads from it, with no $BILD_MODELS mirror."""
    hub = "kssteven/T5-small-cnndm"
    snap = tmp_path / "hf" / "hub" / "models--kssteven--T5-small-cnndm" / "snapshots" / ("0" * 40)
    shapes.save(shapes.model_for("t5-small", shapes.Scale()), shapes.tokenizer("t5", fixtures.words()), snap,
                "t5-small")  # fmt: skip
    (snap.parents[1] / "refs").mkdir()
    (snap.parents[1] / "refs" / "main").write_text("0" * 40)
    code = ("from bildlib.models import LM\n"
            f"lm = LM.from_pretrained({hub!r}, engine='lean')\n"
            "print(lm.model.config.d_model, len(lm.tok), lm.engine)\n")  # fmt: skip
    env = {"HF_HUB_OFFLINE": "1", "BILD_MODELS": ""}
    cached, empty = run_together([{"args": [sys.executable, "-c", code], "cwd": tmp_path,
                                   "env": os.environ | env | {"HF_HOME": str(tmp_path / home)}}
                                  for home in ("hf", "empty")])  # two fresh interpreters side by side
    assert cached.returncode == 0, cached.stderr[-3000:]
    assert cached.stdout.split()[-3:] == ["32", "32100", "lean"]
    proc = empty
    assert proc.returncode != 0 and hub in proc.stderr, proc.stderr[-1500:]
    assert "not in the Hugging Face cache" in proc.stderr, proc.stderr[-1500:]


def test_early_exit_notebooks_refuse_a_paper_preset():
    with pytest.raises(ValueError, match="has no ee model"):
        presets.get("iwslt2017-mt5").model("ee")


def test_plan_before_a_long_run():
    from bildlib.experiments import preflight

    d = {p: preflight.plan(p, "cuda", 2, 500) for p in ["multi30k", *dryrun.PAPER]}
    assert d["iwslt2017-mt5"]["params_m"]["large"] == 1230 and d["cnndm-t5"]["params_m"]["small"] == 61
    assert d["iwslt2017-mt5"]["memory_gb"] > d["cnndm-t5"]["memory_gb"] > d["multi30k"]["memory_gb"] > 0
    assert all(0 < v["projected_fig4_minutes"] for v in d.values())
    assert d["cnndm-t5"]["fig4_configurations"] == len(presets.get("cnndm-t5").fallback_grid) * len(
        presets.get("cnndm-t5").rollback_grid) * 2 + 5  # fmt: skip
    text = preflight.describe(d["cnndm-t5"])
    assert "kssteven/T5-large-cnndm (738 M)" in text and "a model, not a measurement" in text
    assert "GPUs only" in preflight.describe(preflight.plan("cnndm-t5", "cpu", 4, 10))
    dry = subprocess.run(["make", "-n", "figures", "PRESET=cnndm-t5", "DEVICE=cuda"], cwd=REPO,
                         capture_output=True, text=True).stdout  # fmt: skip
    assert "bildlib.experiments.preflight --preset cnndm-t5 --device cuda" in dry
    assert "-p preset cnndm-t5 -p device cuda" in dry


def test_cuda_branches_logic_on_cpu():
    """The CUDA branches whose logic needs no GPU: the dtype policy on a cuda device, and a Ray
    shard asking for a GPU (a fake cluster's resource table)."""
    from bildlib.experiments import cluster
    from bildlib.models import resolve_dtype

    cuda = torch.device("cuda")  # a device object; nothing is allocated on it
    assert resolve_dtype("default", cuda, torch.bfloat16) == torch.bfloat16  # the stored dtype on a GPU
    assert resolve_dtype("auto", cuda, torch.float16) == torch.float16
    from bildlib.models.load import native_bf16

    cpu_bf16 = torch.bfloat16 if native_bf16() else torch.float32  # default: auto (docs/results.md)
    assert resolve_dtype("default", torch.device("cpu"), torch.bfloat16) == cpu_bf16

    class FakeRay:
        def __init__(self, have):
            self.have = have

        def cluster_resources(self):
            return self.have

    gpus = FakeRay({"CPU": 8, "GPU": 2})
    assert cluster.resources(gpus, "cuda", 2) == ({"num_gpus": 1, "num_cpus": 1}, "cuda")
    assert cluster.resources(gpus, "auto", 2)[1] == "cuda"
    assert cluster.resources(FakeRay({"CPU": 8}), "auto", 2) == ({"num_cpus": 2}, "cpu")
    with pytest.raises(ValueError, match="asks for 1 GPUs"):
        cluster.resources(FakeRay({"CPU": 8}), "cuda", 2)


def test_paper_presets_truncate_and_stop_as_the_authors_script():
    """The paper presets: α_RB every integer in [1, 10]; sources cut to 1024 tokens with the EOS kept
    (the tokenizer's own truncation, as Hugging Face's run_translation), at most 127 new tokens
    (its max_length 128 counts the start token); the embedded default keeps whole sources."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from bildlib.experiments import preflight
    from bildlib.models import LM

    for name in dryrun.PAPER:
        p = presets.get(name)
        assert (p.max_source_tokens, p.max_new_tokens) == (1024, 127), name
    assert presets.get("wmt2014-mt5").rollback_grid == tuple(float(x) for x in range(1, 11))
    assert presets.get("multi30k").max_source_tokens is None
    text = preflight.describe(preflight.plan("iwslt2017-mt5", "cpu", 4, 10))
    assert "α_RB 1, 2, 3, 4, 5, 6, 7, 8, 9, 10; sources truncated to 1024 tokens; at most 127 new" in text
    lm = SimpleNamespace(tok=AutoTokenizer.from_pretrained(REPO / "data" / "checkpoints" / "multi30k-large"))
    p = presets.dataclasses.replace(presets.get("multi30k"), max_source_tokens=6)
    src = "ein mann mit einem roten hut sitzt auf einer bank im park"
    model = SimpleNamespace(encode=lambda t, m: LM.encode(lm, t, m))
    whole, cut = LM.encode(lm, src), p.source_ids(model, src)
    eos = lm.tok.eos_token_id
    assert len(whole) > 6 and whole[-1] == eos and cut == [*whole[:5], eos]
