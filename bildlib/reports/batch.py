"""docs/batching.md's and README's batch > 1 blocks, from the committed `make bench-batch` run
(figures/batch: throughput.csv and .json, exact.json; bildlib.bench.batchbench writes them)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT
from bildlib.bench.batchbench import OUT

SHOWN = ["vanilla large", "BiLD lossless", "BiLD best", "speculative"]
VAL_SENTENCES = 1014  # Multi30k val (data.multi30k)


def _sentences(n: int) -> str:
    """How many val sentences a run used, as counted from its file."""
    if n == VAL_SENTENCES:
        return f"all {n:,} val sentences"
    return f"the first {n:,} of {VAL_SENTENCES:,} val sentences"


def _throughput(root: Path) -> pd.DataFrame:
    """throughput.csv, checked to hold every value the blocks show: each batch size with every
    decoder of the table, batch 1 among them (the verdict compares with it)."""
    from bildlib.analysis.tables import ReportError, read_csv, valid

    t = read_csv(root, f"{OUT}/throughput.csv")
    valid(t, ["batch", "decoder", "batched", "sentences_per_s"])
    valid(t, ["speedup", "speedup_lo", "speedup_hi"], t["decoder"].isin(SHOWN[1:]))
    want = [*SHOWN, "BiLD best, per sentence"]
    for B, g in t.groupby("batch"):
        if missing := [d for d in want if d not in set(g["decoder"])]:
            raise ReportError(f"{OUT}/throughput.csv: batch {B} has no row for {', '.join(missing)}; "
                              "rerun make bench-batch")  # fmt: skip
    if 1 not in set(t["batch"]):
        raise ReportError(f"{OUT}/throughput.csv: no batch 1 (the blocks compare with it); "
                          "rerun make bench-batch")  # fmt: skip
    return t


def _run_line(j: dict) -> str:
    m = j["machine"]["device"]
    return f"n = {_sentences(j['n'])}, {j['dtype']}, {m} ({j['threads']} threads): `{j['command']}`"


def _fmt(r: pd.Series) -> str:
    return f"{r['sentences_per_s']:.1f} ({r['speedup']:.2f}× [{r['speedup_lo']:.2f}, {r['speedup_hi']:.2f}])"


def block(root: Path = REPO_ROOT) -> str:
    """README: sentences per second per batch size, each with its speedup over batched vanilla
    large at the same batch size [95 %], and what the table says."""
    from bildlib.analysis.tables import md_table, read_json

    t, j = _throughput(root), read_json(root, f"{OUT}/throughput.json")
    rows = []
    for B, g in t.groupby("batch"):
        g = g.set_index("decoder")
        rows.append([str(B)] + [f"{g.loc['vanilla large', 'sentences_per_s']:.1f}"]
                    + [_fmt(g.loc[k]) for k in SHOWN[1:]]
                    + [f"{g.loc['BiLD best, per sentence', 'sentences_per_s']:.1f}"])  # fmt: skip
    best = t[t["decoder"] == "BiLD best"].set_index("batch")
    wins = [int(B) for B, r in best.iterrows() if B > 1 and r["speedup_lo"] > 1]
    van = t[t["decoder"] == "vanilla large"].set_index("batch")["sentences_per_s"]
    s = j["settings"]
    text = (f"*{_run_line(j)}.* Sentences per second, and in brackets the speedup over batched vanilla "
            f"large at the same batch size [95 %, bootstrap over chunks]. "
            f"Lossless: `{_kw(s['lossless'])}`; "
            f"best within 0.5 BLEU: `{_kw(s['best'])}` (from the float32 `make bench` run).")  # fmt: skip
    verdict = (f"Batched BiLD (best) beats batched vanilla large, its interval above 1, at batch "
               f"{', '.join(map(str, wins))}" if wins else
               "Batched BiLD (best) never beats batched vanilla large, its interval above 1")  # fmt: skip
    verdict += (f"; its speedup falls from {best.loc[1, 'speedup']:.2f}× at batch 1 to "
                f"{best['speedup'].iloc[-1]:.2f}× at batch {best.index[-1]}. ")  # fmt: skip
    top, last = int(van.idxmax()), int(van.index[-1])
    if top == last and len(van) > 1:
        verdict += (f"Vanilla large's throughput still grows at batch {last}, the largest measured "
                    f"({van.iloc[-2]:.1f} → {van.iloc[-1]:.1f} sentences/s from batch "
                    f"{int(van.index[-2])}).")  # fmt: skip
    else:
        verdict += f"Vanilla large's throughput peaks at batch {top} ({van.max():.1f} sentences/s)."
    one = t[t["decoder"] == "BiLD best, per sentence"]["sentences_per_s"]
    if under := [int(B) for B, r in best.iterrows() if r["sentences_per_s"] < one.min()]:
        verdict += (f" BiLD best one sentence at a time (the lean engine) gives {one.min():.1f} to "
                    f"{one.max():.1f} sentences/s (timed beside each batch size), more than batched BiLD "
                    f"best at batch {', '.join(map(str, under))}.")  # fmt: skip
    head = ["batch", "vanilla large", "BiLD lossless", "BiLD best", "speculative (greedy, 4)",
            "BiLD best, one at a time"]  # fmt: skip
    return "\n".join([text + " " + verdict, "", md_table(head, rows)])


def detail_block(root: Path = REPO_ROOT) -> str:
    """docs/batching.md: the per-call breakdown of every batched decoder at every batch size."""
    from bildlib.analysis.tables import md_table

    t = _throughput(root)
    t = t[t["batched"]].copy()
    v = t["decoder"] == "vanilla large"  # its one model's calls count as small in its Trace, as at batch 1
    swap = [("small_calls_per_sentence", "large_calls_per_sentence"),
            ("small_ms_per_call", "large_ms_per_call"), ("rows_per_small_call", "rows_per_large_call")]
    for sm, lg in swap:
        t.loc[v, lg], t.loc[v, sm] = t.loc[v, sm], float("nan")
    cols = {"small_calls_per_sentence": ".2f", "rows_per_small_call": ".1f", "small_ms_per_call": ".2f",
            "large_calls_per_sentence": ".2f", "rows_per_large_call": ".1f", "large_ms_per_call": ".2f",
            "padded_large_tokens_per_sentence": ".1f", "encode_ms_per_sentence": ".2f",
            "other_ms_per_sentence": ".2f"}  # fmt: skip
    rows = [[r["decoder"], str(r["batch"]), f"{1e3 / r['sentences_per_s']:.2f}"]
            + ["–" if pd.isna(r[c]) else format(r[c], f) for c, f in cols.items()]
            for _, r in t.sort_values(["decoder", "batch"]).iterrows()]  # fmt: skip
    head = ["decoder", "batch", "ms / sentence", "small calls / sent.", "rows / small call",
            "ms / small call", "large calls / sent.", "rows / large call", "ms / large call",
            "attention slots / sent. (rows × longest)",
            "encoders ms / sent.", "other ms / sent."]  # fmt: skip
    return md_table(head, rows)


def exact_block(root: Path = REPO_ROOT) -> str:
    """docs/batching.md: the full-val exactness check."""
    from bildlib.analysis.tables import ReportError, read_json

    j = read_json(root, f"{OUT}/exact.json")
    if not j["cases"]:
        raise ReportError(f"{OUT}/exact.json: no cases; rerun make bench-batch")
    cases = j["cases"].items()
    parts = [f"{name} (`{_kw(c['settings'])}`)" if c["settings"] else name for name, c in cases]
    same = [c["rows"] - len(c["differ"]) for c in j["cases"].values()]
    lines = [f"- {p}: {k} of {c['rows']} rows equal"
             for p, k, c in zip(parts, same, j["cases"].values(), strict=True)]  # fmt: skip
    m = j["machine"]
    n = sorted({c["rows"] for c in j["cases"].values()})
    what = _sentences(n[0]) if len(n) == 1 else f"{', '.join(map(str, n))} val sentences"
    return "\n".join([f"*{what[0].upper() + what[1:]} at batch {j['batch']}, {j['dtype']}, {m['device']} "
                      f"({j['threads']} threads), "
                      f"`{j['command']}`:*", "", *lines])  # fmt: skip


def _kw(kw: dict) -> str:
    return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v!r}" for k, v in kw.items())
