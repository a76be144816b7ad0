"""Committed results read back and shown: CSV and JSON files checked for every value a table shows
(a ReportError names the file, the field and the row), and Markdown tables and run lines built
from them. README's blocks (bildlib.reports), the benchmarks' blocks and the notebooks share it."""

from __future__ import annotations

import contextlib
import csv
import io
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


# The columns that name one row of a run's table, by the file's name: no two rows share them
KEYS = {
    "table1.csv": ("rule", "model", "regime"), "fig4_table1.csv": ("rule", "model", "regime"),
    "fig2.csv": ("label", "repeat"), "fig4.csv": ("label", "repeat"),
    "table2_lm_points.csv": ("label", "repeat"),
    "peers.csv": ("decoder", "label"), "ct2.csv": ("decoder", "label"), "peers_all.csv": ("label", "ran_on"),
    "table3.csv": ("method", "label"), "table4.csv": ("method", "label"), "table5.csv": ("row", "config"),
    "table2_lm.csv": ("row", "fallback"), "pet.csv": ("label",), "quantized.csv": ("label",),
    "int8_products.csv": ("matrix", "rows"), "small_models.csv": ("candidate", "max_small_steps"),
    "small_models_limits.csv": ("candidate", "max_small_steps"), "small_models_profile.csv": ("label",),
    "throughput.csv": ("batch", "decoder", "batched"), "fig5_best.csv": ("variant", "pick"),
    "fig7_best.csv": ("curve", "within"), "calls-native-bfloat16.csv": ("model", "engine", "dtype"),
}  # fmt: skip


def read_csv(root: Path, path: str) -> pd.DataFrame:
    """A committed CSV, whole: its last line ended, every row as many fields as the header, no row
    twice and no two rows with the same KEYS; a ReportError names the file, the row and the column."""
    f = root / path
    if not f.is_file():
        raise FileNotFoundError(f"{path}: the report needs it; its notebook writes it (make figures)")
    raw = whole(f, path)
    try:
        t = pd.read_csv(io.BytesIO(raw))  # the bytes whole() checked: the file is read once
    except pd.errors.EmptyDataError:
        raise ReportError(f"{path} is empty (no header, no rows); rerun the command that writes it") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:  # the parser's message names the line
        raise ReportError(f"{path} is not a CSV the report can read: {' '.join(str(e).split())}") from None
    t.attrs["path"] = path
    unique(t, path)
    if READ is not None:
        READ.append(path)
    return t


def whole(f: Path, path: str) -> bytes:
    """f's bytes, once it is not a CSV cut short (its last line unended, a row with fewer fields than
    the header): a ReportError that says truncated, before a field read from the cut row is blamed
    on something else."""
    raw = f.read_bytes()
    if raw and not raw.endswith(b"\n"):
        raise ReportError(f"{path} is truncated: its last line does not end (a write cut short?); rerun the "
                          "command that writes it")  # fmt: skip
    with contextlib.suppress(UnicodeDecodeError, csv.Error):
        rows = list(csv.reader(io.StringIO(raw.decode("utf-8"))))
        width = len(rows[0]) if rows else 0
        for i, r in enumerate(rows[1:]):
            if r and len(r) != width:
                cut = " (truncated or damaged)" if len(r) < width else ""
                raise ReportError(f"{path}: row {i} has {len(r)} fields, its header {width}{cut}; rerun the "
                                  "command that writes it")  # fmt: skip
    return raw


def unique(t: pd.DataFrame, path: str) -> None:
    """No row twice, and no two rows with the same key columns (KEYS, by the file's name)."""
    if (twice := t.duplicated(keep=False)).any():
        i, j = list(t.index[twice])[:2]
        raise ReportError(f"{path}: rows {i} and {j} are the same row twice (a run appended twice?); "
                          "rerun the command that writes it")  # fmt: skip
    key = list(KEYS.get(Path(path).name, ()))
    if key and set(key) <= set(t.columns) and (same := t.duplicated(subset=key, keep=False)).any():
        i, j = list(t.index[same])[:2]
        raise ReportError(f"{path}: rows {i} and {j} have the same {', '.join(key)}: one run has one row for "
                          "each; rerun the command that writes it")  # fmt: skip


def read_json(root: Path, path: str) -> dict:
    f = root / path
    if not f.is_file():
        raise FileNotFoundError(f"{path}: the report needs it; its notebook writes it (make figures)")
    try:
        doc = json.loads(f.read_text())
    except json.JSONDecodeError as e:
        raise ReportError(f"{path}: not JSON at line {e.lineno}, column {e.colno} ({e.msg}); rerun the "
                          "command that writes it") from None  # fmt: skip
    except (UnicodeDecodeError, RecursionError) as e:
        raise ReportError(f"{path}: not JSON ({type(e).__name__}); rerun what writes it") from None
    if not isinstance(doc, dict):
        raise ReportError(f"{path} holds a JSON {type(doc).__name__}, where the report reads an object")
    if READ is not None:
        READ.append(path)
    finite(doc, path, "")
    if path.endswith("checks.json"):
        typed(doc, path)
    return Fields(path, doc)


# A run's checks file (<notebook>_checks.json, tutorial_checks.json): the type of each field it may hold
CHECKS = {"n": int, "passed": int, "exercises": int, "threads": int, "configurations": int,
          "busy configurations": int, "baseline repeats": int, "baseline ms": float,
          "baseline spread %": float, "dtype": str, "engine": str, "device": str, "baseline": str,
          "solutions": bool, "row_invariant": bool}  # fmt: skip
_KIND = {int: "a whole number", float: "a number", str: "text", bool: "true or false"}


def typed(doc: dict, path: str) -> None:
    """Each field of CHECKS in a checks file has its type (a bool is not a number, "five" not an int)."""
    for k, want in CHECKS.items():
        if k not in doc or doc[k] is None and k == "row_invariant":
            continue
        v = doc[k]
        ok = isinstance(v, int | float) and not isinstance(v, bool) if want is float else (
            type(v) is want)  # fmt: skip
        if not ok:
            raise ReportError(f"{path}: field {k!r} is {v!r}, where it holds {_KIND[want]}; rerun the "
                              "command that writes it")  # fmt: skip


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


def valid(t: pd.DataFrame, cols: list[str], rows: pd.Series | None = None,
          intervals: tuple = ()) -> pd.DataFrame:  # fmt: skip
    """Check that every value of cols (in rows, a mask over t; default all) is present and, where
    numeric, finite; that a column shown with its interval (intervals, or any col with a col_lo
    and col_hi beside it) has both bounds and lies inside them. A ReportError names the file
    (t.attrs["path"]), the column and the row."""
    path = t.attrs.get("path", "a table")
    mask = pd.Series(True, index=t.index) if rows is None else rows.reindex(t.index, fill_value=False)
    for c in [*cols, *(f"{c}_{e}" for c in intervals for e in ("lo", "hi"))]:
        if c not in t.columns:
            raise ReportError(f"{path}: column {c!r} is missing; rerun the command that writes it")
        v = t.loc[mask, c]
        text = not pd.api.types.is_numeric_dtype(v) and not pd.api.types.is_bool_dtype(v)  # object or str
        if text and (as_num := pd.to_numeric(v, errors="coerce")).notna().any():
            if (odd := as_num.isna() & v.notna()).any():  # numbers, and one that is not: a typo or a cut
                i = odd[odd].index[0]
                raise ReportError(f"{path}: column {c!r} is {t.at[i, c]!r} in row {i}, where the other rows "
                                  "hold numbers; rerun the command that writes the file")  # fmt: skip
        bad = v.isna()
        if pd.api.types.is_numeric_dtype(v) and not pd.api.types.is_bool_dtype(v):
            bad |= ~np.isfinite(v.astype(float))
        if bad.any():
            i = bad[bad].index[0]
            who = next((f" ({t.at[i, k]})" for k in ("label", "model", "decoder", "row", "variant")
                        if k in t.columns and isinstance(t.at[i, k], str)), "")  # fmt: skip
            raise ReportError(f"{path}: column {c!r} is {t.at[i, c]} in row {i}{who}, where the report "
                              "shows a number; rerun the command that writes the file")  # fmt: skip
    for c in cols:
        _inside(t, c, mask, path)
    return t


def _inside(t: pd.DataFrame, c: str, mask: pd.Series, path: str) -> None:
    """Column c lies inside [c_lo, c_hi] wherever all three are numbers; one bound alone is an error."""
    lo, hi = f"{c}_lo", f"{c}_hi"
    if (lo in t.columns) != (hi in t.columns):
        have, lack = (lo, hi) if lo in t.columns else (hi, lo)
        raise ReportError(f"{path}: column {have!r} is there but {lack!r} is missing: the interval of {c!r} "
                          "cannot be shown; rerun the command that writes it")  # fmt: skip
    if lo not in t.columns:
        return
    v, a, b = (pd.to_numeric(t.loc[mask, x], errors="coerce") for x in (c, lo, hi))
    tol = 1e-9 * v.abs().fillna(0)
    out = v.notna() & a.notna() & b.notna() & ((v < a - tol) | (v > b + tol))
    if out.any():
        i = out[out].index[0]
        raise ReportError(f"{path}: row {i}: column {c!r} is {v[i]:g}, outside its own interval "
                          f"[{a[i]:g}, {b[i]:g}] ({lo}, {hi}); rerun the command that writes the file")


def agree(t: pd.DataFrame, checks: dict, min_n: int | None = None) -> None:
    """A table and the checks file of its run describe one run: its rows' n and dtype (where the
    table has the columns) are the checks'. And the run is one a report shows: no configuration
    timed on a busy machine, and at least min_n examples (the make target's default). A
    ReportError names both files."""
    path, cpath = t.attrs.get("path", "a table"), getattr(checks, "path", "its checks file")
    busy = checks.get("busy configurations")
    if busy:
        raise ReportError(f"{cpath}: {busy} of {checks.get('configurations')} configurations were timed on a "
                          "busy machine; rerun it on an idle one (make figures)")  # fmt: skip
    if min_n is not None and checks.get("n", min_n) < min_n:
        raise ReportError(f"{cpath}: n = {checks['n']}, fewer than the {min_n} examples its make target "
                          "runs; a trial run is not a published result")  # fmt: skip
    for col in ("n", "dtype"):
        if col in t.columns and col in checks:
            got = set(t[col].dropna().astype(str)) - {str(checks[col])}
            if got:
                raise ReportError(f"{path}: column {col!r} holds {sorted(got)[0]}, its checks file {cpath} "
                                  f"says {checks[col]}: they are not from one run")  # fmt: skip


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
    """"; products ... (row-invariant here); whole call ..." from a checks file that records them
    (runs made before the engine probed its products record none: ""; runs made before it checked
    its whole decoder call (models.wholecall) record no `whole_call`)."""
    if "products" not in checks:
        return ""
    inv = {True: "row-invariant here", False: "NOT row-invariant here: lossless is not exact"}
    state = inv.get(checks.get("row_invariant"), "none probed")
    calls = checks.get("whole_call")
    if calls:  # the models' folders left out: "multi30k-large bfloat16 2 threads passed"
        calls = "; whole decoder call " + "; ".join(c.strip().rsplit("/", 1)[-1] for c in calls.split(";"))
    return f"; products {checks['products']} ({state}, {checks.get('isa', '')}){calls or ''}"


def regimes(t: pd.DataFrame, rule: str = "interval") -> str:
    """Table 1 as README shows it (Markdown), from fig4's table (table1.csv's rows), under one rule."""
    vanilla = t["regime"].isna() | (t["regime"] == "")  # "" in analysis.summary_table, NaN read back from CSV
    empty = ~vanilla & t[["score", "speedup", "fallback", "rollback"]].isna().all(axis=1)  # none qualifies
    valid(t, ["model", "rule", "score", "speedup"], ~empty, intervals=("score", "speedup"))
    valid(t, ["delta", "fallback", "rollback", "verify_end"], ~empty & ~vanilla, intervals=("delta",))
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
