"""The paper's numbers beside a paper preset's Table 1 (bildlib.analysis.reported): every paper row
kept and matched by model, regime and rule, its numbers read from data/paper/reported.csv."""

import pandas as pd
import pytest

from bildlib.analysis import reported
from conftest import REPO


def _ours():
    """A summary_table-shaped run: vanilla, unaligned in every regime, aligned with no no-loss pick."""
    rows = []
    for rule in ("point", "interval"):
        rows.append({"rule": rule, "model": "Vanilla (large)", "regime": "", "score": 40.0, "speedup": 1.0})
        for regime, sc, sp in (("no loss", 40.1, 1.5), ("≤ 0.5 point", 39.8, 1.6), ("≤ 1 point", 38.9, 1.8)):
            rows.append(
                {"rule": rule, "model": "BiLD (unaligned)", "regime": regime, "score": sc, "speedup": sp}
            )
        rows.append(
            {"rule": rule, "model": "BiLD (aligned)", "regime": "no loss", "score": None, "speedup": None}
        )
    t = pd.DataFrame(rows)
    for c in ("score", "speedup"):
        t[f"{c}_lo"], t[f"{c}_hi"] = t[c] - 0.2, t[c] + 0.2
    return t


def test_each_paper_row_beside_ours_under_both_rules():
    paper = pd.read_csv(REPO / "data" / "paper" / "reported.csv")
    mine = paper[(paper["table"] == "Table 1") & (paper["dataset"] == "iwslt2017-de-en")]
    side = reported.table1(_ours(), "iwslt2017-mt5")
    assert len(side) == 2 * len(mine)  # no paper row dropped, under each rule
    assert list(side["paper_score"]) == list(mine["score"]) * 2  # read, in the file's order
    got = side.set_index(["rule", "paper_row", "paper_regime"])
    u = got.loc[("interval", "bild-unaligned", "minimal loss")]
    want = mine[(mine["row"] == "bild-unaligned") & (mine["regime"] == "minimal loss")].iloc[0]
    assert u["match"] == "matched" and u["regime"] == "no loss" and u["score"] == 40.1
    assert u["delta_vs_paper"] == pytest.approx(40.1 - want["score"])
    assert u["within_tolerance"] == (abs(40.1 - want["score"]) <= 1)
    assert u["paper_speedup_in_interval"] == (1.3 <= want["speedup"] <= 1.7)
    assert got.loc[("point", "bild-unaligned", "within 1 point"), "score"] == 38.9
    assert got.loc[("point", "bild-aligned", "minimal loss"), "match"] == "none qualifies"
    assert got.loc[("point", "bild-aligned", "within 1 point"), "match"] == "not run"
    v = got.loc[("point", "vanilla", "")]
    assert v["match"] == "matched" and v["score"] == 40.0 and pd.isna(v["paper_speedup"])
    md = reported.markdown(side)
    assert md.count("\n") == len(side) + 1 and f"{want['score']:.2f}" in md and "none qualifies" in md


def test_a_changed_paper_number_is_what_shows(tmp_path):
    (tmp_path / "data" / "paper").mkdir(parents=True)
    p = pd.read_csv(REPO / "data" / "paper" / "reported.csv")
    p.loc[(p["table"] == "Table 1") & (p["dataset"] == "xsum") & (p["row"] == "vanilla"), "score"] = 12.34
    p.to_csv(tmp_path / "data" / "paper" / "reported.csv", index=False)
    side = reported.table1(_ours(), "xsum-t5", root=tmp_path)
    assert (side.loc[side["paper_row"] == "vanilla", "paper_score"] == 12.34).all()


def test_what_the_paper_covers_and_bad_input():
    assert reported.covers("cnndm-t5", "Table 1") and reported.covers("xsum-t5", "Table 5")
    assert not reported.covers("wikitext2-gpt2", "Table 1") and reported.covers("wikitext2-gpt2", "Table 2")
    assert not reported.covers("multi30k", "Table 1")
    with pytest.raises(ValueError, match="preset 'multi30k' is not one of the paper's"):
        reported.rows("multi30k", "Table 1")
    with pytest.raises(ValueError, match=r"ours lacks the columns \['score_hi', 'score_lo'"):
        reported.table1(_ours().drop(columns=["score_lo", "score_hi"]), "xsum-t5")
    with pytest.raises(FileNotFoundError, match="data/paper/reported.csv"):
        reported.rows("xsum-t5", "Table 1", root=REPO / "no-such-folder")


@pytest.mark.parametrize(
    ("table", "csv"), [("Table 3", "table3"), ("Table 4", "table4"), ("Table 5", "table5")]
)
def test_tables_3_to_5_beside_the_paper(table, csv):
    """The committed Multi30k tables as if a paper preset's run: each paper row once per mode, the
    paper's numbers as reported.csv has them, ours as the table has them."""
    ours = pd.read_csv(REPO / "figures" / f"{csv}.csv")
    side = reported.beside(ours, "xsum-t5", table)
    paper = reported.rows("xsum-t5", table)
    modes = list(dict.fromkeys(ours["mode"])) if "mode" in ours else [""]
    assert len(side) == len(paper) * len(modes) and (side["match"] == "matched").all(), side
    assert list(side["paper_score"]) == list(paper["score"]) * len(modes)
    key, score = ("row", "score_mean") if table == "Table 5" else ("method", "score")
    for _, r in side.iterrows():
        mine = ours[(ours[key] == r["ours"]) & ((ours["mode"] == r["mode"]) if r["mode"] else True)].iloc[0]
        assert r["score"] == mine[score] and r["delta_vs_paper"] == pytest.approx(
            mine[score] - r["paper_score"]
        )
    md = reported.beside_markdown(side)
    assert md.count("\n") == len(side) + 1 and all(f"{x:.2f}" in md for x in paper["score"])
    with pytest.raises(ValueError, match="lacks the column"):
        reported.beside(ours.drop(columns=[key]), "xsum-t5", table)


def test_table2_beside_the_paper():
    """arXiv v1 Table 2 (GPT-2): vanilla large, and per group the fastest BiLD row within its
    perplexity bar over vanilla large's (lower is better), the paper's numbers from the file."""
    ours = pd.DataFrame(
        [
            {"row": "vanilla large", "fallback": None, "perplexity": 20.0, "gen_speedup": 1.0},
            {"row": "BiLD", "fallback": 0.8, "perplexity": 20.1, "gen_speedup": 1.2},
            {"row": "BiLD", "fallback": 0.6, "perplexity": 20.9, "gen_speedup": 1.5},
            {"row": "BiLD", "fallback": 0.4, "perplexity": 23.0, "gen_speedup": 2.0},
        ]
    )
    ours["gen_speedup_lo"], ours["gen_speedup_hi"] = ours["gen_speedup"] - 0.1, ours["gen_speedup"] + 0.1
    side = reported.table2(ours, "wikitext2-gpt2").set_index("paper_regime")
    paper = reported.rows("wikitext2-gpt2", "Table 2").fillna({"regime": ""}).set_index("regime")
    assert list(side.index) == list(paper.index) and (side["paper_score"] == paper["score"]).all()
    assert side.loc["", "ours"] == "vanilla large" and side.loc["", "score"] == 20.0
    assert side.loc["group 1 (minimal loss)", "ours"] == "BiLD α_FB 0.8"  # within 0.2
    assert side.loc["group 2 (about 1 point)", "ours"] == "BiLD α_FB 0.6"  # within 1, the faster
    none = reported.table2(ours[ours["fallback"].isna() | (ours["perplexity"] > 22)], "wikitext2-gpt2")
    assert set(none["match"]) == {"matched", "none qualifies"}
    assert reported.beside_markdown(side.reset_index()).count("BiLD α_FB") == 2
