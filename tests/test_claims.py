"""README's claims block (bildlib.analysis.claims, .verdicts): each verdict follows its rule, recomputed
here from the committed CSV; a changed committed number moves it; every paper number shown comes
from data/paper/reported.csv; bad files are named."""

import itertools
import re
import shutil

import pandas as pd
import pytest

from bildlib.analysis import claims, verdicts
from bildlib.analysis.tables import ReportError
from bildlib.reports import readme as report
from conftest import REPO


@pytest.fixture
def tree(tmp_path):
    for d in ("figures", "data/paper"):
        shutil.copytree(REPO / d, tmp_path / d)
    (tmp_path / "data" / "checkpoints").mkdir()
    shutil.copy(REPO / "data" / "checkpoints" / "pair.json", tmp_path / "data" / "checkpoints")
    return tmp_path


def _verdicts(root) -> dict[str, str]:
    """{claim: verdict} as the block prints them."""
    out = {}
    for line in claims.block(root).splitlines()[2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out[cells[0]] = cells[3].strip("*")
    return out


def test_the_committed_block_is_the_rendered_one():
    text = (REPO / "README.md").read_text()
    body = next(m["body"] for m in report.BLOCK.finditer(text) if m["name"] == "claims")
    assert body.strip() == claims.block(REPO).strip()
    assert len(_verdicts(REPO)) == 8 and set(_verdicts(REPO).values()) <= set(verdicts.VERDICTS)


def test_the_no_loss_verdict_recomputed_from_its_csv():
    """BiLD at no loss: unaligned or aligned, within 0.2 at 95 % (its regime row), faster than
    vanilla on the interval (its lower end above vanilla's upper end), or on the point only."""
    t = pd.read_csv(REPO / "figures" / "full" / "table1.csv")
    t = t[t["rule"] == "interval"]
    van = t[t["model"] == "Vanilla (large)"].iloc[0]
    rows = t[t["model"].isin(["BiLD (unaligned)", "BiLD (aligned)"]) & (t["regime"] == "no loss")].dropna(
        subset=["speedup"]
    )
    if (rows["speedup_lo"] > van["speedup_hi"]).any():
        expected = "holds"
    elif (rows["speedup"] > van["speedup"]).any():
        expected = "holds in part"
    else:
        expected = "does not hold here"
    got = _verdicts(REPO)
    name = next(k for k in got if k.startswith("BiLD is faster than vanilla large at no loss"))
    assert got[name] == expected


def test_a_changed_committed_number_moves_the_verdict(tree):
    """Early-exit BiLD against CALM (fig7_best.csv): CALM's speedup raised to overlap, then to beat
    early-exit BiLD, takes the verdict from holds to in part to does not hold here."""
    name = "Early-exit BiLD is faster than CALM at the same quality (Figs. 6, 7)"
    f = tree / "figures" / "fig7_best.csv"
    t = pd.read_csv(f)
    ee, calm = t["curve"] == "early-exit BiLD", t["curve"] == "CALM"
    assert t.loc[ee, "speedup_lo"].min() > t.loc[calm, "speedup_hi"].max()  # as committed: holds
    assert _verdicts(tree)[name] == "holds"
    t.loc[calm, "speedup_hi"] = t.loc[ee, "speedup_hi"].max()  # the intervals overlap now
    t.to_csv(f, index=False)
    assert _verdicts(tree)[name] == "holds in part"
    t.loc[calm, ["speedup", "speedup_lo", "speedup_hi"]] = [3.0, 2.9, 3.1]
    t.to_csv(f, index=False)
    assert _verdicts(tree)[name] == "does not hold here"


def test_every_paper_number_shown_comes_from_reported_csv(tree):
    p = pd.read_csv(REPO / "data" / "paper" / "reported.csv")
    speedups = {f"{x:.2f}" for x in p["speedup"].dropna()}
    for line in claims.block(REPO).splitlines()[2:10]:
        paper = line.strip("|").split(" | ")[1]
        for x in re.findall(r"(\d+\.\d\d)×", paper):
            assert x in speedups, f"{x}× in the paper's column is not in reported.csv: {paper}"
    # and it is read, not remembered: a changed paper number shows in the block
    f = tree / "data" / "paper" / "reported.csv"
    q = p.copy()
    q.loc[(q["table"] == "Table 5") & (q["regime"] == "better score"), "speedup"] = 9.87
    q.to_csv(f, index=False)
    assert "9.87×" in claims.block(tree) and "9.87×" not in claims.block(REPO)


def test_verdicts_follow_the_rule_on_every_combination():
    P = verdicts.Part
    assert [P("", pt, iv).verdict for pt, iv in itertools.product([True, False], repeat=2)] == [
        "holds", "holds in part", "does not hold here", "does not hold here"]  # fmt: skip
    for combo in itertools.product(itertools.product([True, False], repeat=2), repeat=2):
        parts = [P("", pt, iv) for pt, iv in combo]
        v = verdicts.verdict(parts)
        if all(p.verdict == "holds" for p in parts):
            assert v == "holds"
        elif not any(p.point for p in parts):
            assert v == "does not hold here"
        else:
            assert v == "holds in part"
    made = claims.claims(REPO, verdicts.paper_rows(REPO))
    assert all(c.verdict == verdicts.verdict(c.parts) for c in made)


def test_bad_files_are_named(tree):
    (tree / "data" / "paper" / "reported.csv").unlink()
    with pytest.raises(FileNotFoundError, match="data/paper/reported.csv"):
        claims.block(tree)
    shutil.copy(REPO / "data" / "paper" / "reported.csv", tree / "data" / "paper")
    f = tree / "data" / "paper" / "reported.csv"
    p = pd.read_csv(f)
    p.loc[p["row"] == "bild-aligned", "speedup"] = float("nan")
    p.to_csv(f, index=False)
    with pytest.raises(ReportError, match="reported.csv.*speedup"):
        claims.block(tree)
    shutil.copy(REPO / "data" / "paper" / "reported.csv", tree / "data" / "paper")
    t = pd.read_csv(tree / "figures" / "fig7_best.csv")
    t[t["curve"] != "CALM"].to_csv(tree / "figures" / "fig7_best.csv", index=False)
    with pytest.raises(ReportError, match="fig7_best.csv: 0 rows with"):
        claims.block(tree)
