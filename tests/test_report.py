"""README's numbers: generated from the committed files (bildlib.reports.readme), checked against them,
nothing quoted by hand; the layout table names every module; the committed checks hold."""

import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from bildlib.reports import readme as report
from conftest import REPO

README = (REPO / "README.md").read_text()


def test_generated_blocks_match_the_committed_files():
    assert report.check() == {}, "run make report"
    names = [m["name"] for f in report.FILES for m in report.BLOCK.finditer((REPO / f).read_text())]
    assert sorted(names) == sorted(report.BLOCKS)  # every block once, in README or docs/results.md
    assert report.main(["--check"]) == 0


def test_editing_a_csv_makes_the_check_fail(tmp_path):
    shutil.copytree(REPO / "figures", tmp_path / "figures")
    (tmp_path / "data" / "checkpoints").mkdir(parents=True)
    shutil.copy(REPO / "data" / "checkpoints" / "pair.json", tmp_path / "data" / "checkpoints")
    shutil.copytree(REPO / "data" / "checkpoints" / "cards", tmp_path / "data" / "checkpoints" / "cards")
    shutil.copytree(REPO / "data" / "paper", tmp_path / "data" / "paper")  # the claims block's paper side
    shutil.copy(REPO / "README.md", tmp_path)  # the release line lists README's blocks (readme.off_release)
    shutil.copytree(REPO / "docs", tmp_path / "docs")  # and the docs' blocks from other code states
    assert report.check(tmp_path, REPO) == {}
    f = tmp_path / "figures" / "full" / "table1.csv"
    t = pd.read_csv(f)
    t.loc[t["speedup"].notna() & (t["model"] != "Vanilla (large)"), "speedup"] += 0.01
    t.to_csv(f, index=False)
    assert report.check(tmp_path, REPO) == {"README.md": ["claims", "headline"],
                                            "docs/results.md": ["headline-point"]}  # fmt: skip
    (tmp_path / "figures" / "fig5_best.csv").unlink()
    with pytest.raises(FileNotFoundError, match="fig5_best.csv"):
        report.render(README, tmp_path)


def test_no_result_number_stands_outside_a_block():
    outside = report.BLOCK.sub("", README)
    assert not re.findall(r"\d+(?:\.\d+)?×", outside), "a speedup typed by hand: put it in a report block"
    assert not re.findall(r"\b\d{2}\.\d{2}\b", outside), "a score typed by hand: put it in a report block"
    assert len(README.splitlines()) < 200  # what it is, the two commands, the claims, the headline, links


def test_layout_table_names_every_module_and_only_existing_ones():
    named = set()
    for line in (REPO / "docs" / "layout.md").read_text().splitlines():
        if not line.startswith("| `"):
            continue
        folder = None
        for name in re.findall(r"`([\w./]+)`", line.split("|")[1]):
            if name.endswith("/"):
                folder = name
                continue
            base = REPO / ("" if folder == "kernels/" else "bildlib") / (folder or "")
            assert (base / name).is_file(), (
                f"docs/layout.md names {folder or ''}{name}, which does not exist"
            )
            named.add((base / name).resolve())
    modules = {p.resolve() for p in [*(REPO / "bildlib").rglob("*.py"), *(REPO / "kernels").glob("*.py")]
               if p.name != "__init__.py"}  # fmt: skip
    missing = sorted(str(p.relative_to(REPO)) for p in modules - named)
    assert not missing, f"modules missing from docs/layout.md's table: {missing}"


CHECKED = ["fig4", "fig2", "fig5", "fig10", "fig8", "table3", "latency_scatter", "full/fig4", "authors/fig4",
           "fig6", "fig7", "peers/peers", "table2_lm"]  # fmt: skip


@pytest.mark.parametrize("name", CHECKED)
def test_committed_checks_hold(name):
    """What each committed run checked while it ran: the run is named (n, dtype, engine), its
    baseline's repeats agree, nothing was timed on a busy machine; table3: greedy speculative
    decoding wrote vanilla large's tokens on every sentence."""
    c = json.loads((REPO / "figures" / f"{name}_checks.json").read_text())
    if name != "table3":
        engines = set(c["engine"].split("/"))
        assert c["dtype"] in ("float32", "bfloat16") and engines <= {"native", "lean", "hf"}
        assert c["n"] >= 100 and c["threads"] == 2
        assert c["busy configurations"] == 0
        assert c["baseline spread %"] < 10, (
            "the baseline's interleaved repeats disagree: rerun on an idle machine"
        )
        assert c["signature"].startswith("nrefs:1|")
    if name == "table2_lm":  # the decoder-only pair's two equivalences, on every prompt of the run
        assert c["exact BiLD = vanilla large, % of examples"] == 100
        assert c["α_FB 0 without the step limit = vanilla small, % of examples"] == 100
    if name == "table3":
        assert c["greedy speculative = vanilla large, % of examples (worst window)"] == 100
        assert len(c["sampled seeds"]) >= 3


@pytest.mark.parametrize("csv", ["fig4", "fig5", "fig10", "fig2", "full/fig4", "authors/fig4"])
def test_committed_summaries_name_their_run_and_carry_intervals(csv):
    s = pd.read_csv(REPO / "figures" / f"{csv}.csv")
    assert {"dtype", "ran_on", "device_name", "n"} <= set(s) and s["dtype"].notna().all()
    assert s[["score_lo", "score_hi", "speedup_lo", "speedup_hi", "delta_lo", "delta_hi"]].notna().all().all()
    assert (s["score_lo"] <= s["score"] + 1e-9).all() and (s["score"] <= s["score_hi"] + 1e-9).all()


# --- make report refuses what it cannot render honestly ------------------------------------------


@pytest.fixture
def tree(tmp_path):
    """A copy of what make report reads and writes: FILES, figures/ and the models' cards."""
    shutil.copytree(REPO / "figures", tmp_path / "figures")
    shutil.copytree(REPO / "data" / "checkpoints" / "cards", tmp_path / "data" / "checkpoints" / "cards")
    shutil.copy(REPO / "data" / "checkpoints" / "pair.json", tmp_path / "data" / "checkpoints")
    shutil.copytree(REPO / "data" / "paper", tmp_path / "data" / "paper")
    for f in report.FILES:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / f, tmp_path / f)
    return tmp_path


def _bild_row(t):
    return t.index[(t["model"] == "BiLD (aligned)") & t["score"].notna()][0]


@pytest.mark.parametrize("column", ["score", "fallback", "speedup"])
def test_a_nan_in_table1_fails_naming_the_file_and_column(tree, capsys, column):
    f = tree / "figures" / "table1.csv"
    t = pd.read_csv(f)
    t.loc[_bild_row(t), column] = float("nan")
    t.to_csv(f, index=False)
    with pytest.raises(report.ReportError, match=rf"figures/table1.csv: column '{column}' is nan in row \d+"):
        report.render(README, tree)
    assert report.main(["--check", "--root", str(tree)]) == 2
    assert f"figures/table1.csv: column '{column}'" in capsys.readouterr().err
    assert report.main(["--root", str(tree)]) == 2  # nothing written
    assert (tree / "README.md").read_text() == README


def test_a_nan_or_missing_field_in_a_checks_file_fails_naming_it(tree):
    f = tree / "figures" / "fig4_checks.json"
    c = json.loads(f.read_text())
    f.write_text(json.dumps(c | {"baseline ms": float("nan")}))
    with pytest.raises(report.ReportError, match="figures/fig4_checks.json: field 'baseline ms' is nan"):
        report.render(README, tree)
    f.write_text(json.dumps({k: v for k, v in c.items() if k != "baseline ms"}))
    with pytest.raises(report.ReportError, match="figures/fig4_checks.json: field 'baseline ms' is missing"):
        report.render(README, tree)


def test_a_partial_batch_run_fails_and_counts_are_stated(tree):
    f = tree / "figures" / "batch" / "throughput.csv"
    t = pd.read_csv(f)
    t[t["batch"] == 2].to_csv(f, index=False)
    with pytest.raises(report.ReportError, match="throughput.csv: no batch 1"):
        report.render(README, tree)
    e = tree / "figures" / "batch" / "exact.json"
    j = json.loads(e.read_text())
    for c in j["cases"].values():
        c["rows"] = 8
    e.write_text(json.dumps(j))
    text = report.BLOCKS["batch-exact"](tree)
    assert text.startswith("*The first 8 of 1,014 val sentences at batch 8") and "All" not in text


def test_no_block_ever_prints_nan(tree, monkeypatch):
    monkeypatch.setitem(report.BLOCKS, "tutorial", lambda root: "5 of nan checks pass")
    with pytest.raises(report.ReportError, match="block 'tutorial' would show 'nan'"):
        report.render((REPO / "docs" / "teaching.md").read_text(), tree)


def test_the_ctranslate2_block_needs_its_peer_row_and_finite_numbers(tree):
    f = tree / "figures" / "peers" / "val-int8" / "ct2.csv"  # README's block; docs/results.md has the others
    t = pd.read_csv(f)
    assert t["decoder"].str.startswith("CTranslate2").sum() == 4  # float32 and int8, 1 and 2 threads
    assert set(t["peer"]) <= set(t["decoder"])
    assert "**" + t["peer"].iloc[0] + "**" in report.render(README, tree)  # the block names the peer
    bad = t.copy()
    bad.loc[bad.index[-1], "vs_ct2"] = float("nan")
    bad.to_csv(f, index=False)
    with pytest.raises(report.ReportError, match=r"peers/val-int8/ct2.csv: column 'vs_ct2' is nan"):
        report.render(README, tree)
    t[~t["decoder"].str.startswith("CTranslate2")].to_csv(f, index=False)
    with pytest.raises(report.ReportError, match="no CTranslate2 row"):
        report.render(README, tree)
    f.unlink()
    with pytest.raises(report.ReportError, match="no ct2.csv"):
        report.render(README, tree)


def test_a_point_outside_its_interval_or_a_dropped_bound_is_refused(tree):
    """make report checks what it renders: a BLEU outside its own interval (99.99 [32.22, 41.43])
    and a table whose speedup_lo column was removed (its intervals silently dropped from README)
    are each refused, naming the file, the row and the column."""
    f = tree / "figures" / "table1.csv"
    good = pd.read_csv(f)
    bad = good.copy()
    bad.loc[_bild_row(bad), "score"] = 99.99
    bad.to_csv(f, index=False)
    outside = r"table1.csv: row \d+: column 'score' is 99.99, outside its own interval \[[\d.]+, [\d.]+\]"
    with pytest.raises(report.ReportError, match=outside + r" \(score_lo, score_hi\)"):
        report.render(README, tree)
    good.drop(columns="speedup_lo").to_csv(f, index=False)
    with pytest.raises(report.ReportError, match="table1.csv: column 'speedup_lo' is missing"):
        report.render(README, tree)
    p = tree / "figures" / "peers" / "val" / "peers.csv"
    pd.read_csv(p).drop(columns="speedup_lo").to_csv(p, index=False)
    good.to_csv(f, index=False)
    with pytest.raises(report.ReportError, match="peers.csv: column 'speedup_same_engine_lo' is missing"):
        report.render(README, tree)


def test_a_trial_run_in_figures_is_refused(tree):
    """The hand run that once replaced figures/fig4 (2 sentences, its 7 configurations timed busy),
    and a table whose n or dtype is not its checks file's: make report refuses each, named."""
    f = tree / "figures" / "fig4_checks.json"
    c = json.loads(f.read_text())
    f.write_text(json.dumps(c | {"busy configurations": 7, "configurations": 7}))
    with pytest.raises(report.ReportError, match="fig4_checks.json: 7 of 7 configurations were timed on a "):
        report.render(README, tree)
    f.write_text(json.dumps(c | {"n": 2}))
    with pytest.raises(report.ReportError, match="fig4_checks.json: n = 2, fewer than the 100 examples"):
        report.render(README, tree)
    other = "bfloat16" if c["dtype"] == "float32" else "float32"
    f.write_text(json.dumps(c | {"dtype": other}))
    with pytest.raises(report.ReportError, match=f"table1.csv: column 'dtype' holds {c['dtype']}, its checks "
                                                 f"file .*fig4_checks.json says {other}"):  # fmt: skip
        report.render(README, tree)


def test_a_run_that_names_no_code_state_is_refused(tree, capsys, monkeypatch):
    """Every committed run names its code state; one that names none is refused, naming file and
    block. (README's and docs/results.md's blocks alone here; make report's own check covers every file.)"""
    monkeypatch.setattr(report, "FILES", ("README.md", "docs/results.md"))
    assert report.unnamed_runs(tree) == []
    f = tree / "figures" / "fig4_checks.json"
    f.write_text(json.dumps({k: v for k, v in json.loads(f.read_text()).items() if k != "code"}))
    bad = report.unnamed_runs(tree)
    assert bad and all("figures/fig4_checks.json names no code state" in b for b in bad)
    assert any(b.startswith("docs/results.md, block 'table1'") for b in bad)
    assert report.main(["--root", str(tree)]) == 2
    assert "fig4_checks.json names no code state" in capsys.readouterr().err


def test_every_doc_page_opens_with_its_contents():
    """README and every page of docs/ open with a contents paragraph listing each of its sections,
    in order, each linked to the anchor GitHub gives it (make report writes them: reports.toc); a
    section added or renamed without it fails here."""
    from bildlib.reports import toc

    pages = toc.pages()
    assert len(pages) >= 15 and REPO / "README.md" in pages
    assert toc.check() == [], "run make report"
    for p in pages:
        text = p.read_text()
        paras = text.split("\n\n")
        at = next(i for i, x in enumerate(paras) if x.startswith("**Contents:**"))
        first = next(i for i, x in enumerate(paras) if x.startswith("## "))
        assert 2 <= at <= 3 and at < first, p.name  # the title, its opening paragraph(s), then the contents
        assert len(toc.sections(text)) >= 2, f"{p.name}: one section is no table of contents"
    assert toc.slug("The paper's claims, checked here") == "the-papers-claims-checked-here"
    assert toc.slug("Table 1 and `make fig4` (α_FB ≤ 0.5, 2×)") == "table-1-and-make-fig4-α_fb--05-2"
    text = "# T\n\nIntro.\n\n## A b\n\nx\n\n```\n## not a heading\n```\n\n## A b\n"
    assert toc.render(text).split("\n\n")[2] == "**Contents:** [A b](#a-b) · [A b](#a-b-1)"
    assert toc.render(toc.render(text)) == toc.render(text)  # written once, then left as it is
    with pytest.raises(ValueError, match="x.md: a page opens with a '# ' title"):
        toc.render("no title\n\ntext\n\n## A\n", "x.md")


def test_a_first_run_is_timed_in_a_fresh_clone_and_reported_per_kind_of_cpu(tmp_path, monkeypatch):
    """firstrun.record clones the checkout, runs make setup then make fig4 there, and keeps one row per
    CPU and instruction set, with the dtype, engine and code state the run's own checks file names;
    the block lists every row, a row timed by hand saying so."""
    import subprocess

    from bildlib.reports import firstrun

    ran, real = [], subprocess.run

    def run(cmd, cwd=None, **kw):
        if cmd[0] != "make":
            return real(cmd, cwd=cwd, **kw)
        ran.append(cmd[-1])
        assert "BILD_DATA_DIR" not in kw["env"] and not (Path(cwd).parent / "shared").exists()  # alone
        if cmd[-1] == "fig4":
            out = Path(cwd) / "build" / "figures" / "fig4"
            out.mkdir(parents=True)
            checks = {"dtype": "bfloat16", "engine": "native", "code": "abc"}
            (out / "fig4_checks.json").write_text(json.dumps(checks))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(firstrun.subprocess, "run", run)
    csv = tmp_path / "figures" / "firstrun" / "fig4.csv"
    csv.parent.mkdir(parents=True)
    hand = "timed by hand elsewhere"
    pd.DataFrame([{"cpu": "Other", "isa": "AVX2", "cores": None, "setup_min": 4.0, "notebook_min": 8.0,
                   "total_min": 12.2, "measured_by": hand}]).to_csv(csv, index=False)  # fmt: skip
    row = firstrun.record(REPO, csv)
    assert ran == ["setup", "fig4"]
    assert (row["dtype"], row["engine"], row["code"]) == ("bfloat16", "native", "abc")
    again = firstrun.record(REPO, csv)  # the same kind of CPU: its row replaced, the other kept
    t = pd.read_csv(csv)
    assert len(t) == 2 and list(t["measured_by"]) == [hand, firstrun.SELF]
    assert again["cpu"] == t["cpu"].iloc[1]
    lines = firstrun.block(tmp_path).splitlines()
    assert lines[0].startswith("- **Other, AVX2:** 12 min (4 to set up, 8 for the notebook; timed by hand")
    assert f"{row['cores']} cores:**" in lines[1]
    assert "in bfloat16 on the native engine; code state `abc`)" in lines[1]
    t.loc[1, "dtype"] = None
    t.to_csv(csv, index=False)
    with pytest.raises(report.ReportError, match="column 'dtype'"):
        firstrun.block(tmp_path)  # a recorded run names what it ran in
