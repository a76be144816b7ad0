"""make reproduce's report (bildlib.experiments.paper.reproduce): report.md and a self-contained
report.html under its root, per preset and table the paper's rows (data/paper/reported.csv) beside
this run's, read from the notebooks' own CSV and JSON. A paper row whose notebook did not finish is
listed as missing, with the notebook's error; nothing is typed."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT, data
from bildlib.analysis import claims, numbers, reported, verdicts
from bildlib.analysis.tables import ReportError
from bildlib.experiments import presets

# notebook -> the paper tables it makes beside the paper's (file stem, table)
TABLES = {  # the figures' notebooks (Figs. 2, 5, 8) make no table of the paper's: their figures show
    "fig4": [("table1_paper", "Table 1")],
    "fig2": [],
    "fig5": [],
    "fig8": [],
    "table3": [("table3_paper", "Table 3"), ("table4_paper", "Table 4")],
    "table5": [("table5_paper", "Table 5")],
    "table2_lm": [("table2_paper", "Table 2")],
}
NOTEBOOK_OF = {table: nb for nb, tables in TABLES.items() for _, table in tables}


def _checks(out: Path, nb: str) -> dict:
    """The notebook's checks file: the run's n, device, engine, dtype, code state and machine."""
    f = out / f"{nb}_checks.json"
    return json.loads(f.read_text()) if f.is_file() else {}


def _run_line(out: Path, nb: str) -> str:
    c = _checks(out, nb)
    keys = ("n", "device", "engine", "dtype", "code")
    return ", ".join(f"{k} {c[k]}" for k in keys if k in c)


def _missing(preset: str, table: str, why: str) -> str:
    rows = reported.rows(preset, table)
    names = [
        f"{r['row']} ({r['regime']})" if isinstance(r["regime"], str) else r["row"]
        for _, r in rows.iterrows()
    ]
    return f"{table}: missing ({why}); the paper's rows: " + ", ".join(names) + "."


# the paper's claims a run of make reproduce can decide: those resting on Tables 1, 3 and 5 and Figs. 2
# and 5 (Fig. 2's share against the paper's "approximately 20 %", numbers.said: the repository's text.csv)
CLAIMS = (claims.no_loss, claims.within_one, claims.alignment, claims.ablations, claims.speculative,
          claims.nucleus, numbers.agreement)  # fmt: skip


def claims_section(root: Path, preset: str) -> list[str]:
    """The paper's claims decided on this preset's run, by README's rule (analysis.verdicts.RULE),
    beside the paper's numbers for the same dataset and model."""
    dataset, model = reported.PRESETS[preset]
    p = verdicts.paper_rows(REPO_ROOT)
    p = p[(p["dataset"] == dataset) & (p["model"] == model)]
    where = {nb: f"{preset}/{nb}" for nb in ("fig4", "fig5", "table3", "table5", "fig2")}
    made, not_here = [], []
    for f in CLAIMS:
        try:
            made.append(f(root, p, where))
        except (
            FileNotFoundError,
            ReportError,
        ) as e:  # a notebook that did not finish, a table the paper lacks
            not_here.append(f"- {f.__name__.replace('_', ' ')}: not decided here ({e})")
    lines = ["### The paper's claims on this run", ""]
    if made:
        lines += [verdicts.table(made), "", verdicts.RULE, ""]
    return lines + not_here + ([""] if not_here else [])


def preset_section(root: Path, preset: str, runs: pd.DataFrame) -> list[str]:
    p = presets.get(preset)
    lines = [f"## {preset}", "", f"{p.dataset}; small {p.small}, aligned {p.aligned}, large {p.large}.", ""]
    for nb in TABLES:
        r = runs[(runs["preset"] == preset) & (runs["notebook"] == nb)]
        if r.empty:
            continue
        out, err = root / preset / nb, r.iloc[0]["error"]
        lines += [
            f"### {nb}",
            "",
            f"*{_run_line(out, nb) or 'no checks file'}; {r.iloc[0]['seconds']} s.*",
            "",
        ]
        for stem, table in TABLES[nb]:
            f = out / f"{stem}.csv"
            if err or not f.is_file():
                lines += [_missing(preset, table, err or f"{f.name} not written"), ""]
                continue
            side = reported.read(f)
            md = reported.markdown(side) if table == "Table 1" else reported.beside_markdown(side)
            lines += [f"**{table}**, the paper's rows beside this run's:", "", md, ""]
        for png in sorted(out.glob("*.png")):
            lines += [f"![{png.stem}]({png.relative_to(root)})", ""]
    return lines + (claims_section(root, preset) if preset in claims_presets() else [])


def claims_presets() -> list[str]:
    return [p for p in reported.PRESETS if p not in presets.DECODER_ONLY]


def _each(root: Path, names: list[str], runs: pd.DataFrame, key: str) -> str:
    """The values the runs' checks files give for key, each once ("unknown" where none does)."""
    seen = [_checks(root / r.preset / r.notebook, r.notebook).get(key) for r in runs.itertuples()
            if r.preset in names]  # fmt: skip
    return ", ".join(dict.fromkeys(str(v) for v in seen if v)) or "unknown"


def write_report(root: Path, names: list[str], runs: pd.DataFrame, dry: bool = False) -> tuple[Path, Path]:
    head = [
        "# BiLD reproduced: the paper beside this run",
        "",
        "Kim et al., *Speculative Decoding with Big Little Decoder*, NeurIPS 2023 (Tables 1, 3-5), and arXiv "
        "2302.07863v1 (Table 2); the paper's numbers from `data/paper/reported.csv`. "
        f"Code state {_each(root, names, runs, 'code')}; machine {_each(root, names, runs, 'machine')}.",
        "",
    ]
    if dry:
        head += ["**Dry run**: random models of the checkpoints' shapes on stand-in data; the numbers mean "
                 "nothing, the path is the one a real run takes.", ""]  # fmt: skip
    bad = runs[runs["error"] != ""]
    head += [f"{len(runs) - len(bad)} of {len(runs)} notebooks finished." + (
        " Not finished: " + "; ".join(f"{r.preset} / {r.notebook}: {r.error[:200]}" for r in bad.itertuples())
        if len(bad) else ""), ""]  # fmt: skip
    body = [line for name in names for line in preset_section(root, name, runs)]
    text = "\n".join(head + body) + "\n"
    md = root / "report.md"
    with data.atomic_path(md) as tmp:
        Path(tmp).write_text(text)
    html = root / "report.html"
    with data.atomic_path(html) as tmp:
        Path(tmp).write_text(to_html(text, root))
    return md, html


def to_html(text: str, root: Path) -> str:
    """The Markdown as one HTML page, each figure inline (a data URI): it opens anywhere, alone."""
    import re

    import mistune

    def inline(m):
        png = root / m["path"]
        uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
        return f"![{m['alt']}]({uri})"

    body = mistune.html(re.sub(r"!\[(?P<alt>[^\]]*)\]\((?P<path>[^)]+\.png)\)", inline, text))
    style = ("body{font-family:sans-serif;max-width:75em;margin:2em auto;padding:0 1em}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:.2em .5em}"
             "img{max-width:100%}")  # fmt: skip
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>BiLD reproduced</title>'
            f"<style>{style}</style></head><body>\n{body}</body></html>\n")  # fmt: skip
