"""The verdicts of README's `claims` block (bildlib.analysis.claims): RULE, the parts a claim is made
of, and the paper's side of each row, read from data/paper/reported.csv.

Each claim is one or more parts; a part compares two rows of a committed table, on the measured
value (the point) and on its 95 % interval. A part *holds* when the interval clears the bar, *holds
in part* when only the point does, and *does not hold here* when the point does not. A claim holds
when every part holds, does not hold here when no part clears its bar even on the point, and holds
in part otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from bildlib.analysis import REGIMES
from bildlib.analysis.tables import ReportError, md_table, read_csv, valid

PAPER = "data/paper/reported.csv"
HARDWARE = {"neurips2023": "T4", "arxiv2302.07863v1": "Titan Xp"}  # data/paper/README.md; batch 1
NO_LOSS = dict(REGIMES)["no loss"]  # the project's "no loss": within this many points of vanilla
RULE = ("holds: the 95 % interval clears the bar; holds in part: only the measured value does; does not "
        "hold here: the measured value misses it. A claim of several parts holds when each part holds, "
        "and does not hold here when none clears its bar even measured.")  # fmt: skip
VERDICTS = ("holds", "holds in part", "does not hold here")


@dataclass(frozen=True)
class Part:
    what: str  # the part, with this project's numbers
    point: bool  # the measured values clear the bar
    interval: bool  # the intervals clear it

    @property
    def verdict(self) -> str:
        return VERDICTS[0] if self.point and self.interval else VERDICTS[1] if self.point else VERDICTS[2]


def verdict(parts: list[Part]) -> str:
    if all(p.verdict == VERDICTS[0] for p in parts):
        return VERDICTS[0]
    return VERDICTS[1] if any(p.point for p in parts) else VERDICTS[2]


def _x(r, col: str = "speedup") -> str:
    return f"{r[col]:.2f}× [{r[col + '_lo']:.2f}, {r[col + '_hi']:.2f}]"


def _d(r) -> str:
    return f"Δ {r['delta']:+.2f} [{r['delta_lo']:+.2f}, {r['delta_hi']:+.2f}]"


def faster(a, b, name_a: str, name_b: str) -> Part:
    """a runs faster than b: measured, and a's interval entirely above b's."""
    return Part(f"{name_a} {_x(a)} against {name_b} {_x(b)}", a["speedup"] > b["speedup"],
                a["speedup_lo"] > b["speedup_hi"])  # fmt: skip


def _row(t: pd.DataFrame, **match):
    """The one row of t with these values; None where it is empty (no configuration qualified)."""
    m = pd.Series(True, index=t.index)
    for k, v in match.items():
        m &= t[k] == v
    if m.sum() != 1:
        raise ReportError(f"{t.attrs['path']}: {m.sum()} rows with {match}, where the claims read one")
    r = t[m].iloc[0]
    return None if pd.isna(r["speedup"]) else r


# --- the paper's side: data/paper/reported.csv --------------------------------------------------


def paper_rows(root: Path) -> pd.DataFrame:
    t = read_csv(root, PAPER)
    valid(t, ["source", "table", "dataset", "model", "row", "metric", "score"])
    valid(t, ["speedup"], ~t["row"].str.startswith("vanilla"))
    return t


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("s" if n != 1 else "")


def _span(xs: pd.Series, fmt: str, unit: str = "") -> str:
    lo, hi = xs.min(), xs.max()
    return f"{lo:{fmt}}{unit}" if lo == hi else f"{lo:{fmt}} to {hi:{fmt}}{unit}"


def paper_says(p: pd.DataFrame, table: str, row: str, regime: str) -> str:
    """ "Table 1, bild-aligned, minimal loss: 1.47–1.85× at Δ −0.10…−0.02 (4 rows, T4)": the
    speedups and score differences to vanilla (the same table, dataset and model) the paper gives."""
    sel = p[(p["table"] == table) & (p["row"] == row) & (p["regime"] == regime)]
    if sel.empty:
        raise ReportError(f"{PAPER}: no {table} row {row!r} in regime {regime!r}")
    van = p[(p["table"] == table) & p["row"].str.startswith("vanilla")].set_index(["dataset", "model"])
    keys = list(zip(sel["dataset"], sel["model"], strict=True))
    delta = sel["score"].values - van.loc[keys, "score"].values
    hw = ", ".join(sorted({HARDWARE[s] for s in sel["source"]}))
    return (f"{table}, {row}, {regime}: {_span(sel['speedup'], '.2f', '×')} at Δ "
            f"{_span(pd.Series(delta), '+.2f')} ({_count(len(sel), 'row')}, {hw})")  # fmt: skip


def paper_vs(p: pd.DataFrame, table: str, a: tuple[str, str], b: tuple[str, str]) -> str:
    """The paper's speedups of (row, regime) a against b in one table, per dataset."""
    sel = p[p["table"] == table].set_index(["dataset", "row", "regime"])["speedup"]
    ds = dict.fromkeys(p.loc[(p["table"] == table) & (p["row"] == a[0]), "dataset"])
    pairs = [f"{sel[(d, *a)]:.2f}× vs {sel[(d, *b)]:.2f}×" for d in ds]
    head = f"{table}, {' '.join(a)} vs {' '.join(b)}: "
    return head + ", ".join(pairs) + f" ({_count(len(pairs), 'dataset')})"


@dataclass(frozen=True)
class Claim:
    claim: str
    paper: str  # the paper's evidence
    parts: list[Part]
    source: str  # the committed file the parts read
    run: str  # where it ran: the checks file's machine and sample

    @property
    def verdict(self) -> str:
        return verdict(self.parts)


def table(made: list[Claim]) -> str:
    """The claims as a Markdown table: claim, the paper's evidence, this run's, verdict, file."""
    rows = []
    for c in made:
        here = "; ".join(f"{q.what} ({q.verdict})" for q in c.parts)
        rows.append([c.claim, c.paper, f"{here}. *{c.run}*", f"**{c.verdict}**", f"`{c.source}`"])
    head = ["the paper's claim", "the paper's evidence", "here [95 %]", "verdict", "from"]
    return md_table(head, rows)
