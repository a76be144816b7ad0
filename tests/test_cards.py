"""Model cards: a build of a model that is not committed (make models-student, models-ee,
models-lm) writes its card beside the weights and under build/cards/ and compares it with the
committed card, which it leaves as it is (only --publish replaces it); and every command a
committed card names runs a module that exists."""

import importlib.util
import json
import re

import pytest

from bildlib.reports import modelcard
from conftest import REPO


def test_a_build_leaves_the_committed_card_and_says_how_it_differs(tmp_path, monkeypatch, capsys):
    committed, built, ckpt = tmp_path / "cards", tmp_path / "build-cards", tmp_path / "student"
    monkeypatch.setattr(modelcard, "COMMITTED", committed)
    monkeypatch.setattr(modelcard, "BUILT", built)
    committed.mkdir()
    ckpt.mkdir()
    old = {"val": {"bleu": 35.75}, "train": {"wall_s": 2526.0, "command": "python -m bildlib.train x"}}
    (committed / "s.json").write_text(json.dumps(old))
    (committed / "s.md").write_text("the committed card\n")
    new = {"val": {"bleu": 35.98}, "train": {"wall_s": 906.0, "command": "python -m bildlib.train x"}}
    said = modelcard.write_card("s", "this build's card\n", new, ckpt)
    assert (committed / "s.md").read_text() == "the committed card\n"
    assert json.loads((committed / "s.json").read_text()) == old
    assert (ckpt / "README.md").read_text() == (built / "s.md").read_text() == "this build's card\n"
    assert json.loads((ckpt / "card.json").read_text()) == new
    assert "val.bleu: committed 35.75, this build 35.98" in said and "train.wall_s" in said
    assert "train.command" not in said and "val.bleu" in capsys.readouterr().out
    modelcard.write_card("s", "this build's card\n", new, ckpt, publish=True)
    assert (committed / "s.md").read_text() == "this build's card\n"


def test_every_command_a_committed_card_names_exists():
    texts = [f.read_text() for f in sorted((REPO / "data" / "checkpoints").glob("*/*.md"))]
    modules = {m for t in texts for m in re.findall(r"python -m ([\w.]+)", t)}
    assert modules, "the cards name no command"
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert not missing, missing


def test_each_committed_card_is_its_measurements_rendered():
    """Every committed card's text (the shipped pair's beside its weights, the built models' in
    data/checkpoints/cards/) is the template of its kind filled with its committed numbers: a
    card is never typed by hand, and a renamed command shows here."""
    rendered = modelcard.committed_cards()
    pair = {REPO / "data" / "checkpoints" / n / "README.md" for n in modelcard.KINDS["pair"].models}
    built = set((REPO / "data" / "checkpoints" / "cards").glob("*.md"))
    assert set(rendered) == pair | built and len(built) >= 6
    for f, text in rendered.items():
        assert f.read_text() == text, f


def test_each_kind_pairs_its_cards_and_refuses_an_unknown_name():
    assert [modelcard.partner("lm", n) for n in modelcard.KINDS["lm"].models] == [
        "multi30k-lm-large", "multi30k-lm-small", "multi30k-lm-large"]  # fmt: skip
    assert [modelcard.partner("ee", n) for n in modelcard.KINDS["ee"].models] == [None, "multi30k-ee"]
    assert modelcard.partner("student", "multi30k-student") is None
    with pytest.raises(SystemExit, match="no model 'nope'; the names are multi30k-lm-small, "):
        modelcard.main(["lm", "--publish", "nope"])


def test_a_card_says_how_its_model_was_trained_not_what_was_asked():
    """train.loop.use_bf16 trains in float32 where the CPU has no native bf16, and the log says so
    (autocast): the card reads it; a log from before that was recorded ran what its config asked."""
    m = json.loads((REPO / "data" / "checkpoints" / "cards" / "multi30k-lm-large.json").read_text())
    other = json.loads((REPO / "data" / "checkpoints" / "cards" / "multi30k-lm-small.json").read_text())
    m["train"]["config"]["bf16"] = True
    m["train"].pop("autocast", None)  # a log from before autocast was recorded: it ran what it asked
    assert "bf16 autocast, " in modelcard.card("lm", m, other)
    m["train"]["autocast"] = "float32"
    text = modelcard.card("lm", m, other)
    assert "bf16 autocast" not in text and "float32 (bf16 asked; no native bf16 here" in text
    m["train"]["config"]["bf16"] = False
    assert f"lr {m['train']['config']['lr']}, float32, " in modelcard.card("lm", m, other)  # asked none
