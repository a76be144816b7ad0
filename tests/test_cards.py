"""Model cards: a build of a model that is not committed (make models-student, models-ee,
models-lm) writes its card beside the weights and under build/cards/ and compares it with the
committed card, which it leaves as it is (only --publish replaces it); and every command a
committed card names runs a module that exists."""

import importlib.util
import json
import re

import pytest

from bildlib.reports import cards
from conftest import REPO


def test_a_build_leaves_the_committed_card_and_says_how_it_differs(tmp_path, monkeypatch, capsys):
    committed, built, ckpt = tmp_path / "cards", tmp_path / "build-cards", tmp_path / "student"
    monkeypatch.setattr(cards, "COMMITTED", committed)
    monkeypatch.setattr(cards, "BUILT", built)
    committed.mkdir()
    ckpt.mkdir()
    old = {"val": {"bleu": 35.75}, "train": {"wall_s": 2526.0, "command": "python -m bildlib.train x"}}
    (committed / "s.json").write_text(json.dumps(old))
    (committed / "s.md").write_text("the committed card\n")
    new = {"val": {"bleu": 35.98}, "train": {"wall_s": 906.0, "command": "python -m bildlib.train x"}}
    said = cards.write_card("s", "this build's card\n", new, ckpt)
    assert (committed / "s.md").read_text() == "the committed card\n"
    assert json.loads((committed / "s.json").read_text()) == old
    assert (ckpt / "README.md").read_text() == (built / "s.md").read_text() == "this build's card\n"
    assert json.loads((ckpt / "card.json").read_text()) == new
    assert "val.bleu: committed 35.75, this build 35.98" in said and "train.wall_s" in said
    assert "train.command" not in said and "val.bleu" in capsys.readouterr().out
    cards.write_card("s", "this build's card\n", new, ckpt, publish=True)
    assert (committed / "s.md").read_text() == "this build's card\n"


def test_every_command_a_committed_card_names_exists():
    texts = [f.read_text() for f in sorted((REPO / "data" / "checkpoints" / "cards").glob("*.md"))]
    modules = {m for t in texts for m in re.findall(r"python -m ([\w.]+)", t)}
    assert modules, "the cards name no command"
    missing = sorted(m for m in modules if importlib.util.find_spec(m) is None)
    assert not missing, missing


def test_each_committed_card_is_its_measurements_rendered():
    """The committed cards' text is the generators' rendering of their committed JSON (a card is
    never typed by hand, and a renamed command shows here)."""
    from bildlib.reports import modelcard_ee as E
    from bildlib.reports import modelcard_lm as L
    from bildlib.reports import modelcard_student as S

    d = REPO / "data" / "checkpoints" / "cards"
    ms = {f.stem: json.loads(f.read_text()) for f in d.glob("*.json")}
    want = {n: E.card(ms[n], ms[E.NAMES[0]] if n != E.NAMES[0] else None) for n in E.NAMES}
    want |= {n: L.card(ms[n], ms[L.partner(n)]) for n in L.NAMES}
    want["multi30k-student-top32"] = S.card(ms["multi30k-student-top32"])
    for name, text in want.items():
        assert (d / f"{name}.md").read_text() == text, name


def test_modelcard_lm_pairs_each_card_and_refuses_an_unknown_name():
    from bildlib.reports import modelcard_lm as L

    assert [L.partner(n) for n in L.NAMES] == ["multi30k-lm-large", "multi30k-lm-small", "multi30k-lm-large"]
    with pytest.raises(SystemExit, match="no model 'nope'; the names are multi30k-lm-small, "):
        L.main(["--publish", "nope"])
