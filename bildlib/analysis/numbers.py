"""The paper's numbered claims beside its comparisons (README's claims block, after
bildlib.analysis.claims): Fig. 2's share of the tokens the large model writes, the abstract's "up to
2.12×", Table 1's averages, Fig. 8's memory traffic and arithmetic intensity, v1 Table 2's language
modelling, v1 Fig. 6's share of faster examples and latency ratios, and Section 4.4's early-exit
speedups over vanilla. Each is judged against the paper's own number
(data/paper/text.csv for the numbers of its text and of its plots, reported.csv for its tables)
under verdicts.RULE, and where it does not hold the row gives the measured reason. The paper's
numbers are the bars as printed: "5×" is met by anything that rounds to 5 (at least 4.5), "> 97 %"
by more than 97 %.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT
from bildlib.analysis.tables import ReportError, read_csv, read_json, valid
from bildlib.analysis.verdicts import (
    NO_INTERVAL,
    NO_LOSS,
    Claim,
    Part,
    _d,
    _row,
    _run,
    _same,
    _table1,
    _x,
    missing,
    pick,
)

TEXT = "data/paper/text.csv"
SHORT = {"BiLD (unaligned)": "unaligned", "BiLD (aligned)": "aligned"}
PAPER_REGIME = {"no loss": "minimal loss", "≤ 1 point": "within 1 point"}


def said(root: Path, where: str, quantity: str) -> float:
    """The paper's number at `where` (a section, table or figure) for `quantity`, from TEXT: root's
    own where root has one (a checkout), else the repository's (a run of make reproduce writes its
    tables to a folder of its own, without the paper's numbers)."""
    t = read_csv(root if (root / TEXT).is_file() else REPO_ROOT, TEXT)
    valid(t, ["source", "where", "quantity", "value"])
    r = t[(t["where"] == where) & (t["quantity"] == quantity)]
    if len(r) != 1:
        raise ReportError(f"{TEXT}: {len(r)} rows for {where!r}, {quantity!r}, where the claims read one")
    return float(r["value"].iloc[0])


MODEL = {"BiLD (unaligned)": "small", "BiLD (aligned)": "aligned"}  # table1.csv's names, fig4.csv's


_SWEEPS: dict = {}  # (fig4.csv's path, its bytes' hash): its first repeat, parsed and checked once


def _sweep(root: Path, folder: str) -> pd.DataFrame:
    """<folder>/fig4.csv's first repeat: parsed once while its bytes stay the same."""
    f = Path(root) / folder / "fig4.csv"
    key = (str(f), hashlib.sha256(f.read_bytes()).hexdigest() if f.is_file() else None)
    if key not in _SWEEPS:
        t = read_csv(Path(root), f"{folder}/fig4.csv")
        valid(t, ["label", "method", "model", "repeat", "latency_s", "small_s", "large_s", "large_calls",
                  "tokens", "n"])  # fmt: skip
        _SWEEPS[key] = t[t["repeat"] == 0]
    return _SWEEPS[key]


def why_slow(root: Path, folder: str, r) -> str:
    """Why a BiLD pick falls short here, measured in the sweep it came from (<folder>/fig4.csv): where
    its time went (small model, large model, outside both), how many large calls a sentence made and
    what one cost in large steps, and the small step over the large one (vanilla, per token). The
    pick is the row of its label, else of its model and configuration (verdicts._same)."""
    t = _sweep(root, folder)
    if "label" in r:
        b = t[t["label"] == r["label"]]
    else:
        b = t[(t["method"] == "bild") & (t["model"] == MODEL.get(r["model"]))]
        valid(b, ["fallback", "rollback", "verify_end"])  # verdicts._same's keys
        b = b[[_same(row, r) for _, row in b.iterrows()]]
    step = {m: t[(t["method"] == "vanilla") & (t["model"] == m)] for m in {"large", *b["model"]}}
    if any(len(v) != 1 for v in step.values()) or len(b) != 1:
        raise ReportError(f"{folder}/fig4.csv: not one vanilla row per model read (large and the pick's) and "
                          f"one row for the pick {r.get('label', r['model'])!r}, where the claims read them")
    b = b.iloc[0]
    per = {m: v.iloc[0]["latency_s"] * v.iloc[0]["n"] / v.iloc[0]["tokens"] for m, v in step.items()}
    calls, small = b["large_calls"] / b["n"], per[b["model"]] / per["large"]
    cost = b["large_s"] * b["n"] / b["large_calls"] / per["large"] if b["large_calls"] else 0.0
    share = {k: b[f"{k}_s"] / b["latency_s"] for k in ("small", "large")}
    return (f"its time here: {100 * share['small']:.0f} % in the small model, "
            f"{100 * share['large']:.0f} % in the large ({calls:.1f} calls a sentence, each {cost:.1f} "
            "large steps), "
            f"{100 * (1 - share['small'] - share['large']):.0f} % outside both; a small step costs "
            f"{100 * small:.0f} % of a large one ({folder}/fig4.csv)")


def reach(r, bar: float, name: str, why: str) -> Part:
    """A speedup pick against the paper's number: its 95 % interval's lower end must reach it."""
    part = Part(f"{_x(r)} against the paper's {bar:.2f}×", r["speedup"] >= bar, r["speedup_lo"] >= bar, name)
    return part if part.holds else Part(part.what, part.point, False, name, f"{part.reason}; {why}")


def averages(root: Path, p: pd.DataFrame, where: dict) -> Claim:
    t, _ = _table1(root, where)
    parts, bars = [], []
    for m, short in SHORT.items():
        for regime, paper in PAPER_REGIME.items():
            bar = said(root, "Table 1 (average)", f"speedup bild-{short} {paper}")
            bars.append(f"{short} {paper} {bar:.2f}×")
            r, name = _row(t, model=m, regime=regime), f"{short}, {regime}"
            parts.append(
                missing(name, "no configuration qualifies") if r is None
                else reach(r, bar, name, why_slow(root, where["fig4"], r))
            )
    return Claim("BiLD's speedups, on average over the paper's datasets (Table 1)",
                 "Table 1's averages: " + ", ".join(bars), parts, f"{where['fig4']}/table1.csv",
                 _run(root, f"{where['fig4']}/fig4_checks.json"))  # fmt: skip


def headline(root: Path, p: pd.DataFrame, where: dict) -> Claim:
    t, _ = _table1(root, where)
    bar = said(root, "Abstract", "speedup (the largest)")
    picks = t[t["model"].isin(list(SHORT)) & t["regime"].isin(list(PAPER_REGIME)) & t["speedup"].notna()]
    if picks.empty:
        part = missing("fastest pick", "no configuration qualifies")
    else:
        r = picks.loc[picks["speedup"].idxmax()]
        part = reach(r, bar, "fastest pick", why_slow(root, where["fig4"], r))
        part = Part(
            f"{r['model']}, {r['regime']}: {part.what}", part.point, part.interval, part.name, part.why
        )
    t1 = p[(p["table"] == "Table 1") & p["speedup"].notna()]
    top = t1.loc[t1["speedup"].idxmax()]  # the abstract's number is Table 1's largest
    return Claim(f"Up to {bar:.2f}× with minimal quality loss (the abstract)",
                 f"Abstract: {bar:.2f}× (Table 1's largest: {top['row']}, {top['dataset']}, {top['regime']}, "
                 f"{top['speedup']:.2f}×)", [part],
                 f"{where['fig4']}/table1.csv", _run(root, f"{where['fig4']}/fig4_checks.json"))  # fmt: skip


def fig8(root: Path, p: pd.DataFrame, where: dict) -> Claim:
    """Counted bytes and FLOPs are exact: their interval is the value."""
    t = read_csv(root, f"{where['fig8']}/fig8.csv")
    mem, ai = (said(root, "Fig. 8", q) for q in ("memory operations (vanilla over BiLD)",
                                                 "arithmetic intensity (BiLD over vanilla)"))  # fmt: skip
    parts = []
    for pair, short in (("T5-small/large (configs; the paper's CNN/DM pair)", "the paper's T5 pair"),
                        ("multi30k (shipped)", "the shipped pair")):  # fmt: skip
        b = t[(t["pair"] == pair) & (t["run"] == "BiLD")]
        if len(b) != 1:
            raise ReportError(f"{where['fig8']}/fig8.csv: no BiLD row for {pair!r}")
        b = b.iloc[0]
        van = t[(t["pair"] == pair) & (t["run"] == "vanilla large")]["weight_bytes"].iloc[0]
        less, more = 1 / b["bytes_rel"], b["intensity_rel"]
        why = (f"BiLD's large calls still read {b['weight_bytes'] / van:.0%} of vanilla's weight bytes, at "
               f"{b['flops_rel']:.2f}× its FLOPs")  # fmt: skip
        for x, bar, what in ((less, mem, "fewer bytes"), (more, ai, "arithmetic intensity")):
            ok = round(x) >= bar
            no = f"{x:.1f}× rounds to {round(x)}, not {bar:g}: {why}"
            what = f"{short}, {what}"
            parts.append(Part(f"{x:.1f}×, counted on {short}'s shapes", ok, ok, what, "" if ok else no))
    return Claim("BiLD moves about 5× fewer bytes, at about 5× the arithmetic intensity (Fig. 8)",
                 f'Fig. 8: "{mem:g}× reduction of memory operations", arithmetic intensity "approximately '
                 f'{ai:g} times"', parts, f"{where['fig8']}/fig8.csv",
                 _run(root, f"{where['fig8']}/fig8_checks.json"))  # fmt: skip


def language_modelling(root: Path, p: pd.DataFrame, where: dict) -> Claim:
    t = read_csv(root, f"{where['table2_lm']}/table2_lm.csv")
    valid(t, ["row", "perplexity", "gen_speedup", "gen_speedup_lo"])
    van = t[t["row"] == "vanilla large"]["perplexity"].iloc[0]
    bild = t[t["row"] == "BiLD"]
    v1 = p[(p["table"] == "Table 2") & (p["dataset"] == "wikitext-2") & (p["row"] == "bild")]
    parts, bars = [], []
    for regime, tol in (("group 1 (minimal loss)", NO_LOSS), ("group 2 (about 1 point)", 1.0)):
        bar = float(v1[v1["regime"] == regime]["speedup"].iloc[0])
        bars.append(f"{bar:.2f}× ({regime})")
        ok = bild[bild["perplexity"] <= van + tol]
        name = f"perplexity within {tol:g}"
        if ok.empty:
            parts.append(missing(name, f"no fallback within {tol:g} of vanilla's perplexity"))
            continue
        r = ok.loc[ok["gen_speedup"].idxmax()]
        s = f"{r['gen_speedup']:.2f}× [{r['gen_speedup_lo']:.2f}, {r['gen_speedup_hi']:.2f}]"
        why = (
            f"BiLD is slower than vanilla at every such fallback ({s} at the fastest)"
            if r["gen_speedup"] < 1
            else f"{s} against the paper's {bar:.2f}×"
            if r["gen_speedup_lo"] < bar
            else NO_INTERVAL
        )
        parts.append(
            Part(
                f"α_FB {r['fallback']:g}: perplexity {r['perplexity']:.2f} against vanilla's {van:.2f}, "
                f"{s} against the paper's {bar:.2f}×",
                r["gen_speedup"] >= bar,
                False,
                name,
                why,
            )
        )
    return Claim("Fallback-only BiLD speeds up language modelling (v1, Table 2)",
                 "v1 Table 2, GPT-2 on WikiText-2: " + ", ".join(bars), parts,
                 f"{where['table2_lm']}/table2_lm.csv",
                 _run(root, f"{where['table2_lm']}/table2_lm_checks.json"))  # fmt: skip


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson interval of a proportion k / n."""
    f, d = k / n, 1 + z * z / n
    c, h = (f + z * z / (2 * n)) / d, z * math.sqrt(f * (1 - f) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def faster_examples(root: Path, p: pd.DataFrame, where: dict) -> Claim:
    c = read_json(root, f"{where['scatter']}/latency_scatter_checks.json")
    n, k = int(c["examples"]), int(c["examples"]) - int(c["slower examples"])
    bar, (lo, hi) = said(root, "Fig. 6", "examples faster than vanilla (%)"), wilson(k, n)
    parts = [Part(f"`{c['shown']}` faster than vanilla large on {k} of {n} sentences, {100 * k / n:.0f} % "
                  f"[{100 * lo:.1f}, {100 * hi:.1f}] (Wilson); the bar: more than {bar:g} %",
                  100 * k / n > bar, 100 * lo > bar, "examples")]  # fmt: skip
    # its latency over vanilla's, from the sweep the scatter plots (fig4.csv): 1 / speedup, interval too
    t = read_csv(root, f"{where['scatter']}/fig4.csv")
    r = t[t["label"] == c["shown"]]
    if len(r) != 1:
        raise ReportError(f"{where['scatter']}/fig4.csv: {len(r)} rows for {c['shown']!r}, where the claims "
                          "read one")
    r, bars = r.iloc[0], []
    lat, lat_lo, lat_hi = 1 / r["speedup"], 1 / r["speedup_hi"], 1 / r["speedup_lo"]  # 1 / speedup
    for q in ("latency over vanilla (the larger)", "latency over vanilla (the smaller)"):
        b = said(root, "Fig. 6", q)
        bars.append(f"{b:.2f}×")
        parts.append(Part(f"`{c['shown']}` at {lat:.2f}× [{lat_lo:.2f}, {lat_hi:.2f}] vanilla large's "
                          f"latency; the bar: at most {b:.2f}×", lat <= b, lat_hi <= b,
                          f"latency at most {b:.2f}×",
                          "" if lat <= b else why_slow(root, where["scatter"], r)))  # fmt: skip
    return Claim("BiLD is faster than vanilla on almost every example (v1, Fig. 6)",
                 f'v1 Fig. 6: "> {bar:g}%" of the examples faster, at {" and ".join(bars)} the latency',
                 parts,
                 f"{where['scatter']}/latency_scatter_checks.json, fig4.csv",
                 _run(root, f"{where['scatter']}/latency_scatter_checks.json"))  # fmt: skip


def early_exit(root: Path, p: pd.DataFrame, where: dict) -> Claim:
    """Early-exit BiLD against vanilla decoding of its own full model, within one point on the
    interval (verdicts.pick), against each of Section 4.4's two numbers."""
    t = read_csv(root, f"{where['fig7']}/fig7.csv")
    r, parts, bars = pick(t, t["label"].str.startswith("bild-ee"), 1.0), [], []
    for q in ("early-exit BiLD speedup (the smaller)", "early-exit BiLD speedup (the larger)"):
        bar = said(root, "Section 4.4", q)
        bars.append(f"{bar:.2f}×")
        name = f"within 1, against {bar:.2f}×"
        parts.append(missing(name, "no configuration within 1 point on the interval") if r is None else
                     reach(r, bar, name, f"fastest within 1 on the interval: {r['label']}, {_d(r)}"))
    return Claim("Early-exit BiLD is faster than its full model alone (Section 4.4)",
                 f"Section 4.4: up to {' and '.join(bars)} over vanilla, within about one point", parts,
                 f"{where['fig7']}/fig7.csv", _run(root, f"{where['fig7']}/fig7_checks.json"))  # fmt: skip


def agreement(root: Path, p: pd.DataFrame, where: dict) -> Claim:
    t = read_csv(root, f"{where['fig2']}/fig2.csv")
    o = t[t["method"] == "oracle"].sort_values("large_pct")

    def first(col: str):  # the fewest large tokens that reach vanilla large's BLEU
        ok = o[o[col] >= -NO_LOSS]
        return None if ok.empty else ok.iloc[0]

    pt, iv = first("delta"), first("delta_lo")
    bar = said(root, "Fig. 2", "large model's share of the tokens (%)")
    if pt is None:
        part = missing("oracle", "no oracle row reaches vanilla large's BLEU")
    else:
        at = "none" if iv is None else f"{iv.large_pct:.0f} %"
        part = Part(f"the large model writes {pt['large_pct']:.0f} % of the tokens to reach vanilla large's "
                    f"BLEU ({_d(pt)}); {at} at 95 %; the bar: at most {bar:g} %",
                    pt["large_pct"] <= bar, iv is not None and iv["large_pct"] <= bar,
                    "oracle")  # fmt: skip
    return Claim(
        "The small model's tokens mostly stand: the large one corrects only a few (Fig. 2)",
        f'Fig. 2: the large model replaces "approximately {bar:g}%" of the tokens',
        [part],
        f"{where['fig2']}/fig2.csv",
        _run(root, f"{where['fig2']}/fig2_checks.json"),
    )


CLAIMS = (agreement, headline, averages, fig8, language_modelling, faster_examples, early_exit)
