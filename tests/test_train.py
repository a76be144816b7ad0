"""bildlib.train on tiny models and a few dozen Multi30k pairs."""

import dataclasses
import json

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM

from bildlib import train as T
from bildlib.analysis.evaluate import translate
from bildlib.models import load_model, load_tokenizer

TINY = dict(d_model=32, d_ff=64, num_layers=2, num_decoder_layers=1, num_heads=2, d_kv=16)


def tiny(tmp_path, name="m", **kw) -> T.TrainConfig:
    base = dict(
        out=str(tmp_path / name),
        model=TINY,
        n_train=48,
        n_val=4,
        epochs=2,
        batch_size=8,
        lr=1e-2,
        warmup_steps=2,
        device="cpu",
    )
    return T.TrainConfig(**{**base, **kw})


def weights(cfg):
    return load_file(f"{cfg.out}/model.safetensors")


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, multi30k_dir):
    cfg = tiny(tmp_path_factory.mktemp("teacher"), epochs=3)
    log = T.train(cfg, progress=False)
    return cfg, log


def test_training_lowers_loss_and_saves_a_checkpoint(teacher):
    cfg, log = teacher
    losses = [e["train_loss"] for e in log["epochs"]]
    assert losses[-1] < losses[0] - 0.5, losses
    saved = json.loads((T.checkpoint_path(cfg.out) / "train_log.json").read_text())
    assert saved["epochs"] == log["epochs"] and saved["signature"].startswith("nrefs:1|")
    model = AutoModelForSeq2SeqLM.from_pretrained(cfg.out)  # plain from_pretrained
    assert model.generation_config.decoder_start_token_id == 0 and model.generation_config.num_beams == 1
    assert next(model.parameters()).dtype == torch.float32


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_checkpoint_round_trip(tmp_path, dtype):
    tok = load_tokenizer(T.checkpoint_path(T.TrainConfig.tokenizer))
    model = T.build_model(tiny(tmp_path), tok).eval()
    T.save_checkpoint(model, tok, tmp_path / "ck", dtype)
    loaded, tok2 = load_model(tmp_path / "ck", dtype="float32")  # training's dtype (the default is auto)
    assert next(loaded.parameters()).dtype == torch.float32  # bf16 files upcast on load
    x = torch.tensor([[5, 6, 7, 1]])
    ref = model.to(torch.bfloat16).float() if dtype == "bfloat16" else model
    torch.testing.assert_close(
        loaded(input_ids=x, decoder_input_ids=x).logits,
        ref(input_ids=x, decoder_input_ids=x).logits,
        rtol=0,
        atol=1e-5,
    )
    assert tok2.get_vocab() == tok.get_vocab()


def test_same_seed_same_weights(teacher, tmp_path):
    cfg, _ = teacher
    again = dataclasses.replace(cfg, out=str(tmp_path / "again"))
    T.train(again, progress=False)
    a, b = weights(cfg), weights(again)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    other = T.build_model(dataclasses.replace(cfg, seed=1), load_tokenizer(T.checkpoint_path(cfg.tokenizer)))
    assert not torch.equal(other.shared.weight, a["shared.weight"])


def killed_in_epoch_2_then_rerun(cfg, monkeypatch) -> dict:
    """Train cfg, killed during epoch 2's validation (only epoch 1 is saved), then again: the
    second run's log."""
    real_bleu, calls = T.metrics.bleu, []

    def dies_in_epoch_2(h, r):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_bleu(h, r)

    monkeypatch.setattr(T.metrics, "bleu", dies_in_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        T.train(cfg, progress=False)
    monkeypatch.setattr(T.metrics, "bleu", real_bleu)
    return T.train(cfg, progress=False)


def test_interrupted_run_resumes_to_the_same_weights(teacher, tmp_path, monkeypatch):
    cfg, _ = teacher
    cut = dataclasses.replace(cfg, out=str(tmp_path / "cut"))
    log = killed_in_epoch_2_then_rerun(cut, monkeypatch)
    assert [e["epoch"] for e in log["epochs"]] == [1, 2, 3]
    a, b = weights(cfg), weights(cut)
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ValueError, match="another config"):
        T.train(dataclasses.replace(cut, lr=1e-3), progress=False)


def test_calibration_set_is_what_the_aligned_run_trains_on(teacher, tmp_path):
    cfg, _ = teacher
    path = T.calibrate(cfg.out, tmp_path / "calib.parquet", n_train=cfg.n_train, device="cpu")
    df = pd.read_parquet(path)
    assert list(df["idx"]) == list(range(cfg.n_train))  # one output per training input, in order
    model, tok = load_model(cfg.out)
    sources = [s for s, _ in T.data.load_multi30k("train").pairs[: cfg.n_train]]
    assert list(df["output"]) == translate(model, tok, sources)
    aligned = tiny(tmp_path, "aligned", targets=str(path))
    assert T.training_pairs(aligned) == list(zip(sources, df["output"], strict=True))
    # cached: a second call with the same teacher does not recompute
    stamp = path.stat().st_mtime_ns
    assert T.calibrate(cfg.out, path, n_train=cfg.n_train) == path and path.stat().st_mtime_ns == stamp
    # the fair comparison starts from the baseline's initial weights
    tok = load_tokenizer(T.checkpoint_path(cfg.tokenizer))
    a, b = T.build_model(cfg, tok), T.build_model(aligned, tok)
    assert all(
        torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    with pytest.raises(ValueError, match="has 48 outputs but training uses 10 inputs"):
        T.training_pairs(dataclasses.replace(aligned, n_train=10))


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("epochs", 0, "epochs must be >= 1"),
        ("batch_size", -4, "batch_size must be >= 1"),
        ("n_train", 0, "n_train must be"),
        ("optimizer", "sgd", "optimizer must be"),
    ],
)
def test_bad_config(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        T.train(tiny(tmp_path, **{field: value}), progress=False)


def test_unknown_model_path(tmp_path, multi30k_dir):
    with pytest.raises(FileNotFoundError, match="does-not-exist"):
        T.train(tiny(tmp_path, model={}, init_from=str(tmp_path / "does-not-exist")), progress=False)
    with pytest.raises(FileNotFoundError, match="cannot load model"):
        load_model(tmp_path / "does-not-exist")


def test_vocabulary_mismatch(tmp_path):
    tok = load_tokenizer(T.checkpoint_path(T.TrainConfig.tokenizer))
    small_vocab = T.build_model(tiny(tmp_path), tok)
    small_vocab.resize_token_embeddings(100)
    small_vocab.config.vocab_size = 100
    small_vocab.save_pretrained(tmp_path / "v100")
    tok.save_pretrained(tmp_path / "v100")
    with pytest.raises(ValueError, match="tokenizer has 8000 entries but the model's vocabulary has 100"):
        load_model(tmp_path / "v100")


def test_empty_dataset(tmp_path, monkeypatch):
    import gzip

    d = tmp_path / "data" / "multi30k"
    d.mkdir(parents=True)
    for lang in ("de", "en"):
        gzip.open(d / f"train.{lang}.gz", "wt").close()
    monkeypatch.setenv("BILD_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(T.data.DataError, match="train.de.gz is empty"):
        T.train(tiny(tmp_path), progress=False)


def test_model_cards_and_evaluate_cli(teacher, tmp_path, capsys):
    import shutil

    from bildlib.analysis import evaluate
    from bildlib.bench import models as measured
    from bildlib.reports import modelcard

    cfg, _ = teacher
    for name in measured.PAIR:
        shutil.copytree(cfg.out, tmp_path / name)
    pair = measured.measure_pair(tmp_path, n=8, n_latency=3)
    c = pair["conditions"]
    assert c["bleu_gap_val"] == 0 and c["latency_ratio_small_over_large"] > 0.5  # one model three times
    assert c["holds"]["bleu_gap >= 4"] is False and len(c["holds"]) == 4
    m = pair["models"]["multi30k-large"]
    assert m["params"] == sum(p.numel() for p in load_model(cfg.out)[0].parameters())
    text = modelcard.pair_cards(pair)["multi30k-large"]
    assert f"**{m['val']['bleu']:.2f}**" in text and "python -m bildlib.train multi30k-large" in text
    # the card's BLEU is what `python -m bildlib.analysis.evaluate` prints
    evaluate.main([str(tmp_path / "multi30k-large"), "-n", "8"])
    assert json.loads(capsys.readouterr().out)["bleu"] == m["val"]["bleu"]


def test_fine_tune_from_a_checkpoint(teacher, tmp_path):
    # a local folder stands in for a hub checkpoint such as t5-small: the same from_pretrained path
    cfg, _ = teacher
    ft = tiny(tmp_path, "ft", model={}, init_from=cfg.out, epochs=1, prefix="translate German to English: ")
    log = T.train(ft, progress=False)
    assert (
        log["epochs"][0]["train_loss"]
        < json.loads((T.checkpoint_path(cfg.out) / "train_log.json").read_text())["epochs"][0]["train_loss"]
    )  # starts from the trained weights, not from scratch
    a, b = weights(cfg), weights(ft)
    assert a.keys() == b.keys() and not all(torch.equal(a[k], b[k]) for k in a)


def test_hub_checkpoint_offline_is_a_clear_error(tmp_path):
    from conftest import run_python

    code = (
        "from bildlib import train as T\n"
        "cfg = T.TrainConfig(out='x', init_from='google-t5/t5-small', epochs=1)\n"
        "try:\n"
        "    T.train(cfg)\n"
        "except FileNotFoundError as e:\n"
        "    print(e)\n"
    )
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    out = run_python(code, cwd=tmp_path, env=env).stdout
    assert "cannot load" in out and "'google-t5/t5-small'" in out


def test_cli_overrides():
    cfg = T.override(T.PRESETS["multi30k-small"], "optimizer=adamw")
    cfg = T.override(cfg, "lr=2e-3")
    cfg = T.override(cfg, 'model={"d_model": 64}')
    assert (cfg.optimizer, cfg.lr, cfg.model) == ("adamw", 2e-3, {"d_model": 64})
    assert T.PRESETS["multi30k-small"].optimizer == "adafactor"  # the preset itself is untouched
    with pytest.raises(ValueError, match="FIELD one of"):
        T.override(cfg, "learning_rate=1")


def test_cli_records_the_command_as_typed(monkeypatch):
    """train_log.json's command is what a user types, never the path of the machine it ran on."""
    from bildlib.train import cli

    seen = {}
    monkeypatch.setattr(
        cli, "train", lambda cfg, command: seen.update(command=command) or {"best": 0, "wall_s": 0}
    )
    cli.main(["multi30k-small", "--device", "cpu", "--set", "lr=0.01"])
    assert seen["command"] == "python -m bildlib.train multi30k-small --device cpu --set lr=0.01"


@pytest.mark.parametrize("device", [None, "cuda"])
def test_every_training_target_names_a_device(device):
    """make's training targets pass --device (auto unless DEVICE is given): an empty DEVICE once
    left `--device` without its value, and every target failed."""
    import subprocess

    args = ["make", "-n", "models", "models-student", "models-candidates", "models-lm"]
    out = subprocess.run(args + ([f"DEVICE={device}"] if device else []), capture_output=True, text=True,
                         cwd=T.checkpoint_path("."), check=True).stdout  # fmt: skip
    lines = [x for x in out.splitlines() if "bildlib.train " in x]
    assert len(lines) >= 9 and all(f"--device {device or 'auto'}" in x for x in lines), lines


def test_a_finished_run_is_reused_only_while_its_files_check_out(tmp_path, capsys, multi30k_dir):
    """A run's folder is sealed (data.artifacts): a card beside it is fine, and a run that finds it
    finished trains nothing; a truncated weights file is named and the run starts over. A folder
    from before runs were sealed is sealed as found while its weights load, and removed if not."""
    import shutil

    from bildlib.data import artifacts
    from bildlib.train import loop

    cfg = tiny(tmp_path, "run", epochs=2, n_train=16)
    first = T.train(cfg, progress=False)
    out = T.checkpoint_path(cfg.out)
    (out / "README.md").write_text("a card\n")  # what make models-student adds beside the weights
    assert T.train(cfg, progress=False)["epochs"] == first["epochs"]  # finished: nothing trained
    assert "training it again" not in capsys.readouterr().out
    f = out / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    log = T.train(cfg, progress=False)
    said = capsys.readouterr().out
    assert f"{f} has" in said and "training it again from the start" in said
    assert [e["epoch"] for e in log["epochs"]] == [1, 2] and not artifacts.check(out)

    legacy, state = tmp_path / "legacy", tmp_path / "legacy.resume" / "state.pt"
    shutil.copytree(out, legacy)
    (legacy / artifacts.MANIFEST).unlink()
    loop.verified(legacy, state)
    assert "sealed as found" in capsys.readouterr().out and not artifacts.check(legacy)
    (legacy / artifacts.MANIFEST).unlink()
    (legacy / "model.safetensors").write_bytes(b"\x00" * 10)
    loop.verified(legacy, state)
    assert f"{legacy / 'model.safetensors'} does not load" in capsys.readouterr().out and not legacy.exists()


def test_bf16_autocast_only_where_the_hardware_multiplies_bf16(monkeypatch):
    """A CPU without AVX512-BF16 or AMX emulates bf16 (a training step of the decoder-only large
    model took 107 s on an AVX2 EPYC): training there runs in float32, elsewhere as configured."""
    from bildlib.train import loop

    cfg, cpu = T.TrainConfig(out="x"), torch.device("cpu")
    monkeypatch.setattr(loop, "native_bf16", lambda: False)
    assert cfg.bf16 and not loop.use_bf16(cfg, cpu)
    assert loop.use_bf16(cfg, torch.device("cuda"))  # a GPU: as configured, without asking the CPU
    monkeypatch.setattr(loop, "native_bf16", lambda: True)
    assert loop.use_bf16(cfg, cpu) and not loop.use_bf16(dataclasses.replace(cfg, bf16=False), cpu)
