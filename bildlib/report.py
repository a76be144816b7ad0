"""README's result blocks, generated from the committed CSVs and JSON: one source for every number.

README.md and docs/results.md (FILES) hold each block between `<!-- report:NAME -->` and
`<!-- /report:NAME -->`; BLOCKS maps NAME to the function that writes it from the files under a
root (the repository, or a copy a test edits). `python -m bildlib.report` (make report) rewrites
the blocks in place; `--check` exits 1, naming the blocks, when a file differs from what the
committed CSVs and JSON give (the test suite checks the same). Nothing between the markers is
typed by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from bildlib import REPO_ROOT, data

NOT_A_NUMBER = re.compile(r"\b(?:nan|inf|infinity)\b", re.I)
BLOCK = re.compile(r"(<!-- report:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /report:(?P=name) -->)", re.S)


class ReportError(ValueError):
    """A committed file holds a value a block cannot render honestly: a missing field or column,
    NaN or infinity where a number is shown. The message names the file and the field."""


def _csv(root: Path, path: str) -> pd.DataFrame:
    f = root / path
    if not f.is_file():
        raise FileNotFoundError(f"{path}: the report needs it; its notebook writes it (make figures)")
    t = pd.read_csv(f)
    t.attrs["path"] = path
    return t


def _json(root: Path, path: str) -> dict:
    f = root / path
    if not f.is_file():
        raise FileNotFoundError(f"{path}: the report needs it; its notebook writes it (make figures)")
    doc = json.loads(f.read_text())
    _finite(doc, path, "")
    return Fields(path, doc)


class Fields(dict):
    """A JSON object the report reads: a missing field is a ReportError naming the file."""

    def __init__(self, path: str, doc: dict):
        super().__init__({k: Fields(f"{path}: {k}", v) if isinstance(v, dict) else v for k, v in doc.items()})
        self.path = path

    def __missing__(self, key):
        raise ReportError(f"{self.path}: field {key!r} is missing; rerun the command that writes it")


def _finite(x, path: str, where: str) -> None:
    """Every number in a JSON document is finite (json writes NaN and Infinity unquoted)."""
    if isinstance(x, dict):
        for k, v in x.items():
            _finite(v, path, f"{where}.{k}" if where else str(k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            _finite(v, path, f"{where}[{i}]")
    elif isinstance(x, float) and not math.isfinite(x):
        raise ReportError(f"{path}: field {where!r} is {x}, not a number the report can show")


def _valid(t: pd.DataFrame, cols: list[str], rows: pd.Series | None = None) -> pd.DataFrame:
    """Check that every value of cols (in rows, a mask over t; default all) is present and, where
    numeric, finite; a ReportError names the file (t.attrs["path"]), the column and the row."""
    path = t.attrs.get("path", "a table")
    mask = pd.Series(True, index=t.index) if rows is None else rows.reindex(t.index, fill_value=False)
    for c in cols:
        if c not in t.columns:
            raise ReportError(f"{path}: column {c!r} is missing; rerun the command that writes it")
        v = t.loc[mask, c]
        bad = v.isna()
        if pd.api.types.is_numeric_dtype(v) and not pd.api.types.is_bool_dtype(v):
            bad |= ~np.isfinite(v.astype(float))
        if bad.any():
            i = bad[bad].index[0]
            who = next((f" ({t.at[i, k]})" for k in ("label", "model", "decoder", "row", "variant")
                        if k in t.columns and isinstance(t.at[i, k], str)), "")  # fmt: skip
            raise ReportError(f"{path}: column {c!r} is {t.at[i, c]} in row {i}{who}, where the report "
                              "shows a number; rerun the command that writes the file")  # fmt: skip
    return t


def _num(x, fmt: str = ".2f", unit: str = "") -> str:
    return "–" if pd.isna(x) else f"{x:{fmt}}{unit}"


def _ci(r, col: str, fmt: str = ".2f", unit: str = "") -> str:
    """ "value [lo, hi]" from a row's col and its col_lo / col_hi (or only the value)."""
    v = _num(r.get(col), fmt, unit)
    lo, hi = r.get(f"{col}_lo"), r.get(f"{col}_hi")
    if v == "–" or lo is None or pd.isna(lo):
        return v
    return f"{v} [{lo:{fmt}}, {hi:{fmt}}]"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def _run(checks: dict) -> str:
    """The line naming what a run was measured with, from a notebook's _checks.json."""
    return (
        f"n = {checks['n']}, {checks['dtype']}, {checks['engine']} engine, {checks['device']} "
        f"({checks.get('threads', 2)} threads); baseline {checks['baseline']} "
        f"{checks['baseline ms']:.1f} ms per sentence, its {checks['baseline repeats']} interleaved repeats "
        f"spread {checks['baseline spread %']:.1f} %; {checks['busy configurations']} of "
        f"{checks['configurations']} configurations timed on a busy machine"
    )


def regimes(t: pd.DataFrame, rule: str = "interval") -> str:
    """Table 1 as README shows it (Markdown), from fig4's table (table1.csv's rows), under one rule."""
    vanilla = t["regime"].isna() | (t["regime"] == "")  # "" in analysis.summary_table, NaN read back from CSV
    empty = ~vanilla & t[["score", "speedup", "fallback", "rollback"]].isna().all(axis=1)  # none qualifies
    _valid(t, ["model", "rule", "score", "speedup"], ~empty)
    _valid(t, ["delta", "fallback", "rollback", "verify_end"], ~empty & ~vanilla)
    rows = []
    for _, r in t[t["rule"] == rule].iterrows():
        fb = "" if pd.isna(r.get("fallback")) else f"{r['fallback']:g}"
        rb = "" if pd.isna(r.get("rollback")) else f"{r['rollback']:g}"
        end = {True: "yes", False: "no"}.get(r.get("verify_end") in (True, "True"), "")
        end = "" if not fb else end
        regime = "" if pd.isna(r["regime"]) else r["regime"]
        rows.append([r["model"], regime, _ci(r, "score"), _ci(r, "delta", "+.2f"),
                     _ci(r, "speedup", ".2f", "×"), fb, rb, end])  # fmt: skip
    head = ["", "regime", "BLEU [95 %]", "Δ BLEU vs vanilla [95 %, paired]", "speedup [95 %]", "α_FB", "α_RB",
            "verify_end"]  # fmt: skip
    return _table(head, rows)


RULE_TEXT = {
    "interval": "Regimes decided on the interval: a configuration qualifies when the lower end of the 95 % "
    "paired interval of its BLEU difference to vanilla large is at least −tol (at 95 % confidence it "
    "loses at most tol).",
    "point": "The paper's rule: the measured BLEU within tol of vanilla large's.",
}


def table1(root: Path, folder: str = "figures", rule: str = "interval") -> str:
    """Table 1 (fig4.ipynb's table1.csv in folder) under one rule (analysis.RULES)."""
    t, c = _csv(root, f"{folder}/table1.csv"), _json(root, f"{folder}/fig4_checks.json")
    return f"*{_run(c)}; `{c['signature']}`.* {RULE_TEXT[rule]}\n\n" + regimes(t, rule)


def headline(root: Path) -> str:
    return table1(root, "figures/full")


def fig5(root: Path) -> str:
    t, c = _csv(root, "figures/fig5_best.csv"), _json(root, "figures/fig5_checks.json")
    _valid(t, ["variant", "pick"])
    _valid(t, ["score", "delta", "speedup"], t["label"].notna())
    rows = []
    for _, r in t[~t["pick"].str.contains("point rule")].iterrows():
        what = r["label"] if isinstance(r.get("label"), str) else "none"
        rows.append([r["variant"], r["pick"].replace(" (interval rule)", ""), what, _ci(r, "score"),
                     _ci(r, "delta", "+.2f"), _ci(r, "speedup", ".2f", "×")])  # fmt: skip
    head = [
        "variant",
        "pick (interval rule)",
        "configuration",
        "BLEU [95 %]",
        "Δ vs vanilla [95 %]",
        "speedup [95 %]",
    ]
    return f"*{_run(c)}.*\n\n" + _table(head, rows)


def tables34(root: Path) -> str:
    out = []
    for name in ("table3", "table4"):
        t = _csv(root, f"figures/{name}.csv")
        _valid(t, ["mode", "seeds", "method", "score", "speedup"])
        _valid(t, ["score_std", "speedup_std"], t["seeds"] > 1)
        _valid(t, ["delta"], t["seeds"] == 1)
        _valid(t, ["fallback_pct", "rollback_pct", "large_call_pct"], t["method"] != "Vanilla (large)")
        rows = []
        for _, r in t.iterrows():
            if r["seeds"] > 1:
                score, delta = f"{r['score']:.2f} ± {r['score_std']:.2f}", "–"
                speed = f"{r['speedup']:.2f} ± {r['speedup_std']:.2f}×"
            else:
                score, delta, speed = _ci(r, "score"), _ci(r, "delta", "+.2f"), _ci(r, "speedup", ".2f", "×")
            pcts = ("fallback_pct", "rollback_pct", "large_call_pct")
            rates = ["–"] * 3 if r["method"] == "Vanilla (large)" else [_num(r.get(c), ".1f") for c in pcts]
            what = [r["mode"], str(int(r["seeds"])), r["method"], str(r.get("label", ""))]
            rows.append([*what, score, delta, speed, *rates])
        head = ["mode", "seeds", "method", "configuration", "BLEU", "Δ vs vanilla [95 %]", "speedup",
                "fallback %", "rollback %", "large calls per token %"]  # fmt: skip
        out += [f"**Table {name[-1]}**", "", _table(head, rows), ""]
    c = _json(root, "figures/table3_checks.json")
    greedy = c["greedy speculative = vanilla large, % of examples (worst window)"]
    return "\n".join(out) + (
        "\nThe rows are picked as the paper picks them, on the measured (mean) scores; the intervals "
        "say how sure each pick is. "
        f"Greedy: one sweep, [95 % intervals]. Sampled: seeds {c['sampled seeds']}, one sweep each, "
        f"mean ± std over seeds. Greedy speculative decoding wrote vanilla large's tokens on {greedy:.0f} % "
        "of the sentences at its worst window."
    )


def table5(root: Path) -> str:
    t = _csv(root, "figures/table5.csv")
    has = t["score_mean"].notna()
    _valid(t, ["row", "score_std", "speedup_mean", "speedup_std", "seeds"], has)
    _valid(t, ["fallback_pct", "rollback_pct"], has & (t["row"] != "Vanilla (large)"))
    rows = []
    for _, r in t[t["score_mean"].notna()].iterrows():
        van = r["row"] == "Vanilla (large)"
        rates = ["–", "–"] if van else [_num(r.get(c), ".1f") for c in ("fallback_pct", "rollback_pct")]
        score = f"{r['score_mean']:.2f} ± {r['score_std']:.2f}"
        speed = f"{r['speedup_mean']:.2f} ± {r['speedup_std']:.2f}×"
        rows.append([r["row"], str(r.get("config", "")), score, speed, *rates, _num(r.get("seeds"), ".0f")])
    return _table(
        ["row", "configuration", "BLEU (mean ± std)", "speedup", "fallback %", "rollback %", "seeds"], rows
    )


def fig8(root: Path) -> str:
    t, p, c = (
        _csv(root, "figures/fig8.csv"),
        _csv(root, "figures/fig8_roofline.csv"),
        _json(root, "figures/fig8_checks.json"),
    )
    _valid(t, ["pair", "flops_rel", "bytes_rel", "intensity_rel"], t["run"] != "vanilla large")
    _valid(p, ["pair", "layer_overhead_us", "gpu", "speedup"])
    b = t[t["run"] != "vanilla large"]
    rows = [[r["pair"], f"{r['flops_rel']:.2f}×", f"{r['bytes_rel']:.2f}×", f"{r['intensity_rel']:.2f}×"]
            for _, r in b.iterrows()]  # fmt: skip
    proj = p.pivot_table(index=["pair", "layer_overhead_us"], columns="gpu", values="speedup", sort=False)
    prow = [
        [pair, f"{us:g} µs"] + [f"{proj.loc[(pair, us), g]:.2f}×" for g in proj.columns]
        for pair, us in proj.index
    ]
    lo, hi = c["measured speedup 95% interval"]
    return "\n".join([
        f"Counted for `{c['counted']}` against vanilla large (the same calls on each pair's shapes):", "",
        _table(["pair", "FLOPs", "memory ops", "arithmetic intensity"], rows), "",
        "Roofline projection (a model, not a measurement; 16-bit weights):", "",
        _table(["pair", "overhead per layer", *proj.columns], prow), "",
        f"Measured on this machine: {c['measured speedup']:.2f}× [{lo:.2f}, {hi:.2f}] ({_run(c)}).",
    ])  # fmt: skip


def peers(root: Path, folder: str = "figures/peers") -> str:
    """The peers table (peers.ipynb); its run from its _checks.json, where the run wrote one."""
    t = _csv(root, f"{folder}/peers.csv")
    _valid(t, ["decoder", "score", "ms", "speedup_same_engine", "speedup_vs_generate"])
    checks = root / folder / "peers_checks.json"
    run = (f"*{_run(_json(root, f'{folder}/peers_checks.json'))}.*\n\n" if checks.is_file() else
           f"*An earlier run, from before the notebooks recorded their checks (`{folder}` has no "
           "peers_checks.json), so its CSV does not name its dtype; make bench reruns it.*\n\n")  # fmt: skip
    iv = "speedup_lo" in t  # newer runs have the speedup's interval and the calls
    named = {"speedup_lo": "speedup_same_engine_lo", "speedup_hi": "speedup_same_engine_hi"}
    speed = [_ci(r.rename(named), "speedup_same_engine", ".2f", "×") for _, r in t.iterrows()]
    rows = [[r["decoder"], f"{r['score']:.2f}", f"{r['ms']:.1f}", sp, f"{r['speedup_vs_generate']:.2f}×"]
            + ([_num(r["large_calls_per_sentence"])] if iv else []) + [_num(r.get("loop_pct"), ".1f")]
            for sp, (_, r) in zip(speed, t.iterrows(), strict=True)]  # fmt: skip
    head = ["decoder", "BLEU", "ms / sentence", "speedup, same engine" + (" [95 %]" if iv else ""),
            "vs `generate`"] + (["large calls / sentence"] if iv else [])  # fmt: skip
    head += ["loop % of call time"]
    return run + _table(head, rows)


def peers_val(root: Path) -> str:
    return peers(root, "figures/peers/val")


def peers_val_fp32(root: Path) -> str:
    return peers(root, "figures/peers/val-float32")


def ct2(root: Path, f: str = "figures/peers/val") -> str:
    """CTranslate2 greedy against bildlib on the same sentences (bildlib.ct2peer): the ct2.csv that
    make bench writes into folder f, with its run from ct2_checks.json (README shows the default
    dtype's run, docs/results.md the float32 one, ct2_fp32)."""
    if not (root / f / "ct2.csv").is_file():
        raise ReportError(f"no ct2.csv in {f}: make bench writes it")
    t, c = _csv(root, f"{f}/ct2.csv"), _json(root, f"{f}/ct2_checks.json")
    _valid(t, ["decoder", "score", "ms", "vs_ct2", "vs_ct2_lo", "vs_ct2_hi", "speedup"])
    if not t["decoder"].str.startswith("CTranslate2").any():
        raise ReportError(f"{f}/ct2.csv: no CTranslate2 row")
    best = t[t["decoder"].str.contains("≤")].nsmallest(1, "ms")
    lead = ("" if best.empty else
            f"The fastest BiLD within 0.5 BLEU ({best['label'].iloc[0]}) takes "
            f"**{_ci(best.iloc[0], 'vs_ct2', '.2f', '×')}** CTranslate2 greedy's time.\n\n")  # fmt: skip
    rows = [[r["decoder"], f"{r['score']:.2f}", f"{r['ms']:.1f}", _ci(r, "vs_ct2", ".2f", "×"),
             _ci(r, "speedup", ".2f", "×")] for _, r in t.iterrows()]  # fmt: skip
    return (f"*`{f}`: n = {c['n']} {c['split']} sentences, {t['dtype'].iloc[0]}, {c['processor']} "
            f"({c['cpu']}), {c['threads']} threads, CTranslate2 {c['ctranslate2']}; each engine in its own "
            f"process, alternated in blocks of {c['block']} sentences; `{c['signature']}`.*\n\n" + lead
            + _table(["decoder", "BLEU", "ms / sentence", "time vs CTranslate2 greedy [95 %]",
                      "speedup vs vanilla large [95 %]"], rows))  # fmt: skip


def ct2_fp32(root: Path) -> str:
    return ct2(root, "figures/peers/val-float32")


def early_exit(root: Path) -> str:
    b, m = _csv(root, "figures/fig7_best.csv"), _csv(root, "figures/fig7_matched.csv")
    c6, c7 = _json(root, "figures/fig6_checks.json"), _json(root, "figures/fig7_checks.json")
    _valid(b, ["curve", "within", "score", "delta", "speedup"])
    _valid(m, ["speedup"])
    rows = [[r["curve"], f"{r['within']:g}", str(r.get("label", "")), _ci(r, "score"),
             _ci(r, "delta", "+.2f"), _ci(r, "speedup", ".2f", "×")] for _, r in b.iterrows()]  # fmt: skip
    mrow = [[f"{r['speedup']:.2f}×", _num(r["bild"]), _num(r["calm"]), _num(r["bild_minus_calm"], "+.2f")]
            for _, r in m.iterrows()]  # fmt: skip
    return "\n".join([
        f"*fig6: {_run(c6)}. fig7: {_run(c7)}.*", "",
        "The fastest configuration of each curve whose measured BLEU is within 0.5 or 1 point of the full "
        "model's (the paper's rule; the Δ interval says how sure):", "",
        _table(["curve", "within", "fastest", "BLEU [95 %]", "Δ vs full model [95 %]", "speedup [95 %]"],
               rows),
        "",
        "Best BLEU at or below each latency (the frontiers read as step functions):", "",
        _table(["speedup", "early-exit BiLD", "CALM", "BiLD − CALM"], mrow),
    ])  # fmt: skip


def latency(root: Path) -> str:
    c = _json(root, "figures/latency_scatter_checks.json")
    return (f"`{c['shown']}` was slower than vanilla large on {c['slower examples']} of {c['examples']} "
            f"sentences ({_run(c)}).")  # fmt: skip


def pair(root: Path) -> str:
    p = _json(root, "data/checkpoints/pair.json")
    rows = []
    for name, m in p["models"].items():
        scores = [f"{m[split]['bleu']:.2f}" for split in ("val", "test_2016_flickr")]
        ms = f"{m['latency']['per_token_ms']:.2f}"
        rows.append([f"`{name}`", f"{m['params'] / 1e6:.2f} M", *scores, ms])
    return _table(
        ["checkpoint", "parameters", "greedy BLEU, val (1,014)", "test 2016 (1,000)", "ms / token (CPU)"],
        rows,
    )


def tutorial(root: Path) -> str:
    c = _json(root, "figures/tutorial_checks.json")
    return (f"The committed run (`make tutorial`, every exercise filled in by its solution): "
            f"{c['passed']} of {c['exercises']} checks pass; its cells ran in {c['seconds']:.0f} s on "
            f"{c['device']} ({c['threads']} threads, {c['dtype']}), with n_examples = {c['n_examples']} and "
            f"n_sweep = {c['n_sweep']}.")  # fmt: skip


def _table2():
    from bildlib import table2  # notebooks/table2_lm's tables (it imports torch: only when asked)

    return table2


def _bench():
    from bildlib import bench  # it formats with this module's helpers

    return bench


def _smallmodels():
    from bildlib import smallmodels  # notebooks/small_models' block (it imports torch: only when asked)

    return smallmodels


def _petstudy():
    from bildlib import petstudy  # notebooks/pet's block

    return petstudy


def _gpu():
    from bildlib.gpu import render  # the GPU check's files

    return render


def _batchbench():
    from bildlib import batchbench  # it imports torch: only when asked

    return batchbench


BLOCKS: dict[str, Callable[[Path], str]] = {
    "headline": headline, "table1": table1, "fig5": fig5, "tables34": tables34, "table5": table5,
    "early-exit": early_exit, "peers": peers, "ct2": ct2,
    # docs/results.md
    "headline-point": lambda r: table1(r, "figures/full", "point"),
    "table1-point": lambda r: table1(r, rule="point"),
    "authors": lambda r: table1(r, "figures/authors"),
    "authors-point": lambda r: table1(r, "figures/authors", "point"),
    "latency": latency, "fig8": fig8, "peers-val": peers_val, "pair": pair,
    "peers-val-float32": peers_val_fp32, "ct2-float32": ct2_fp32,
    "dtype": lambda r: _bench().dtype_block(r), "targets": lambda r: _bench().summary_block(r),  # README
    "targets-detail": lambda r: _bench().targets_block(r),  # docs/results.md
    "tutorial": tutorial,  # docs/teaching.md
    "table2-lm": lambda r: _table2().block(r), "lm-pair": lambda r: _table2().pair_block(r),
    "table2-lm-student": lambda r: _table2().block(r, "figures/lm-student"),  # docs/language-modelling.md
    "lm-targets": lambda r: _table2().targets_block(r),
    "batch": lambda r: _batchbench().block(r),  # README; docs/batching.md:
    "batch-detail": lambda r: _batchbench().detail_block(r),
    "batch-exact": lambda r: _batchbench().exact_block(r),
    "students": lambda r: _smallmodels().block(r),  # docs/results.md
    "students-mixed": lambda r: _smallmodels().block(r, "figures/small_models/mixed", limits=False),
    "pet": lambda r: _petstudy().block(r),
    "gpu-check": lambda r: _gpu().block(r),  # docs/engines.md
}  # fmt: skip
# the files whose blocks make report writes
FILES = ("README.md", "docs/results.md", "docs/teaching.md", "docs/language-modelling.md", "docs/batching.md",
         "docs/engines.md")


def render(text: str, root: Path = REPO_ROOT) -> str:
    """text with every block regenerated from the files under root; an unknown block is an error."""

    def one(m: re.Match) -> str:
        name = m["name"]
        if name not in BLOCKS:
            raise ValueError(f"README block {name!r} has no generator in bildlib.report.BLOCKS")
        body = BLOCKS[name](root).rstrip()
        if bad := NOT_A_NUMBER.search(body):  # a value no check above caught: never print it
            raise ReportError(f"block {name!r} would show {bad[0]!r}: a file it reads holds a NaN or "
                              f"an infinity ({body[max(0, bad.start() - 60) : bad.end() + 20]!r})")
        return m.group(1) + body + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def stale(text: str, root: Path = REPO_ROOT) -> list[str]:
    """The names of the blocks of text that differ from what the files under root give."""
    return _differ(text, render(text, root))


def _differ(text: str, rendered: str) -> list[str]:
    new = {m["name"]: m["body"] for m in BLOCK.finditer(rendered)}
    return [m["name"] for m in BLOCK.finditer(text) if new[m["name"]] != m["body"]]


def check(root: Path = REPO_ROOT, files_root: Path | None = None) -> dict[str, list[str]]:
    """{file: its stale blocks} for each of FILES (read under files_root, default root) whose blocks
    differ from what the CSVs and JSON under root give; empty when everything matches."""
    out = {}
    for name in FILES:
        if bad := stale((files_root or root).joinpath(name).read_text(), root):
            out[name] = bad
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.report", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check: exit 1 if a block is stale")
    ap.add_argument("--root", type=Path, default=REPO_ROOT, help="the repository (its FILES and figures)")
    a = ap.parse_args(argv)
    bad = 0
    try:
        rendered = {name: render((a.root / name).read_text(), a.root) for name in FILES}
    except (ReportError, FileNotFoundError) as e:
        print(f"make report: {e}", file=sys.stderr)
        return 2
    for name in FILES:
        path = a.root / name
        text = path.read_text()
        if a.check:
            if stale_blocks := _differ(text, rendered[name]):
                print(f"{name}: stale block(s) {', '.join(stale_blocks)}: run make report", file=sys.stderr)
                bad = 1
            continue
        with data.atomic_path(path) as tmp:
            tmp.write_text(rendered[name])
        print(f"{name}: {len(BLOCK.findall(text))} blocks regenerated")
    if a.check and not bad:
        print(f"{', '.join(FILES)}: every block matches the committed files")
    return bad


if __name__ == "__main__":
    sys.exit(main())
