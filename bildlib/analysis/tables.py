"""Committed results read back and shown: CSV and JSON files checked for every value a table shows
(a ReportError names the file, the field and the row), and Markdown tables and run lines built
from them. README's blocks (bildlib.reports), the benchmarks' blocks and the notebooks share it."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

READ: list[str] | None = None  # a list: every path read_csv and read_json read is appended (tests)
NOT_A_NUMBER = re.compile(r"\b(?:nan|inf|infinity)\b", re.I)


class ReportError(ValueError):
    """A committed file holds a value a block cannot render honestly: a missing field or column,
    NaN or infinity where a number is shown. The message names the file and the field."""


def read_csv(root: Path, path: str) -> pd.DataFrame:
    f = root / path
    if not f.is_file():
        raise FileNotFoundError(f"{path}: the report needs it; its notebook writes it (make figures)")
    t = pd.read_csv(f)
    t.attrs["path"] = path
    if READ is not None:
        READ.append(path)
    return t


def read_json(root: Path, path: str) -> dict:
    f = root / path
    if not f.is_file():
        raise FileNotFoundError(f"{path}: the report needs it; its notebook writes it (make figures)")
    doc = json.loads(f.read_text())
    if READ is not None:
        READ.append(path)
    finite(doc, path, "")
    return Fields(path, doc)


class Fields(dict):
    """A JSON object the report reads: a missing field is a ReportError naming the file."""

    def __init__(self, path: str, doc: dict):
        super().__init__({k: Fields(f"{path}: {k}", v) if isinstance(v, dict) else v for k, v in doc.items()})
        self.path = path

    def __missing__(self, key):
        raise ReportError(f"{self.path}: field {key!r} is missing; rerun the command that writes it")


def finite(x, path: str, where: str) -> None:
    """Every number in a JSON document is finite (json writes NaN and Infinity unquoted)."""
    if isinstance(x, dict):
        for k, v in x.items():
            finite(v, path, f"{where}.{k}" if where else str(k))
    elif isinstance(x, list):
        for i, v in enumerate(x):
            finite(v, path, f"{where}[{i}]")
    elif isinstance(x, float) and not math.isfinite(x):
        raise ReportError(f"{path}: field {where!r} is {x}, not a number the report can show")


def valid(t: pd.DataFrame, cols: list[str], rows: pd.Series | None = None) -> pd.DataFrame:
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


def num(x, fmt: str = ".2f", unit: str = "") -> str:
    return "–" if pd.isna(x) else f"{x:{fmt}}{unit}"


def ci(r, col: str, fmt: str = ".2f", unit: str = "") -> str:
    """ "value [lo, hi]" from a row's col and its col_lo / col_hi (or only the value)."""
    v = num(r.get(col), fmt, unit)
    lo, hi = r.get(f"{col}_lo"), r.get(f"{col}_hi")
    if v == "–" or lo is None or pd.isna(lo):
        return v
    return f"{v} [{lo:{fmt}}, {hi:{fmt}}]"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def run_line(checks: dict) -> str:
    """The line naming what a run was measured with, from a notebook's _checks.json."""
    return (
        f"n = {checks['n']}, {checks['dtype']}, {checks['engine']} engine, {checks['device']} "
        f"({checks.get('threads', 2)} threads); baseline {checks['baseline']} "
        f"{checks['baseline ms']:.1f} ms per sentence, its {checks['baseline repeats']} interleaved repeats "
        f"spread {checks['baseline spread %']:.1f} %; {checks['busy configurations']} of "
        f"{checks['configurations']} configurations timed on a busy machine"
    ) + products_clause(checks)


def products_clause(checks: dict) -> str:
    """"; products ... (row-invariant here)" from a checks file that records them (runs made
    before the engine probed its products record none: "")."""
    if "products" not in checks:
        return ""
    inv = {True: "row-invariant here", False: "NOT row-invariant here: lossless is not exact"}
    state = inv.get(checks.get("row_invariant"), "none probed")
    return f"; products {checks['products']} ({state}, {checks.get('isa', '')})"


def regimes(t: pd.DataFrame, rule: str = "interval") -> str:
    """Table 1 as README shows it (Markdown), from fig4's table (table1.csv's rows), under one rule."""
    vanilla = t["regime"].isna() | (t["regime"] == "")  # "" in analysis.summary_table, NaN read back from CSV
    empty = ~vanilla & t[["score", "speedup", "fallback", "rollback"]].isna().all(axis=1)  # none qualifies
    valid(t, ["model", "rule", "score", "speedup"], ~empty)
    valid(t, ["delta", "fallback", "rollback", "verify_end"], ~empty & ~vanilla)
    rows = []
    for _, r in t[t["rule"] == rule].iterrows():
        fb = "" if pd.isna(r.get("fallback")) else f"{r['fallback']:g}"
        rb = "" if pd.isna(r.get("rollback")) else f"{r['rollback']:g}"
        end = {True: "yes", False: "no"}.get(r.get("verify_end") in (True, "True"), "")
        end = "" if not fb else end
        regime = "" if pd.isna(r["regime"]) else r["regime"]
        rows.append([r["model"], regime, ci(r, "score"), ci(r, "delta", "+.2f"),
                     ci(r, "speedup", ".2f", "×"), fb, rb, end])  # fmt: skip
    head = ["", "regime", "BLEU [95 %]", "Δ BLEU vs vanilla [95 %, paired]", "speedup [95 %]", "α_FB", "α_RB",
            "verify_end"]  # fmt: skip
    return md_table(head, rows)
