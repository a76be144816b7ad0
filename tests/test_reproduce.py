"""make reproduce (bildlib.experiments.paper.reproduce, .report): its fast dry path end to end on
random models (make test; tests/report_check.py opens the report in Chromium), resuming, a failed
notebook's paper rows marked missing, the refusal offline, and its whole path through papermill
(make test-e2e)."""

import subprocess
import sys

import pandas as pd
import pytest

from bildlib.analysis import reported
from bildlib.experiments.paper import report, reproduce
from conftest import REPO, run_python


def _names(preset, table):
    return [f"{r['row']} ({r['regime']})" if isinstance(r["regime"], str) else r["row"]
            for _, r in reported.rows(preset, table).iterrows()]  # fmt: skip


def test_fast_dry_run_reports_every_paper_row_and_resumes(tmp_path, capsys):
    args = [
        "--dry",
        "--fast",
        "--in-process",
        "--device",
        "cpu",
        "--root",
        str(tmp_path),
        "--presets",
        "xsum-t5",
    ]
    assert reproduce.main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan for preset xsum-t5 on cpu:") and "report: " in out
    runs = pd.read_csv(tmp_path / "runs.csv", keep_default_na=False)
    nbs = ["fig4", "fig2", "fig5", "fig8", "table3", "table5"]
    assert list(runs["notebook"]) == nbs and (runs["error"] == "").all()
    md = (tmp_path / "report.md").read_text()
    assert "**Dry run**" in md and "6 of 6 notebooks finished." in md
    for table in ("Table 1", "Table 3", "Table 4", "Table 5"):
        assert f"**{table}**, the paper's rows beside this run's" in md
        side = reported.read(tmp_path / "xsum-t5" / report.NOTEBOOK_OF[table] / f"table{table[-1]}_paper.csv")
        paper = reported.rows("xsum-t5", table)
        assert set(side["paper_score"]) == set(paper["score"])  # every paper row, read from the file
        assert all(f"{x:.2f}" in md for x in paper["score"])
        assert set(side["match"]) <= {"matched", "none qualifies", "not run"}
    claims = md[md.index("### The paper's claims on this run") :]  # decided by README's rule, on this run
    assert (
        claims.count("| **") == 7
        and "`xsum-t5/fig4/table1.csv`" in claims
        and "`xsum-t5/fig2/fig2.csv`" in claims  # against the repository's text.csv: "approximately 20%"
        and "approximately 20%" in claims
        and "`xsum-t5/table5/table5.csv`" in claims
        and "`xsum-t5/fig5/fig5_best.csv`" in claims
    )
    html = (tmp_path / "report.html").read_text()
    assert html.count("data:image/png;base64,") == md.count("![") > 0  # figures inline: self-contained
    # again: every notebook finished, so none runs
    assert reproduce.main(args) == 0
    assert capsys.readouterr().out.count("finished before, kept") == 6
    assert pd.read_csv(tmp_path / "runs.csv", keep_default_na=False).equals(runs)


def test_a_notebook_that_failed_marks_its_paper_rows_missing(tmp_path):
    runs = pd.DataFrame([{"preset": "xsum-t5", "notebook": "table5", "n": 2, "device": "cpu", "seconds": 1.0,
                          "error": "RuntimeError: CUDA out of memory"}])  # fmt: skip
    md, html = report.write_report(tmp_path, ["xsum-t5"], runs)
    text = md.read_text()
    assert (
        "0 of 1 notebooks finished. Not finished: xsum-t5 / table5: RuntimeError: CUDA out of memory" in text
    )
    assert "Table 5: missing (RuntimeError: CUDA out of memory); the paper's rows: " + ", ".join(
        _names("xsum-t5", "Table 5")) in text  # fmt: skip
    assert "<table>" not in html.read_text()


def test_offline_it_refuses_naming_what_is_missing(tmp_path):
    """A fresh interpreter (the hub's offline switch is read at import), no cache, no mirror."""
    proc = run_python(
        "from pathlib import Path\nfrom bildlib.experiments.paper import reproduce\n"
        f"try:\n    reproduce.run(Path({str(tmp_path / 'r')!r}), ['xsum-t5'], 'cpu', 2)\n"
        "except SystemExit as e:\n    print(e)\n",
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "BILD_MODELS": "", "BILD_HUB_DATA": ""},
    )
    msg = proc.stdout
    assert msg.startswith("make reproduce cannot run: it needs\n  xsum-t5: "), msg
    for name in ("kssteven/T5-small-xsum", "kssteven/T5-small-xsum-bild-aligned", "kssteven/T5-large-xsum",
                 "dataset xsum"):  # fmt: skip
        assert name in msg, msg
    assert "HF_HUB_OFFLINE=1" in msg and not (tmp_path / "r" / "runs.csv").exists()


def test_bad_arguments_are_named(capsys):
    for args, what in (
        (["--fast"], "--fast and --in-process are the dry run's fast paths"),
        (["--n", "-1"], "--n must be 0"),
    ):
        with pytest.raises(SystemExit):
            reproduce.main(args)
        assert what in capsys.readouterr().err
    assert reproduce.main(["--plan", "--presets", "cnndm-t5", "--device", "cuda", "--n", "50"]) == 0
    assert "plan for preset cnndm-t5 on cuda" in capsys.readouterr().out


@pytest.mark.e2e
def test_make_reproduce_dry_through_papermill(tmp_path):
    """The whole path as a reviewer runs it, each notebook a papermill kernel, on the dry run's
    random models and small grids (the paper's grids take about 10 min for table3 alone on 2 CPUs,
    the random models writing every token they may): one preset of each kind."""
    cmd = [sys.executable, "-m", "bildlib.experiments.paper.reproduce", "--dry", "--fast", "--device", "cpu",
           "--root", str(tmp_path), "--presets", "xsum-t5", "wikitext2-gpt2"]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    md = (tmp_path / "report.md").read_text()
    assert "7 of 7 notebooks finished." in md
    assert all(
        f"{x:.2f}" in md
        for t in ("Table 1", "Table 3", "Table 5")
        for x in reported.rows("xsum-t5", t)["score"]
    )
    assert all(f"{x:.2f}" in md for x in reported.rows("wikitext2-gpt2", "Table 2")["score"])  # arXiv v1


def test_make_reproduce_passes_every_setting_as_the_module_takes_it():
    """make reproduce's command line, printed by make -n: the Makefile's DEVICE is also make
    figures' (empty by default), which once gave `--device` no value and stopped at argparse."""
    def line(*args):
        out = subprocess.run(["make", "-n", "--no-print-directory", "reproduce", *args], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        cmd = out.replace("\\\n", " ").split("bildlib.experiments.paper.reproduce", 1)[1].split()
        reproduce.parser().parse_args(cmd)  # argparse accepts it as the module would
        return cmd

    assert line("PRESETS=xsum-t5")[:4] == ["--device", "auto", "--n", "0"]
    assert "--dry" not in line("PRESETS=xsum-t5")  # make -n's own n is not DRY
    full = ["--device", "cuda", "--n", "50", "--dry", "--fast"]
    assert line("DEVICE=cuda", "N=50", "DRY=1", "FAST=1") == full


def test_gpt2_is_fine_tuned_before_table2_lm_reads_it(tmp_path, capsys, monkeypatch):
    """wikitext2-gpt2 as v1 ran it: gpt2 and gpt2-large fine-tuned on WikiText-2 first (the dry run's:
    one epoch on two blocks of the random models), and table2_lm given those as its checkpoints."""
    seen, real = [], reproduce._execute

    def spy(nb, params, out, in_process):
        seen.append((nb, params.get("checkpoints")))
        real(nb, params, out, in_process)

    monkeypatch.setattr(reproduce, "_execute", spy)
    args = ["--dry", "--fast", "--in-process", "--device", "cpu", "--root", str(tmp_path),
            "--presets", "wikitext2-gpt2"]  # fmt: skip
    assert reproduce.main(args) == 0
    tuned = tmp_path / "wikitext2-gpt2" / "finetuned"
    assert seen == [("table2_lm", {"small": str(tuned / "gpt2"), "large": str(tuned / "gpt2-large")})]
    out = capsys.readouterr().out
    assert "fine-tuned gpt2: epoch 1 of 1" in out and "fine-tuned gpt2-large: epoch 1 of 1" in out
    assert all((tuned / m / "finetune.json").is_file() for m in ("gpt2", "gpt2-large"))
