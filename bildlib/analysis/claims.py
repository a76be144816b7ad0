"""The paper's claims, checked here: README's `claims` block, one row per claim of Kim et al.
(NeurIPS 2023) with the paper's evidence (data/paper/reported.csv), this project's on the embedded
default (committed files only), and a verdict by bildlib.analysis.verdicts.RULE. One function per
claim, each returning its parts from one committed file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from bildlib.analysis import numbers
from bildlib.analysis.tables import read_csv, read_json
from bildlib.analysis.verdicts import (
    NO_INTERVAL,
    NO_LOSS,
    NOT_RUN,
    PAPER,
    RULE,
    VERDICTS,
    Claim,
    Part,
    _d,
    _row,
    _run,
    _same,
    _span,
    _table1,
    _x,
    at_release,
    faster,
    label,
    missing,
    paper_rows,
    paper_says,
    paper_vs,
    pick,
    reaches,
    table,
)

# --- this project's side: the committed runs ------------------------------------------------------


# the folder of each notebook's committed run that a claim reads (README: the embedded default; all
# of val for Table 1); make reproduce's report passes its own run's folders
WHERE = {
    "fig4": "figures/full",
    "fig5": "figures",
    "table3": "figures",
    "table5": "figures",
    "fig7": "figures",
    "fig2": "figures",
    "fig8": "figures",
    "table2_lm": "figures",
    "scatter": "figures",
}
MODELS = ("BiLD (unaligned)", "BiLD (aligned)")  # the paper's; the student is this project's own
SHORT = ("unaligned", "aligned")  # the paper's rows: bild-unaligned, bild-aligned


def no_loss(root: Path, p: pd.DataFrame, where: dict = WHERE) -> Claim:
    t, van = _table1(root, where)
    parts = []
    for m, short in zip(MODELS, SHORT, strict=True):  # each apart: never the better of the two
        r = _row(t, model=m, regime="no loss")
        if r is None:
            parts.append(missing(short, f"no configuration within {NO_LOSS:g} at 95 %"))
        else:  # qualified on the interval: at 95 % it loses at most NO_LOSS
            f = faster(r, van, m, "vanilla", short)
            parts.append(replace(f, what=f"{f.what}, {_d(r)}"))
    return Claim(
        f"BiLD is faster than vanilla large at no loss (within {NO_LOSS:g} points)",
        "; ".join(paper_says(p, "Table 1", f"bild-{s}", "minimal loss") for s in SHORT),
        parts,
        f"{where['fig4']}/table1.csv",
        _run(root, f"{where['fig4']}/fig4_checks.json"),
    )


def within_one(root: Path, p: pd.DataFrame, where: dict = WHERE) -> Claim:
    t, _ = _table1(root, where)
    parts = []
    for m, short in zip(MODELS, SHORT, strict=True):
        one, none = _row(t, model=m, regime="≤ 1 point"), _row(t, model=m, regime="no loss")
        if none is None:  # nothing to be faster than: no stand-in comparator
            parts.append(
                missing(short, f"no no-loss pick to be faster than (none within {NO_LOSS:g} at 95 %)")
            )
        elif one is None or _same(one, none):
            parts.append(missing(short, f"its ≤ 1 point pick is its no-loss pick ({_x(none)})"))
        else:
            parts.append(faster(one, none, f"{m} ≤ 1 point", "its no-loss pick", short))
    return Claim(
        "Within 1 point, BiLD is faster still",
        "; ".join(
            paper_vs(p, "Table 1", (f"bild-{s}", "within 1 point"), (f"bild-{s}", "minimal loss"))
            for s in SHORT
        ),  # fmt: skip
        parts,
        f"{where['fig4']}/table1.csv",
        _run(root, f"{where['fig4']}/fig4_checks.json"),
    )


def alignment(root: Path, p: pd.DataFrame, where: dict = WHERE) -> Claim:
    t, _ = _table1(root, where)
    parts = [
        reaches(
            _row(t, model=MODELS[1], regime=regime),
            "aligned",
            _row(t, model=MODELS[0], regime=regime),
            "unaligned",
            regime,
        )  # fmt: skip
        for regime in ("no loss", "≤ 1 point")
    ]
    return Claim(
        "Prediction alignment makes BiLD faster",
        paper_vs(p, "Table 1", ("bild-aligned", "minimal loss"), ("bild-unaligned", "minimal loss")),
        parts,
        f"{where['fig4']}/table1.csv",
        _run(root, f"{where['fig4']}/fig4_checks.json"),
    )


def ablations(root: Path, p: pd.DataFrame, where: dict = WHERE) -> Claim:
    t = read_csv(root, f"{where['fig5']}/fig5_best.csv")
    parts = []
    for w in ("0.5", "1"):
        bild = _row(t, variant="BiLD", pick=f"fastest within {w} (interval rule)")
        for v in ("No rollback", "No fallback (window)"):
            part = reaches(bild, "BiLD", _row(t, variant=v, pick=f"fastest within {w} (interval rule)"), v,
                           f"within {w} vs {v.lower()}")  # fmt: skip
            b, o = (_row(t, variant=x, pick=f"fastest within {w} (point rule)") for x in ("BiLD", v))
            if b is not None and o is not None and o["speedup"] >= b["speedup"]:  # said, not hidden
                part = replace(part, what=f"{part.what}; on the point rule {v} {o['speedup']:.2f}× against "
                                          f"BiLD {b['speedup']:.2f}×")  # fmt: skip
            parts.append(part)
    return Claim(
        "Rollback and fallback each make BiLD faster at the same quality (Fig. 5)",
        "Fig. 5 (plotted; no number in reported.csv)",
        parts,
        f"{where['fig5']}/fig5_best.csv",
        _run(root, f"{where['fig5']}/fig5_checks.json"),
    )


def _vs_speculative(t: pd.DataFrame, mode: str, paired: bool) -> list[Part]:
    """BiLD against the best speculative window in one decoding mode, at its latency and its score."""
    t = t[t["mode"] == mode]
    spec = _row(t, method="Speculative (best window)")
    lat, sc = _row(t, method="BiLD (match latency)"), _row(t, method="BiLD (match score)")
    sampled = t["seeds"].max() > 1
    if spec is None or lat is None or sc is None:
        return [missing(f"{mode}", "no speculative or no BiLD row")]
    if sampled and pd.isna(lat.get("speedup_lo")):  # a mean and std over seeds: the point only
        return [
            Part(f"BiLD {lat['speedup']:.2f}× at BLEU {lat['score']:.2f} ± {lat['score_std']:.2f} against "
                 f"speculative {spec['speedup']:.2f}× at {spec['score']:.2f} ± {spec['score_std']:.2f}",
                 lat["speedup"] >= spec["speedup"] and lat["score"] > spec["score"], False,
                 f"{mode}, equal latency", NO_INTERVAL),
            Part(f"BiLD {sc['speedup']:.2f}× at BLEU {sc['score']:.2f} against speculative "
                 f"{spec['speedup']:.2f}×", sc["score"] >= spec["score"] - NO_LOSS and sc["speedup"] >
                 spec["speedup"], False, f"{mode}, equal score", NO_INTERVAL),
        ]  # fmt: skip
    # Greedy speculative writes vanilla large's tokens: where it did on every sentence (paired), its
    # difference to vanilla is 0 in every replicate, and each BiLD row's paired difference to vanilla
    # is its difference to speculative decoding. Sampled, with intervals over seeds and sentences:
    # BiLD's interval must clear speculative's.
    ok = paired or sampled
    return [
        Part(f"at ≥ its latency ({lat['speedup']:.2f}× vs {spec['speedup']:.2f}×), BiLD {_d(lat)} against "
             f"its {_d(spec)}", lat["speedup"] >= spec["speedup"] and lat["delta"] > spec["delta"],
             ok and lat["speedup_lo"] >= spec["speedup_lo"] and lat["delta_lo"] > spec["delta_hi"],
             f"{mode}, equal latency"),
        Part(f"at its score (BiLD {_d(sc)}), BiLD {_x(sc)} against {_x(spec)}",
             sc["delta"] >= spec["delta"] - NO_LOSS and sc["speedup"] > spec["speedup"],
             ok and sc["delta_lo"] >= spec["delta_lo"] - NO_LOSS and sc["speedup_lo"] > spec["speedup_hi"],
             f"{mode}, equal score"),
    ]  # fmt: skip


def speculative(root: Path, p: pd.DataFrame, where: dict = WHERE) -> Claim:
    t = read_csv(root, f"{where['table3']}/table3.csv")
    c = read_json(root, f"{where['table3']}/table3_checks.json")
    paired = c["greedy speculative = vanilla large, % of examples (worst window)"] == 100
    parts = [q for mode in ("greedy", "sampled") for q in _vs_speculative(t, mode, paired)]
    r = read_csv(root, f"{where['table3']}/table4.csv")
    for mode in ("greedy", "sampled"):  # Table 4: BiLD's rollbacks against speculative's rejections
        m = r[r["mode"] == mode]
        b, s = m[m["method"].str.startswith("BiLD")], m[m["method"].str.startswith("Speculative")]
        if len(b) != 1 or len(s) != 1:
            parts.append(missing(f"{mode}, rollbacks", "no BiLD or no speculative row in table4.csv"))
            continue
        b, s = b.iloc[0], s.iloc[0]
        parts.append(Part(f"BiLD rolls back {b['rollback_pct']:.1f} % of its tokens, speculative decoding "
                          f"rejects {s['rollback_pct']:.1f} %", b["rollback_pct"] < s["rollback_pct"], False,
                          f"{mode}, rollbacks", "no 95 % interval recorded for the rates"))  # fmt: skip
    paper = "; ".join(paper_says(p, "Table 3", "bild-unaligned", r) for r in ("match latency", "match score"))
    spec_p = p[(p["table"] == "Table 3") & (p["row"] == "speculative-sampling")]["speedup"]
    t4 = p[p["table"] == "Table 4"]
    rb = ", ".join(f"{x:.2f}" for x in t4[t4["row"] == "bild-unaligned"]["rollback_pct"])
    sp = ", ".join(f"{x:.2f}" for x in t4[t4["row"] == "speculative-sampling"]["rollback_pct"])
    return Claim(
        "BiLD beats speculative decoding at equal latency and at equal score, and rolls back less "
        "(Tables 3, 4)",
        f"{paper}; speculative {_span(spec_p, '.2f', '×')}; Table 4 rollbacks: BiLD {rb} %, "
        f"speculative {sp} %",
        parts,
        f"{where['table3']}/table3.csv, table4.csv",
        _run(root, f"{where['table3']}/table3_checks.json"),
    )


def nucleus(root: Path, p: pd.DataFrame, where: dict = WHERE) -> Claim:
    t = read_csv(root, f"{where['table5']}/table5.csv")
    van = t[t["row"] == "Vanilla (large)"].iloc[0]
    r = t[t["row"] == "BiLD (better score)"].iloc[0]
    part = missing("better score", "no configuration scores at least vanilla's")
    if pd.notna(r.get("speedup_lo")):  # intervals over seeds and sentences (sampled.over_seeds)
        part = Part(f"BiLD (better score) {_x(r.rename({'speedup_mean': 'speedup'}))}, {_d(r)}, "
                    f"{int(r['seeds'])} seeds", r["speedup_mean"] > 1 and r["delta"] >= -NO_LOSS,
                    r["speedup_lo"] > 1 and r["delta_lo"] >= -NO_LOSS, "better score")  # fmt: skip
    elif pd.notna(r["score_mean"]):
        part = Part(
            f"BiLD (better score) {r['speedup_mean']:.2f}× ± {r['speedup_std']:.2f}, BLEU "
            f"{r['score_mean']:.2f} ± {r['score_std']:.2f} against {van['score_mean']:.2f} ± "
            f"{van['score_std']:.2f}, {int(r['seeds'])} seeds",
            r["speedup_mean"] > 1 and r["score_mean"] >= van["score_mean"] - NO_LOSS, False, "better score",
            NO_INTERVAL,
        )  # fmt: skip
    return Claim(
        "In nucleus sampling BiLD stays faster at no loss, about 1.5× (Table 5)",
        paper_says(p, "Table 5", "bild-aligned-nucleus", "better score"),
        [part],
        f"{where['table5']}/table5.csv",
        _run(root, f"{where['table5']}/table5_checks.json") + ", top-p 0.8",
    )


def early_exit(root: Path, p: pd.DataFrame, where: dict = WHERE) -> Claim:
    t = read_csv(root, f"{where['fig7']}/fig7.csv")
    ee, calm = t["label"].str.startswith("bild-ee"), t["method"] == "calm"
    parts = [
        reaches(
            pick(t, ee, w),
            f"early-exit BiLD {label(pick(t, ee, w))}".strip(),
            pick(t, calm, w),
            f"CALM {label(pick(t, calm, w))}".strip(),
            f"within {w:g}",
        )  # fmt: skip
        for w in (0.5, 1.0)
    ]
    return Claim(
        "Early-exit BiLD is faster than CALM at the same quality (Figs. 6, 7)",
        "Figs. 6, 7 (plotted; no number in reported.csv)",
        parts,
        f"{where['fig7']}/fig7.csv",
        _run(root, f"{where['fig7']}/fig7_checks.json"),
    )


CLAIMS = (
    no_loss,
    within_one,
    alignment,
    ablations,
    speculative,
    nucleus,
    early_exit,
    *numbers.CLAIMS,
)


def claims(root: Path, p: pd.DataFrame, where: dict = WHERE, which=CLAIMS) -> list[Claim]:
    return [f(root, p, where) for f in which]


def block(root: Path) -> str:
    """README's claims block: the table, then the rule and the scale it was decided at."""
    made = at_release(root, claims(root, paper_rows(root)))
    pair = read_json(root, "data/checkpoints/pair.json")["models"]
    large, small = (pair[f"multi30k-{m}"]["params"] / 1e6 for m in ("large", "small"))
    scale = (
        f"The paper measured mT5 and T5 (up to large) on IWSLT, WMT, XSUM and CNN/DailyMail on one GPU "
        f"at batch 1 (`{PAPER}`); here, Multi30k German→English with a {large:.0f} M- and "
        f"{small:.1f} M-parameter pair on a CPU, so the numbers are compared by kind, not by size."
    )
    counts = pd.Series([c.verdict for c in made]).value_counts()
    tally = "; ".join(f"{v}: {counts.get(v, 0)}" for v in VERDICTS)
    return table(made) + f"\n\n**{len(made)} claims** ({tally}). {RULE} {NOT_RUN} {scale}"
