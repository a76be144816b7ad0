"""arXiv v1's GPT-2 fine-tuning on WikiText-2 (bildlib.train.gpt2; make reproduce runs it before
table2_lm on wikitext2-gpt2), on the dry run's random GPT-2 and WikiText-shaped fixture, offline."""

import json

import numpy as np
import pytest
import torch

from bildlib.experiments.paper import dryrun
from bildlib.train import gpt2

CFG = gpt2.FinetuneConfig(epochs=2, block=32, batch=2, max_blocks=4, lr=1e-3)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    e = dryrun.prepare(tmp_path_factory.mktemp("standins"), ["wikitext2-gpt2"])
    with dryrun.environment(e, None):
        yield e


def _weights(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def test_finetune_saves_its_best_epoch(env, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from bildlib.analysis import perplexity
    from bildlib.data import load
    from bildlib.models.load import locate

    log = gpt2.finetune("gpt2", tmp_path / "straight", CFG, "cpu")
    assert [e["epoch"] for e in log["epochs"]] == [1, 2] and log["blocks"] == 4
    assert not (tmp_path / "straight.resume").exists()  # a finished run leaves no state behind
    best = log["epochs"][log["best"] - 1]["val_perplexity"]
    assert best == min(e["val_perplexity"] for e in log["epochs"])
    # the saved model is the best epoch's: its val perplexity is the logged one
    m = AutoModelForCausalLM.from_pretrained(tmp_path / "straight").eval()
    tok = AutoTokenizer.from_pretrained(tmp_path / "straight")
    ids = perplexity.stream(tok, load("wikitext2", "val").texts)
    assert perplexity.score(m, ids, 32, 32).perplexity == pytest.approx(best, rel=1e-5)
    start = _weights(locate("gpt2"))
    assert any(not torch.equal(start[k], v) for k, v in _weights(tmp_path / "straight").items())


def test_an_interrupted_run_goes_on_from_its_last_epoch(env, tmp_path, monkeypatch):
    straight = gpt2.finetune("gpt2", tmp_path / "a", CFG, "cpu")
    calls = {"n": 0}
    real = gpt2._val_perplexity

    def stop_after_first(m, ids, cfg):  # the process dies after epoch 1's state is written
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(m, ids, cfg)

    monkeypatch.setattr(gpt2, "_val_perplexity", stop_after_first)
    with pytest.raises(KeyboardInterrupt):
        gpt2.finetune("gpt2", tmp_path / "b", CFG, "cpu")
    assert (tmp_path / "b.resume" / "state.pt").is_file()
    monkeypatch.setattr(gpt2, "_val_perplexity", real)
    resumed = gpt2.finetune("gpt2", tmp_path / "b", CFG, "cpu")
    got = [e["val_perplexity"] for e in resumed["epochs"]]
    np.testing.assert_allclose(got, [e["val_perplexity"] for e in straight["epochs"]], rtol=1e-5)
    a, b = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    again = gpt2.finetune("gpt2", tmp_path / "b", CFG, "cpu")  # finished: read back, not retrained
    assert again == json.loads((tmp_path / "b" / "finetune.json").read_text())


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="fewer than one block of block=512"):
        gpt2.blocks(list(range(100)), 512)
    with pytest.raises(ValueError, match="epochs must be an integer >= 1"):
        gpt2.FinetuneConfig(epochs=0)
    with pytest.raises(ValueError, match="lr must be > 0"):
        gpt2.FinetuneConfig(lr=0)
