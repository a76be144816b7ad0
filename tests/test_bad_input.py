"""Bad input beyond the course gets a clear error naming the file, row, column or parameter: make
report over damaged CSVs and checks files, a manifest that is not one, a source too long for its
model, and one model passed as both halves of a pair."""

import json
import os
import shutil

import pandas as pd
import pytest

from bildlib import decoding as D
from bildlib.analysis.tables import ReportError
from bildlib.data import artifacts
from bildlib.reports import readme
from conftest import REPO


@pytest.fixture(scope="module")
def shipped_pair():
    from bildlib.models import load_pair

    paths = [REPO / "data" / "checkpoints" / f"multi30k-{m}" for m in ("small-aligned", "large")]
    return load_pair(*map(str, paths), dtype="float32")


EXACTNESS = "<!-- report:exactness -->\n<!-- /report:exactness -->\n"


@pytest.fixture
def root(tmp_path):
    """A copy of the committed exactness figures: the files one report block reads."""
    shutil.copytree(REPO / "figures" / "exactness", tmp_path / "figures" / "exactness")
    return tmp_path


def test_the_committed_files_render(root):
    assert "lossless BiLD" in readme.render(EXACTNESS, root)


def _edit(f, rows, col, value):
    t = pd.read_csv(f)
    t[col] = t[col].astype(object)
    t.loc[rows, col] = value
    t.to_csv(f, index=False)


def test_a_word_among_the_numbers_names_its_row_and_column(root):
    _edit(root / "figures" / "exactness" / "cost.csv", [1], "ms_today", "fast")
    with pytest.raises(ReportError, match=r"exactness/cost.csv: column 'ms_today' is 'fast' in row 1, where"):
        readme.render(EXACTNESS, root)


def test_a_value_of_the_wrong_kind_everywhere_names_the_files_read(root):
    t = pd.read_csv(root / "figures" / "exactness" / "cost.csv")
    _edit(root / "figures" / "exactness" / "cost.csv", t.index, "ms_today", "fast")  # no number left
    with pytest.raises(ReportError, match=r"block 'exactness' \(from figures/exactness/exactness.csv, "
                                          r"figures/exactness/cost.csv\): ValueError"):  # fmt: skip
        readme.render(EXACTNESS, root)


@pytest.mark.parametrize("text, said", [
    ("", "figures/exactness/cost.csv is empty"),
    ('a,b\n1,2\n"3', "figures/exactness/cost.csv is truncated: its last line does not end"),
    ('a,b\n1,2\n"3,4"\n', "figures/exactness/cost.csv: row 1 has 1 fields, its header 2"),
])  # fmt: skip
def test_an_empty_or_cut_csv_is_named(root, text, said):
    (root / "figures" / "exactness" / "cost.csv").write_text(text)
    with pytest.raises(ReportError, match=said):
        readme.render(EXACTNESS, root)


@pytest.mark.parametrize("text, said", [
    ("{", "x_checks.json: not JSON at line 1, column 2"),
    ("[1, 2]", "x_checks.json holds a JSON list"),
    ('{"n": 1,\n "dtype": }', "x_checks.json: not JSON at line 2, column 11"),
])  # fmt: skip
def test_a_checks_file_that_is_not_an_object_is_named(tmp_path, text, said):
    from bildlib.analysis.tables import read_json

    (tmp_path / "x_checks.json").write_text(text)
    with pytest.raises(ReportError, match=said):
        read_json(tmp_path, "x_checks.json")


@pytest.mark.parametrize("doc, said", [
    ([], "a JSON list, not an object of files"),
    ({"model.safetensors": {"bytes": 3}}, "the entry 'model.safetensors' is not"),
    ({"model.safetensors": {"bytes": "3", "sha256": "0" * 64}}, "has bytes '3', not a size"),
    ({"model.safetensors": {"bytes": 3, "sha256": "xyz"}}, "has sha256 'xyz', not 64 hex digits"),
    ({"../../etc/passwd": {"bytes": 3, "sha256": "0" * 64}}, "is not a path inside the folder"),
])  # fmt: skip
def test_a_manifest_that_is_not_one_is_refused_with_its_reason(tmp_path, doc, said):
    (tmp_path / "model.safetensors").write_bytes(b"abc")
    (tmp_path / artifacts.MANIFEST).write_text(json.dumps(doc))
    why = artifacts.check(tmp_path)
    assert why.startswith(f"{tmp_path / artifacts.MANIFEST} is not a manifest: ") and said in why, why
    assert not artifacts.reusable(tmp_path, "a test build") and not tmp_path.exists()  # rebuilt, not trusted


def test_a_source_longer_than_the_model_takes_is_refused(shipped_pair):
    small, large = shipped_pair
    with pytest.raises(ValueError, match=r"source_ids has 10000 tokens; .*multi30k-small-aligned takes at "
                                         r"most 4096 \(its max_source"):  # fmt: skip
        D.bild(small, large, [5] * 10_000, max_new_tokens=8)
    with pytest.raises(ValueError, match="source_ids has 4097 tokens"):
        D.vanilla(large, [5] * 4097, max_new_tokens=8)
    with pytest.raises(ValueError, match=r"sources\[1\]: source_ids has 5000 tokens"):
        D.bild_batch(small, large, [[5, 6], [5] * 5000], max_new_tokens=8)


def test_one_model_as_both_halves_says_so(shipped_pair):
    small, _ = shipped_pair
    for decode in (D.bild, D.speculative_sampling):
        with pytest.raises(ValueError, match=r"small and large are the same model \(.*small-aligned\)"):
            decode(small, small, [5, 6, 7])


def test_a_damaged_shipped_checkpoint_stops_its_load_naming_the_file(tmp_path, monkeypatch):
    """4,096 random bytes written into the middle of a shipped model's weights (a copy, with its
    sums): the load names the file and `git checkout`; the intact copy loads; a retrain's record
    makes the sums follow."""
    from bildlib.data import shipped
    from bildlib.models import load_model

    top = tmp_path / "checkpoints"
    shutil.copytree(REPO / "data" / "checkpoints" / "multi30k-small-aligned", top / "multi30k-small-aligned")
    lines = [ln for ln in shipped.SUMS.read_text().splitlines() if "  multi30k-small-aligned/" in ln]
    (top / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(shipped, "SUMS", top / "SHA256SUMS")
    monkeypatch.setattr(shipped, "_checked", set())
    folder = top / "multi30k-small-aligned"
    load_model(folder)  # intact: loads, and is checked once
    assert folder.resolve() in shipped._checked
    w = folder / "model.safetensors"
    with open(w, "r+b") as f:
        f.seek(w.stat().st_size // 2)
        f.write(os.urandom(4096))
    shipped._checked.clear()
    with pytest.raises(ValueError, match=r"model.safetensors differs from its sum in SHA256SUMS .*`git "
                                         r"checkout -- .*small-aligned/model.safetensors` restores"):
        load_model(folder)
    shipped.record(folder)  # what training does after it writes the folder
    load_model(folder)
    (folder / "config.json").unlink()
    shipped._checked.clear()
    with pytest.raises(ValueError, match="config.json is missing in SHA256SUMS"):
        load_model(folder)


def test_the_shipped_checkpoints_match_their_sums():
    from bildlib.data import shipped

    listed = shipped.read()
    folders = {rel.split("/")[0] for rel in listed}
    assert folders == {"multi30k-large", "multi30k-small", "multi30k-small-aligned", "multi30k-tokenizer"}
    for folder in folders:
        shipped.verify(shipped.SUMS.parent / folder, shipped.SUMS)
