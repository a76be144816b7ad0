"""README's claims block (bildlib.analysis.claims, .verdicts): each verdict follows the strict rule
(verdicts.RULE), recomputed here from the committed CSV; summaries built so that each lenient reading
(the better of two models, a stand-in comparator, the point alone, a mean over seeds, a pick on the
point, a looser bar than the paper's) would say "holds" get the strict verdict; a changed committed
number moves it; every paper number shown comes from data/paper/reported.csv; bad files are named."""

import itertools
import json
import math
import re
import shutil

import pandas as pd
import pytest

from bildlib.analysis import claims, numbers, verdicts
from bildlib.analysis.tables import ReportError
from bildlib.reports import readme as report
from conftest import REPO


@pytest.fixture
def tree(tmp_path):
    for d in ("figures", "data/paper"):
        shutil.copytree(REPO / d, tmp_path / d)
    (tmp_path / "data" / "checkpoints").mkdir()
    shutil.copy(REPO / "data" / "checkpoints" / "pair.json", tmp_path / "data" / "checkpoints")
    shutil.copytree(REPO / "data" / "checkpoints" / "cards", tmp_path / "data" / "checkpoints" / "cards")
    return tmp_path


def _at_release(root, checks: str) -> None:
    """The run behind checks made at the release's code state, as if the release had run it."""
    f = root / checks
    f.write_text(json.dumps(json.loads(f.read_text()) | {"code": verdicts.release_code(root)}))


def _verdicts(root) -> dict[str, str]:
    """{claim: verdict} as the block prints them."""
    out = {}
    for line in claims.block(root).splitlines()[2:]:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        out[cells[0]] = cells[3].strip("*")  # "holds in part (unaligned)" names the parts that hold
    return out


def _claim(root, f, **where):
    return f(root, verdicts.paper_rows(REPO), claims.WHERE | where)


def _edit(path, match: dict, **values):
    """Set values on the rows of the CSV at path that match."""
    t = pd.read_csv(path)
    m = pd.Series(True, index=t.index)
    for k, v in match.items():
        m &= t[k] == v
    assert m.any(), match
    for k, v in values.items():
        t.loc[m, k] = v
    t.to_csv(path, index=False)


def test_the_committed_block_is_the_rendered_one():
    text = (REPO / "README.md").read_text()
    body = next(m["body"] for m in report.BLOCK.finditer(text) if m["name"] == "claims")
    assert body.strip() == claims.block(REPO).strip()
    got = _verdicts(REPO)
    assert len(got) == 14 and {v.split(" (")[0] for v in got.values()} <= set(verdicts.VERDICTS)
    assert verdicts.RULE in body  # the legend is the rule the code applies


def test_the_no_loss_verdict_recomputed_from_its_csv():
    """BiLD at no loss: unaligned and aligned each apart, within 0.2 at 95 % (its regime row), faster
    than vanilla on the interval (its lower end above vanilla's upper end)."""
    t = pd.read_csv(REPO / "figures" / "full" / "table1.csv")
    t = t[t["rule"] == "interval"]
    van = t[t["model"] == "Vanilla (large)"].iloc[0]
    held = []
    for m in ("BiLD (unaligned)", "BiLD (aligned)"):
        r = t[(t["model"] == m) & (t["regime"] == "no loss")].iloc[0]
        held.append(bool(pd.notna(r["speedup"]) and r["speedup_lo"] > van["speedup_hi"]))
    expected = "holds" if all(held) else "holds in part" if any(held) else "does not hold here"
    got = _verdicts(REPO)
    name = next(k for k in got if k.startswith("BiLD is faster than vanilla large at no loss"))
    assert got[name].split(" (")[0] == expected


def test_the_better_of_two_models_is_not_the_claim(tree):
    """Unaligned qualifies and is faster, aligned has no pick: the lenient reading (the better of the
    two) says holds; the strict one holds in part and names unaligned."""
    f = tree / "figures" / "full" / "table1.csv"
    _edit(f, {"rule": "interval", "model": "BiLD (unaligned)"}, speedup=1.45, speedup_lo=1.3, speedup_hi=1.6)
    _edit(f, {"rule": "interval", "model": "BiLD (aligned)", "regime": "no loss"}, speedup=float("nan"))
    c = _claim(tree, claims.no_loss)
    assert [p.holds for p in c.parts] == [True, False]
    assert c.verdict == "holds in part" and c.shown == "holds in part (unaligned)"


def test_no_stand_in_comparator_and_no_same_pick_twice(tree):
    """Within 1 point: aligned with no no-loss pick is not compared with vanilla instead, and
    unaligned's ≤ 1 pick that is its no-loss pick is not faster than itself: does not hold here,
    though both picks beat vanilla by far."""
    f = tree / "figures" / "full" / "table1.csv"
    t = pd.read_csv(f)
    key = ["fallback", "rollback", "verify_end"]
    t = t[(t["rule"] == "interval") & (t["model"] == "BiLD (unaligned)")]
    nl = t[t["regime"] == "no loss"].iloc[0]
    one = {"rule": "interval", "model": "BiLD (unaligned)", "regime": "≤ 1 point"}
    # its ≤ 1 pick is its no-loss pick, with better numbers: still not faster than itself
    _edit(f, one, **{k: nl[k] for k in key}, speedup=nl["speedup"] + 1, speedup_lo=nl["speedup_lo"] + 1,
          speedup_hi=nl["speedup_hi"] + 1)  # fmt: skip
    _edit(f, {"rule": "interval", "model": "BiLD (aligned)", "regime": "no loss"}, speedup=float("nan"))
    _edit(f, {"rule": "interval", "model": "BiLD (aligned)", "regime": "≤ 1 point"}, speedup=3.0,
          speedup_lo=2.9, speedup_hi=3.1)  # fmt: skip
    c = _claim(tree, claims.within_one)
    assert [p.holds for p in c.parts] == [False, False] and c.verdict == "does not hold here"
    assert "no no-loss pick" in c.parts[1].reason and "is its no-loss pick" in c.parts[0].reason
    # a faster ≤ 1 pick of another configuration, its interval wholly above: that part holds
    _edit(f, {"rule": "interval", "model": "BiLD (unaligned)", "regime": "≤ 1 point"}, speedup=2.0,
          speedup_lo=1.9, speedup_hi=2.1, fallback=0.3)  # fmt: skip
    assert _claim(tree, claims.within_one).shown == "holds in part (unaligned)"


def test_the_point_alone_never_holds():
    P = verdicts.Part
    assert [P("", pt, iv).verdict for pt, iv in itertools.product([True, False], repeat=2)] == [
        "holds", "does not hold here", "does not hold here", "does not hold here"]  # fmt: skip
    assert P("", True, False).reason == "the measured value clears the bar, its 95 % interval does not"
    assert P("", False, False).reason == "the measured value misses the bar"


def test_a_mean_over_seeds_is_no_interval(tree):
    """Nucleus sampling: BiLD's mean − 2 std far above 1× and its mean BLEU above vanilla's would
    hold on the old reading; with no interval over seeds and sentences it does not hold here. (The
    runs made before intervals over seeds kept a mean and std only: their files, rebuilt here.)"""
    spread = ["score_lo", "score_hi", "speedup_lo", "speedup_hi", "delta_lo", "delta_hi"]
    t5 = pd.read_csv(tree / "figures" / "table5.csv")
    i = t5["row"] == "BiLD (better score)"
    t5.loc[i, "speedup_mean"], t5.loc[i, "speedup_std"], t5.loc[i, "score_mean"] = 3.0, 0.01, 40.0
    t5.drop(columns=spread).to_csv(tree / "figures" / "table5.csv", index=False)
    t3 = pd.read_csv(tree / "figures" / "table3.csv")
    t3.loc[t3["mode"] == "sampled", spread] = float("nan")
    t3.to_csv(tree / "figures" / "table3.csv", index=False)
    c = _claim(tree, claims.nucleus)
    assert (
        c.parts[0].point and c.verdict == "does not hold here" and c.parts[0].reason == verdicts.NO_INTERVAL
    )
    s = _claim(tree, claims.speculative)  # Table 3's sampled rows and Table 4's rates: no interval either
    want = {"sampled, equal latency", "sampled, equal score", "greedy, rollbacks", "sampled, rollbacks"}
    assert {p.name for p in s.parts if p.reason.startswith("no 95 % interval")} == want


def test_early_exit_picks_on_the_interval(tree):
    """Every early-exit BiLD configuration within 0.5 on its point but not on its interval: the pick
    on the point (the old fig7_best) would hold; on the interval there is none."""
    f = tree / "figures" / "fig7.csv"
    t = pd.read_csv(f)
    ee = t["label"].str.startswith("bild-ee")
    t.loc[ee, "delta"], t.loc[ee, "delta_lo"] = 0.1, -0.6
    t.to_csv(f, index=False)
    c = _claim(tree, claims.early_exit)
    assert [p.holds for p in c.parts] == [False, True] and c.shown == "holds in part (within 1)"
    assert "no configuration qualifies" in c.parts[0].reason


def test_the_bar_is_the_papers_number(tree):
    """Fig. 2: the paper's "approximately 20 %" is the bar, not 50 %: 26 % measured does not hold."""
    c = _claim(tree, numbers.agreement)
    assert "at most 20 %" in c.parts[0].what
    o = pd.read_csv(tree / "figures" / "fig2.csv")
    o = o[o["method"] == "oracle"].sort_values("large_pct")
    first = o[o["delta_lo"] >= -0.2].iloc[0]
    assert c.parts[0].holds == (first["large_pct"] <= 20)
    _edit(tree / "figures" / "fig2.csv", {"label": "oracle-small-t0.05"}, delta=0.1, delta_lo=-0.1)
    assert _claim(tree, numbers.agreement).verdict == "holds"  # 14 % at 95 %


def test_ablations_judge_both_bars_and_say_the_point_rule(tree):
    c = _claim(tree, claims.ablations)
    assert [p.name for p in c.parts] == [f"within {w} vs {v}" for w in ("0.5", "1")
                                         for v in ("no rollback", "no fallback (window)")]  # fmt: skip
    t = pd.read_csv(tree / "figures" / "fig5_best.csv")
    pr = t[t["pick"] == "fastest within 0.5 (point rule)"].set_index("variant")["speedup"]
    if pr["No fallback (window)"] >= pr["BiLD"]:  # as committed: the point rule favours the ablation
        assert "on the point rule No fallback (window)" in c.parts[1].what


def test_a_changed_committed_number_moves_the_verdict(tree):
    """Early-exit BiLD against CALM (fig7.csv): a CALM configuration made to qualify at both bars
    with a speed interval that overlaps early-exit BiLD's takes the verdict from holds to does not
    hold here; qualifying within 1 only, to holds in part."""
    name = "Early-exit BiLD is faster than CALM at the same quality (Figs. 6, 7)"
    f = tree / "figures" / "fig7.csv"
    _at_release(tree, "figures/fig7_checks.json")
    assert _verdicts(tree)[name] == "holds"
    _edit(f, {"label": "calm-state-l0.95-tau8"}, delta=0.0, delta_lo=-0.8, speedup_hi=1.7)
    assert _verdicts(tree)[name] == "holds in part (within 0.5)"
    _edit(f, {"label": "calm-state-l0.95-tau8"}, delta_lo=-0.1)
    assert _verdicts(tree)[name] == "does not hold here"


def test_every_paper_number_shown_comes_from_reported_csv(tree):
    p = pd.read_csv(REPO / "data" / "paper" / "reported.csv")
    text = pd.read_csv(REPO / "data" / "paper" / "text.csv")
    speedups = {f"{x:.2f}" for x in [*p["speedup"].dropna(), *text["value"]]}
    for line in claims.block(REPO).splitlines()[2:15]:
        paper = line.strip("|").split(" | ")[1]
        for x in re.findall(r"(\d+\.\d\d)×", paper):
            assert x in speedups, (
                f"{x}× in the paper's column is in neither reported.csv nor text.csv: {paper}"
            )
    # and it is read, not remembered: a changed paper number shows in the block
    f = tree / "data" / "paper" / "reported.csv"
    q = p.copy()
    q.loc[(q["table"] == "Table 5") & (q["regime"] == "better score"), "speedup"] = 9.87
    q.to_csv(f, index=False)
    assert "9.87×" in claims.block(tree) and "9.87×" not in claims.block(REPO)


def test_verdicts_follow_the_rule_on_every_combination():
    P = verdicts.Part
    for combo in itertools.product(itertools.product([True, False], repeat=2), repeat=2):
        parts = [P("", pt, iv, f"p{i}") for i, (pt, iv) in enumerate(combo)]
        held = [pt and iv for pt, iv in combo]
        v = verdicts.verdict(parts)
        assert v == ("holds" if all(held) else "holds in part" if any(held) else "does not hold here")
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
    t = pd.read_csv(tree / "figures" / "fig5_best.csv")
    t[t["variant"] != "No rollback"].to_csv(tree / "figures" / "fig5_best.csv", index=False)
    with pytest.raises(ReportError, match="fig5_best.csv: 0 rows with"):
        claims.block(tree)


def test_the_papers_numbers_are_the_bars(tree):
    """The abstract's 2.12×, Fig. 8's 5× and v1 Fig. 6's 97 % are read from data/paper/text.csv: a lower
    number there moves the verdict; a missing row is named."""
    f = tree / "data" / "paper" / "text.csv"
    assert _claim(tree, numbers.headline).verdict == "does not hold here"
    t1 = pd.read_csv(tree / "figures" / "full" / "table1.csv")
    t1 = t1[(t1["rule"] == "interval") & t1["regime"].isin(["no loss", "≤ 1 point"])]
    t1 = t1[t1["model"].isin(["BiLD (unaligned)", "BiLD (aligned)"])]
    lo = t1.loc[t1["speedup"].idxmax(), "speedup_lo"]
    _edit(f, {"where": "Abstract"}, value=round(lo - 0.01, 2))  # below the fastest pick's lower end
    assert _claim(tree, numbers.headline).verdict == "holds"
    f8 = pd.read_csv(tree / "figures" / "fig8.csv").query("run == 'BiLD'").set_index("pair")["bytes_rel"]
    pairs = ("T5-small/large (configs; the paper's CNN/DM pair)", "multi30k (shipped)")
    fewer = [round(1 / f8[k]) for k in pairs]
    assert not any(p.holds for p in _claim(tree, numbers.fig8).parts) and max(fewer) < 5
    _edit(f, {"where": "Fig. 8", "quantity": "memory operations (vanilla over BiLD)"}, value=fewer[0])
    c = _claim(tree, numbers.fig8)  # the T5 pair's fewer bytes round to the bar: that part holds
    assert [p.holds for p in c.parts] == [True, False, fewer[1] >= fewer[0], False]
    c = json.loads((tree / "figures" / "latency_scatter_checks.json").read_text())
    k = c["examples"] - c["slower examples"]
    assert not _claim(tree, numbers.faster_examples).parts[0].holds  # k of 100 against "> 97 %"
    _edit(f, {"where": "Fig. 6", "quantity": "examples faster than vanilla (%)"},
          value=math.floor(100 * numbers.wilson(k, c["examples"])[0]) - 1)  # fmt: skip
    assert _claim(tree, numbers.faster_examples).parts[0].holds  # the bar under the Wilson interval
    t = pd.read_csv(f)
    t[t["where"] != "Fig. 2"].to_csv(f, index=False)
    with pytest.raises(ReportError, match="text.csv: 0 rows for 'Fig. 2'"):
        claims.block(tree)


def test_the_wilson_interval():
    lo, hi = numbers.wilson(97, 100)
    assert (round(lo, 4), round(hi, 4)) == (0.9155, 0.9897)  # the textbook value
    assert numbers.wilson(0, 10)[0] == 0 and numbers.wilson(10, 10)[1] == pytest.approx(1)


def test_language_modelling_names_why(tree):
    """BiLD slower than vanilla at every fallback within the bar: the reason says so; made faster
    than the paper's number, it still lacks a perplexity interval."""
    c = _claim(tree, numbers.language_modelling)
    assert c.verdict == "does not hold here" and all("slower than vanilla" in p.reason for p in c.parts)
    _edit(
        tree / "figures" / "table2_lm.csv",
        {"row": "BiLD"},
        gen_speedup=3.0,
        gen_speedup_lo=2.9,
        gen_speedup_hi=3.1,
    )
    c = _claim(tree, numbers.language_modelling)
    assert (
        all(p.point and p.reason == verdicts.NO_INTERVAL for p in c.parts)
        and c.verdict == "does not hold here"
    )


def test_intervals_over_seeds_decide_nucleus_sampling(tree):
    """A Table 5 run with intervals over seeds and sentences (sampled.over_seeds with the sweeps'
    rows) is judged on them: its lower ends clear the bars, it holds; a delta interval reaching
    below -0.2, it does not, the measured value notwithstanding."""
    f = tree / "figures" / "table5.csv"
    t = pd.read_csv(f)
    t["delta"] = t["score_mean"] - t.loc[t["row"] == "Vanilla (large)", "score_mean"].iloc[0]
    sc, sp, d = t["score_mean"], t["speedup_mean"], t["delta"]
    t = t.assign(score_lo=sc - 1, score_hi=sc + 1, speedup_lo=sp - 0.1, speedup_hi=sp + 0.1, delta_lo=d - 0.1,
                 delta_hi=d + 0.1)  # fmt: skip
    t.to_csv(f, index=False)
    c = _claim(tree, claims.nucleus)
    assert c.verdict == "holds" and "[" in c.parts[0].what
    _edit(f, {"row": "BiLD (better score)"}, delta_lo=-0.3)
    c = _claim(tree, claims.nucleus)
    assert c.verdict == "does not hold here" and c.parts[0].point


def test_early_exit_against_vanilla_picks_on_the_interval(tree):
    """Section 4.4's 1.60× and 1.74×: the pick is the fastest early-exit BiLD whose Δ interval clears
    -1 (fb0.5-rb1.0 as committed). A faster configuration that clears -1 only on its point is never the
    pick; the pick's own speed interval reaching a bar holds that part alone."""
    f = tree / "figures" / "fig7.csv"
    _edit(f, {"label": "bild-ee-fb0.4-rb1.0"}, speedup=2.5, speedup_lo=2.4, speedup_hi=2.6)  # Δ -0.81 [-2.37]
    c = _claim(tree, numbers.early_exit)
    assert all("bild-ee-fb0.5-rb1.0" in p.reason for p in c.parts) and c.verdict == "does not hold here"
    _edit(f, {"label": "bild-ee-fb0.5-rb1.0"}, speedup=1.70, speedup_lo=1.65)
    c = _claim(tree, numbers.early_exit)
    assert [p.holds for p in c.parts] == [True, False]
    assert c.shown == "holds in part (within 1, against 1.60×)"


def test_v1_latency_bars_read_the_scatters_sweep(tree):
    """v1 Fig. 6's 0.70× and 0.56×: the shown configuration's latency over vanilla large, 1 / speedup
    with its interval, from the fig4.csv the scatter plots; the interval's upper end must be under."""
    c = _claim(tree, numbers.faster_examples)
    assert [p.name for p in c.parts] == ["examples", "latency at most 0.70×", "latency at most 0.56×"]
    shown = json.loads((tree / "figures" / "latency_scatter_checks.json").read_text())["shown"]
    r = pd.read_csv(tree / "figures" / "fig4.csv").set_index("label").loc[shown]
    assert [p.holds for p in c.parts[1:]] == [1 / r["speedup_lo"] <= 0.70, 1 / r["speedup_lo"] <= 0.56]
    _edit(tree / "figures" / "fig4.csv", {"label": shown}, speedup=2.0, speedup_lo=1.9, speedup_hi=2.1)
    assert [p.holds for p in _claim(tree, numbers.faster_examples).parts][1:] == [True, True]


def test_the_papers_numbers_come_from_the_repository_where_a_run_has_none(tmp_path):
    """make reproduce's folder holds its tables, not data/paper/: said reads the repository's text.csv."""
    assert numbers.said(tmp_path, "Fig. 2", "large model's share of the tokens (%)") == 20


def test_early_exit_best_picks_on_the_interval():
    """fig7_best.csv (plots.ee.best_within) picks as the claims do: on the Δ interval; a summary without
    intervals picks on the point and says so."""
    from bildlib.plots import ee

    s = pd.read_csv(REPO / "figures" / "fig7.csv")
    s.attrs["baseline"] = "ee"
    b = ee.best_within(s, "early-exit BiLD")
    ok = s[s["label"].str.startswith("bild-ee") & (s["delta_lo"] >= -0.5)]
    assert b.iloc[0]["label"] == ok.loc[ok["speedup"].idxmax(), "label"]
    assert set(b["picked_on"]) == {"interval"}
    p = ee.best_within(s.drop(columns=["delta_lo"]), "early-exit BiLD")
    ref = float(s[s["label"] == "vanilla-ee"]["score"].iloc[0])
    pt = s[s["label"].str.startswith("bild-ee") & (s["score"] >= ref - 0.5)]
    assert p.iloc[0]["label"] == pt.loc[pt["speedup"].idxmax(), "label"] and set(p["picked_on"]) == {"point"}


def test_a_short_speedup_gives_the_pick_s_measured_time(tree):
    """Where a speedup falls short, the reason is the pick's own sweep: its shares of time, its
    large calls a sentence and their cost in large steps, and the small step over the large one,
    all recomputed here from fig4.csv; a changed large-model time moves them."""
    t = pd.read_csv(tree / "figures" / "full" / "table1.csv")
    r = t[(t["model"] == "BiLD (aligned)") & (t["regime"] == "≤ 1 point")].iloc[0]
    f = pd.read_csv(tree / "figures" / "full" / "fig4.csv")
    f = f[f["repeat"] == 0]
    b = f[(f["model"] == "aligned") & (f["method"] == "bild")]
    b = b[[verdicts._same(x, r) for _, x in b.iterrows()]]  # its fallback, rollback and verify_end
    assert len(b) == 1
    b = b.iloc[0]
    per = {m: f[f["label"] == f"vanilla-{m}"].iloc[0] for m in ("large", "aligned")}
    step = {m: v["latency_s"] * v["n"] / v["tokens"] for m, v in per.items()}
    said = numbers.why_slow(tree, "figures/full", r)
    assert f"{100 * b['large_s'] / b['latency_s']:.0f} % in the large" in said, said
    assert f"({b['large_calls'] / b['n']:.1f} calls a sentence" in said, said
    assert f"each {b['large_s'] * b['n'] / b['large_calls'] / step['large']:.1f} large steps" in said, said
    assert f"a small step costs {100 * step['aligned'] / step['large']:.0f} % of a large one" in said, said
    _edit(tree / "figures" / "full" / "fig4.csv", {"label": b["label"]}, large_s=b["latency_s"] * 0.9)
    assert "90 % in the large" in numbers.why_slow(tree, "figures/full", r)
    _edit(tree / "figures" / "full" / "fig4.csv", {"label": "vanilla-small"}, repeat=1)  # not read here
    assert "90 % in the large" in numbers.why_slow(tree, "figures/full", r)
    _edit(tree / "figures" / "full" / "fig4.csv", {"label": "vanilla-aligned"}, repeat=1)
    with pytest.raises(ReportError, match="not one vanilla row per model"):
        numbers.why_slow(tree, "figures/full", r)


def test_a_claim_is_judged_only_on_a_run_of_the_release(tree):
    """A row whose run names another code state than the release's (figures/release_times.csv's
    last) is not judged and quotes no other code state: it says what would run it; made at the
    release's code state, the same run is judged; a later release leaves every row unjudged."""
    name = "Early-exit BiLD is faster than CALM at the same quality (Figs. 6, 7)"
    code = verdicts.release_code(tree)
    checks = json.loads((tree / "figures" / "fig7_checks.json").read_text())
    row = next(ln for ln in claims.block(tree).splitlines() if ln.startswith(f"| {name}"))
    if checks["code"] != code:
        assert _verdicts(tree)[name] == "not run at this release"
        assert checks["code"] not in row and f"code `{code}`" in row and "`make models-ee` trains" in row
    _at_release(tree, "figures/fig7_checks.json")
    assert _verdicts(tree)[name] == "holds"
    t = pd.read_csv(tree / verdicts.RELEASE, dtype={"code": str})
    t.loc[len(t)] = ["figures", "0123456789ab", 1.0, 0, "a later machine"]
    t.to_csv(tree / verdicts.RELEASE, index=False)
    got = _verdicts(tree)
    assert set(got.values()) == {"not run at this release"} and len(got) == 14
    assert "`make release` reruns figures/full/table1.csv" in claims.block(tree)

