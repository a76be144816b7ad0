"""The verdicts of README's `claims` block (bildlib.analysis.claims): the rule, the parts a claim is
made of, and the paper's side of each row, read from data/paper/reported.csv.

One rule, applied as RULE states it (the legend under the table is RULE itself): a part compares the
paper's method with the paper's comparator, each picked on its 95 % interval (a configuration
qualifies when the lower end of its paired interval of the score difference to vanilla clears the
bar), and it *holds* only when the 95 % intervals clear the bar on speed and on quality. A measured
value that clears the bar while its interval does not, a missing pick (no configuration qualifies),
a missing comparator, and a run that records no interval (a mean and std over seeds) all *do not hold
here*, each with its reason. A claim holds when every part holds, holds in part when some do (the
verdict names them), and does not hold here when none does.

One code state: a claim is judged only on a run made at the code state of the last release
(figures/release_times.csv, make release's record). A claim whose run names another is not judged;
it reads *not run at this release*, quotes no other code state, and says what would run it
(at_release).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from bildlib.analysis import REGIMES
from bildlib.analysis.tables import ReportError, md_table, read_csv, read_json, valid

PAPER = "data/paper/reported.csv"
HARDWARE = {"neurips2023": "T4", "arxiv2302.07863v1": "Titan Xp"}  # data/paper/README.md; batch 1
NO_LOSS = dict(REGIMES)["no loss"]  # the project's "no loss": within this many points of vanilla
RULE = (
    "Rule: a part holds only when its 95 % intervals clear the bar, on quality and on speed. A pick "
    "qualifies when the lower end of its paired bootstrap interval of the score difference to vanilla "
    "clears the bar; one speed is above another when its interval lies wholly above the other's. The "
    "measured value alone never holds. A part does not hold here, with its reason, when its method has "
    "no qualifying pick, when its comparison has nothing to compare, or when its run records no "
    "interval; where only the comparator has no pick, the method holds if its speed interval lies above "
    "1×. Unaligned and aligned BiLD are judged apart. A claim holds when every part holds, holds in part "
    "when some do (named), and does not hold here when none does."
)  # fmt: skip
VERDICTS = ("holds", "holds in part", "does not hold here", "not run at this release")
NO_INTERVAL = "no 95 % interval recorded (the run keeps a mean and std over seeds)"


@dataclass(frozen=True)
class Part:
    what: str  # the part, with this project's numbers
    point: bool  # the measured values clear the bar
    interval: bool  # the 95 % intervals clear it
    name: str = ""  # a short name, for the claim's verdict ("holds in part: unaligned")
    why: str = ""  # the reason it does not hold where neither bar says it (no pick, no interval)

    @property
    def holds(self) -> bool:
        return self.point and self.interval

    @property
    def verdict(self) -> str:
        return VERDICTS[0] if self.holds else VERDICTS[2]

    @property
    def reason(self) -> str:
        """Why the part does not hold ("" where it holds)."""
        if self.holds:
            return ""
        if self.why:
            return self.why
        return ("the measured value clears the bar, its 95 % interval does not" if self.point
                else "the measured value misses the bar")  # fmt: skip


def verdict(parts: list[Part]) -> str:
    held = [p.holds for p in parts]
    return VERDICTS[0] if all(held) else VERDICTS[1] if any(held) else VERDICTS[2]


def missing(name: str, what: str) -> Part:
    """A part with nothing to judge: no configuration qualifies, or no comparator does."""
    return Part(what, False, False, name, what)


def _x(r, col: str = "speedup") -> str:
    return f"{r[col]:.2f}× [{r[col + '_lo']:.2f}, {r[col + '_hi']:.2f}]"


def _d(r) -> str:
    return f"Δ {r['delta']:+.2f} [{r['delta_lo']:+.2f}, {r['delta_hi']:+.2f}]"


def faster(a, b, name_a: str, name_b: str, name: str = "") -> Part:
    """a runs faster than b: measured, and a's interval entirely above b's."""
    return Part(f"{name_a} {_x(a)} against {name_b} {_x(b)}", a["speedup"] > b["speedup"],
                a["speedup_lo"] > b["speedup_hi"], name or name_a)  # fmt: skip


def reaches(a, name_a: str, other, name_other: str, name: str) -> Part:
    """a against other, both picked at the same bar. Without a pick of its own a does not hold; where
    only other has none, a reaches a quality other cannot, and holds when its own speed interval is
    above vanilla's 1x."""
    if a is None:
        return missing(name, f"{name_a}: no configuration qualifies")
    if other is None:
        return Part(f"{name_a} {_x(a)}, where {name_other} has no configuration within the bar",
                    a["speedup"] > 1, a["speedup_lo"] > 1, name)  # fmt: skip
    return faster(a, other, name_a, name_other, name)


def pick(t: pd.DataFrame, rows: pd.Series, within: float):
    """The fastest of t[rows] whose 95 % interval of the score difference to vanilla clears -within
    (None: none qualifies)."""
    ok = t[rows & (t["delta_lo"] >= -within)]
    return None if ok.empty else ok.loc[ok["speedup"].idxmax()]


def label(r) -> str:
    return "" if r is None else f"({r['label']})"


def _row(t: pd.DataFrame, **match):
    """The one row of t with these values; None where it is empty (no configuration qualified)."""
    m = pd.Series(True, index=t.index)
    for k, v in match.items():
        m &= t[k] == v
    if m.sum() != 1:
        raise ReportError(f"{t.attrs['path']}: {m.sum()} rows with {match}, where the claims read one")
    r = t[m].iloc[0]
    return None if pd.isna(r["speedup"]) else r


# --- this project's side: the committed runs


def _run(root: Path, checks: str) -> str:
    """Where a claim's run ran: machine, sample, dtype, engine and the code state it ran from."""
    c = read_json(root, checks)
    where = ", ".join(str(c[k]) for k in ("dtype", "engine") if c.get(k))
    return f"{c['device']}, n = {c['n']}, {where}, code `{c.get('code', 'unrecorded')}`"


def _vanilla(t: pd.DataFrame, col: str = "model"):
    r = t[t[col] == "Vanilla (large)"]
    return r.iloc[0]


def _table1(root: Path, where: dict) -> tuple[pd.DataFrame, object]:
    t = read_csv(root, f"{where['fig4']}/table1.csv")
    t = t[t["rule"] == "interval"]
    t.attrs["path"] = f"{where['fig4']}/table1.csv"
    return t, _vanilla(t)


def _same(a, b) -> bool:
    """Two Table 1 picks of the same configuration."""
    key = ["fallback", "rollback", "verify_end"]
    return all(a[k] == b[k] or pd.isna(a[k]) and pd.isna(b[k]) for k in key)


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
    absent: str = ""  # why its run is not the release's and what would make it (at_release); "": it is

    @property
    def verdict(self) -> str:
        return VERDICTS[3] if self.absent else verdict(self.parts)

    @property
    def shown(self) -> str:
        """The verdict as the table prints it: "holds in part" names the parts that hold."""
        v = self.verdict
        if v == VERDICTS[1]:
            v += " (" + ", ".join(p.name for p in self.parts if p.holds) + ")"
        return v


def _why(q: Part) -> str:
    return f": {q.reason}" if q.reason not in ("", q.what) else ""  # a missing pick says it once


def table(made: list[Claim]) -> str:
    """The claims as a Markdown table: claim, the paper's evidence, this run's, verdict, file."""
    rows = []
    for c in made:
        here = "; ".join(f"{q.name}: {q.what} ({q.verdict}{_why(q)})" for q in c.parts)
        here = c.absent or f"{here}. *{c.run}*"
        rows.append([c.claim, c.paper, here, f"**{c.shown}**", f"`{c.source}`"])
    head = ["the paper's claim", "the paper's evidence", "here [95 %]", "verdict", "from"]
    return md_table(head, rows)


# --- one code state: a claim is judged only on a run of the release's ---------------------------

RELEASE = "figures/release_times.csv"  # make release's record (bildlib.reports.release): its last code
STATE = re.compile(r"code `([^`]+)`")  # as _run names a run's code state
UNSHIPPED = {  # a run whose models are not shipped: the make targets that train them, then run it
    "fig7.csv": ("models-ee", "figures-ee", ("multi30k-ee", "multi30k-calm")),
    "table2_lm.csv": ("models-lm", "figures-lm", ("multi30k-lm-large", "multi30k-lm-small")),
}
NOT_RUN = (
    "A claim whose run is from another code state than the release's is not judged: it reads not run "
    "at this release, with what would run it."
)


def release_code(root: Path) -> str | None:
    """The code state of the last release (the last row of figures/release_times.csv); None: none."""
    if not (root / RELEASE).is_file():
        return None
    t = read_csv(root, RELEASE)
    return str(t["code"].iloc[-1]) if len(t) else None


def at_release(root: Path, made: list[Claim]) -> list[Claim]:
    """Each claim as the release can state it: one whose run names another code state than the
    release's (or none) is not judged on it, and says what would run it."""
    code = release_code(root)
    out = []
    for c in made:
        m = STATE.search(c.run)
        out.append(c if code is None or (m and m[1] == code) else replace(c, absent=_rerun(root, c, code)))
    return out


def _rerun(root: Path, c: Claim, code: str) -> str:
    first = c.source.split(",")[0].strip()
    head = f"not run at this release (code `{code}`)"
    if (u := UNSHIPPED.get(Path(first).name)) is None:
        return f"{head}: `make release` reruns {c.source}"
    models, figures, names = u
    train = [read_json(root, f"data/checkpoints/cards/{n}.json")["train"] for n in names]
    minutes = sum(t["wall_s"] for t in train) / 60
    return (f"{head}: the models it reads, {' and '.join(names)}, are not shipped (the tracked tree's "
            f"budget); `make {models}` trains them ({minutes:.0f} min in all on "
            f"{train[0]['machine']['threads']} CPU threads, by their cards in data/checkpoints/cards/), "
            f"then `make {figures}` runs it; {c.source} holds an earlier run's numbers")
