"""Results that refuse an edit or a cut, and bad input that says what is wrong: a cached output
edited in its parquet is recomputed; make report names a truncated CSV, a row twice, two rows of
one configuration and a checks field of the wrong type; a notebook refuses a misspelt parameter;
make grade's notes file, and a generator passed as a source, get a message naming them."""

import json
import re
import shutil
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bildlib.analysis.tables import ReportError
from bildlib.experiments import cache
from conftest import REPO


def test_an_edited_row_in_a_cached_parquet_is_recomputed(tmp_path):
    f = tmp_path / "r.parquet"
    df = pd.DataFrame({"id": [0, 1], "hyp": ["a dog runs", "a cat sits"], "ms": [1.5, 2.0]})
    cache.write(df, f, {"key": "k", "bleu": 12.3})
    assert cache.read(f, "k")["hyp"].tolist() == ["a dog runs", "a cat sits"]
    t = pq.read_table(f)  # one letter flipped, the metadata (its key, its BLEU) kept as they were
    edited = pd.DataFrame({"id": [0, 1], "hyp": ["a dog runs", "a cat sets"], "ms": [1.5, 2.0]})
    edited = pa.Table.from_pandas(edited, preserve_index=False).replace_schema_metadata(t.schema.metadata)
    pq.write_table(edited, f)
    with pytest.warns(UserWarning, match="its rows do not hash to what was recorded"):
        assert cache.read(f, "k") is None
    assert not f.exists()  # recomputed on the next run


def _copy(tmp_path, *files):
    for name in files:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp_path / name)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda t: t + t.splitlines()[-1] + "\n", "rows {n} and {m} are the same row twice"),
        (lambda t: t[: len(t) - 40], "figures/table1.csv is truncated: its last line does not end"),
        (lambda t: "\n".join(t.splitlines()[:-1] + [t.splitlines()[-1].rsplit(",", 8)[0]]) + "\n",
         "row {n} has 14 fields, its header 22 (truncated or damaged)"),
        (lambda t: t + t.splitlines()[-1].replace(",100,", ",99,") + "\n",
         "rows {n} and {m} have the same rule, model, regime"),
    ],
)  # fmt: skip
def test_make_report_names_a_table_that_is_cut_or_repeated(tmp_path, edit, message):
    """The committed table cut, damaged or with its last row twice: the error names the rows (the
    last row is row n, counting the header's line as row 0)."""
    from bildlib.reports.paper import table1

    _copy(tmp_path, "figures/table1.csv", "figures/fig4_checks.json")
    f = tmp_path / "figures/table1.csv"
    n = len(f.read_text().splitlines()) - 2  # the last row's number, as the error counts them
    f.write_text(edit(f.read_text()))
    with pytest.raises(ReportError, match=re.escape(message.format(n=n, m=n + 1))):
        table1(tmp_path)


def test_a_checks_field_of_the_wrong_type_is_named(tmp_path):
    from bildlib.reports.paper import tutorial

    _copy(tmp_path, "figures/tutorial_checks.json")
    f = tmp_path / "figures/tutorial_checks.json"
    doc = json.loads(f.read_text())
    f.write_text(json.dumps(doc | {"passed": "five"}))
    with pytest.raises(ReportError, match="field 'passed' is 'five', where it holds a whole number"):
        tutorial(tmp_path)
    f.write_text(json.dumps(doc | {"passed": True}))
    with pytest.raises(ReportError, match="field 'passed' is True"):
        tutorial(tmp_path)


def test_a_misspelt_notebook_parameter_is_refused_with_the_nearest_name():
    from bildlib import notebook

    values = notebook.defaults("fig4") | {"In": ["", "# Parameters\nn_exmaples = 3\n"]}
    with pytest.raises(NameError, match="fig4: no parameter 'n_exmaples' .*did you mean n_examples"):
        notebook.check_parameters("fig4", values)
    notebook.check_parameters("fig4", notebook.defaults("fig4") | {"In": ["# Parameters\nn_examples = 3\n"]})


def test_papermill_with_a_misspelt_parameter_fails_naming_it(tmp_path):
    """The real path: papermill injects the cell, the notebook's check refuses it before any work."""
    out = tmp_path / "out.ipynb"
    cmd = [sys.executable, "-m", "papermill", str(REPO / "notebooks/fig4.ipynb"), str(out)]
    cmd += ["-p", "n_exmaples", "3", "--execution-timeout", "300"]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    assert p.returncode != 0
    said = p.stderr + p.stdout
    assert "no parameter 'n_exmaples'" in said and "did you mean n_examples" in said


def test_make_grades_notes_file_cut_short_is_named(tmp_path):
    from bildlib.notebook.tutorial import autograde

    (tmp_path / "grading.json").write_text('{"a": ')
    with pytest.raises(ValueError, match=r"grading.json: not the JSON make grade writes"):
        autograde.grades(tmp_path)


def test_a_generator_as_source_ids_is_named_not_called_empty():
    from bildlib.models.lm import check_source

    with pytest.raises(TypeError, match="source_ids must be a sequence .* got a generator"):
        check_source((i for i in [5, 6]), 100)
