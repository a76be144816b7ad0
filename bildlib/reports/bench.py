"""README's blocks of the speed benchmarks (docs/results.md): make bench's two peers runs (the
default dtype, the targets, the per-call breakdown) and the peers and CTranslate2 tables, each
from the committed CSV and JSON (the numbers: bildlib.analysis.targets)."""

from __future__ import annotations

from pathlib import Path

from bildlib.analysis.tables import ReportError, ci, md_table, num, read_csv, read_json, run_line, valid
from bildlib.analysis.targets import (
    DTYPE_TOL,
    MARK,
    RUNS,
    breakdown,
    committed_choice,
    goal_text,
    targets,
    why_not,
)

# README blocks (bildlib.reports.readme.BLOCKS)


def dtype_block(root: Path) -> str:
    """Which dtype is the default (analysis.targets.dtype_choice), from make bench's two runs."""
    c, checks = committed_choice(root)
    cb, cf = checks["bfloat16"], checks["float32"]
    rows = [["bfloat16 (`auto`)", f"{c['bf16_score']:.2f}", f"{c['bf16_ms']:.1f}", run_line(cb)],
            ["float32", f"{c['fp32_score']:.2f}", f"{c['fp32_ms']:.1f}", run_line(cf)]]  # fmt: skip
    verdict = "holds: the default is `auto`" if c["auto_is_default"] else "fails: the default stays float32"
    return (md_table(["vanilla large, lean engine", "BLEU", "ms / sentence", "run"], rows) + "\n\n" +
            f"BLEU difference {c['delta']:+.2f} (the rule: within {DTYPE_TOL:g} of float32 and faster) "
            f"— {verdict}.")  # fmt: skip


def _target_rows(t: dict) -> list[list[str]]:
    rows, tol = [], f"{t['tol']:g}"
    if (s := t.get("speedup")) is not None:
        got = f"{s['value']:.2f}× [{s['lo']:.2f}, {s['hi']:.2f}] (Δ {s['delta']:+.2f}; `{s['row']}`)"
        rows.append([f"aligned BiLD within {tol} BLEU", goal_text("speedup"), got, MARK[s["met"]]])
    if (s := t.get("lossless_vs_assisted")) is not None:
        got = f"{s['value']:.2f}× (`{s['row']}` / `{s['against']}`)"
        what = "lossless BiLD / HF assisted (tuned) latency"
        rows.append([what, goal_text("lossless_vs_assisted"), got, MARK[s["met"]]])
    if (s := t.get("end_rule_gain")) is not None:
        got = (f"{s['value']:.2f}× faster (`{s['row']}`, Δ {s['delta']:+.2f}, against `{s['against']}`, "
               f"Δ {s['against_delta']:+.2f})")  # fmt: skip
        what = f"verify_end_below vs verify_end, each within {tol} BLEU"
        rows.append([what, goal_text("end_rule_gain"), got, MARK[s["met"]]])
    if (s := t.get("end_rule_gain_equal_bleu")) is not None:
        got = f"{s['value']:.2f}× faster (against `{s['against']}`, Δ {s['against_delta']:+.2f})"
        rows.append(["… against verify_end at equal or better BLEU", "", got, ""])
    for key, what in (("student_speedup", f"BiLD with the student within {tol} BLEU"),
                      ("student_lossless", "lossless BiLD with the student")):  # fmt: skip
        if (s := t.get(key)) is not None:
            got = f"{s['value']:.2f}× [{s['lo']:.2f}, {s['hi']:.2f}] (Δ {s['delta']:+.2f}; `{s['row']}`)"
            rows.append([what, goal_text(key), got, MARK[s["met"]]])
    return rows


def targets_block(root: Path) -> str:
    """The three speed benchmarks in each dtype, and the per-call breakdown."""
    out = []
    for name, folder in RUNS.items():
        every, c = read_csv(root, f"{folder}/peers_all.csv"), read_json(root, f"{folder}/peers_checks.json")
        table = md_table(["benchmark", "goal", "measured", ""], _target_rows(targets(every)))
        out += [f"**{name}** ({run_line(c)}):", "", table, ""]
        bd = breakdown(every)
        if bd.empty:
            continue
        rows = [[r["rule"], f"{r['delta']:+.2f}", f"{r['ms']:.1f}", f"{r['speedup_same_engine']:.2f}×",
                 num(r["large_calls_per_sentence"]), num(r["small_calls_per_sentence"], ".1f"),
                 num(r["loop_pct"], ".1f")] for _, r in bd.iterrows()]  # fmt: skip
        head = ["end rule", "Δ BLEU", "ms", "speedup", "large calls", "small calls", "loop %"]
        out += [f"Per sentence at α_FB {bd['fallback'].iloc[0]:g}, α_RB {bd['rollback'].iloc[0]:g}:", ""]
        out += [md_table(head, rows), ""]
        if (why := why_not(bd, c["baseline ms"])) is not None:
            out += [why, ""]
    return "\n".join(out)


def summary_block(root: Path) -> str:
    """README's short form of targets_block: the three benchmarks in each dtype."""
    rows = []
    for name, folder in RUNS.items():
        t = targets(read_csv(root, f"{folder}/peers_all.csv"))
        for key, what in (("speedup", "BiLD within 0.5 BLEU, speedup"),
                          ("lossless_vs_assisted", "lossless BiLD / HF assisted, latency"),
                          ("end_rule_gain", "verify_end_below vs verify_end, speed"),
                          ("student_speedup", "BiLD with the student within 0.5 BLEU, speedup"),
                          ("student_lossless", "lossless BiLD with the student, speedup")):  # fmt: skip
            if (s := t.get(key)) is None:
                continue
            got = f"{s['value']:.2f}×" + (f" [{s['lo']:.2f}, {s['hi']:.2f}]" if "lo" in s else "")
            got += f" (`{s['row'].removeprefix('bild-aligned-').removeprefix('bild-')}`)"
            rows.append([name, what, goal_text(key), got, MARK[s["met"]]])
    return md_table(["dtype", "benchmark", "goal", "measured", ""], rows)


def peers(root: Path, folder: str = "figures/peers") -> str:
    """The peers table (peers.ipynb); its run from its _checks.json, where the run wrote one."""
    t = read_csv(root, f"{folder}/peers.csv")
    valid(t, ["decoder", "score", "ms", "speedup_same_engine", "speedup_vs_generate"])
    checks = root / folder / "peers_checks.json"
    run = (f"*{run_line(read_json(root, f'{folder}/peers_checks.json'))}.*\n\n" if checks.is_file() else
           f"*An earlier run, from before the notebooks recorded their checks (`{folder}` has no "
           "peers_checks.json), so its CSV does not name its dtype; make bench reruns it.*\n\n")  # fmt: skip
    named = {"speedup_lo": "speedup_same_engine_lo", "speedup_hi": "speedup_same_engine_hi"}
    shown = t.rename(columns=named)
    shown.attrs["path"] = t.attrs.get("path")
    valid(shown, ["speedup_same_engine"], intervals=("speedup_same_engine",))  # its interval, and inside it
    speed = [ci(r, "speedup_same_engine", ".2f", "×") for _, r in shown.iterrows()]
    rows = [[r["decoder"], f"{r['score']:.2f}", f"{r['ms']:.1f}", sp, f"{r['speedup_vs_generate']:.2f}×",
             num(r["large_calls_per_sentence"]), num(r.get("loop_pct"), ".1f")]
            for sp, (_, r) in zip(speed, t.iterrows(), strict=True)]  # fmt: skip
    head = ["decoder", "BLEU", "ms / sentence", "speedup, same engine [95 %]", "vs `generate`",
            "large calls / sentence", "loop % of call time"]  # fmt: skip
    return run + md_table(head, rows)


def peers_val(root: Path) -> str:
    return peers(root, "figures/peers/val")


def peers_val_fp32(root: Path) -> str:
    return peers(root, "figures/peers/val-float32")


def ct2(root: Path, f: str = "figures/peers/val") -> str:
    """CTranslate2 greedy against bildlib on the same sentences (bildlib.bench.ct2peer): the ct2.csv that
    make bench writes into folder f, with its run from ct2_checks.json (README shows the default
    dtype's run, docs/results.md the float32 one, ct2_fp32)."""
    if not (root / f / "ct2.csv").is_file():
        raise ReportError(f"no ct2.csv in {f}: make bench writes it")
    t, c = read_csv(root, f"{f}/ct2.csv"), read_json(root, f"{f}/ct2_checks.json")
    valid(t, ["decoder", "score", "ms", "vs_ct2", "vs_ct2_lo", "vs_ct2_hi", "speedup"])
    if not t["decoder"].str.startswith("CTranslate2").any():
        raise ReportError(f"{f}/ct2.csv: no CTranslate2 row")
    best = t[t["decoder"].str.contains("≤")].nsmallest(1, "ms")
    peer = t["peer"].iloc[0] if "peer" in t else "CTranslate2 greedy"  # runs before the settings: one peer
    vanilla = t[t["decoder"].str.startswith("vanilla large")]
    lead = f"The peer: **{peer}**, the fastest CTranslate2 setting within 0.5 BLEU of its float32.\n\n" \
        if "peer" in t else ""
    lead += "" if vanilla.empty or "peer" not in t else (
        f"bildlib's vanilla large takes **{ci(vanilla.iloc[0], 'vs_ct2', '.2f', '×')}** its time. ")
    lead += ("" if best.empty else
             f"The fastest BiLD within 0.5 BLEU ({best['label'].iloc[0]}) takes "
             f"**{ci(best.iloc[0], 'vs_ct2', '.2f', '×')}** {peer}'s time.\n\n")  # fmt: skip
    rows = [[r["decoder"], f"{r['score']:.2f}", f"{r['ms']:.1f}", ci(r, "vs_ct2", ".2f", "×"),
             ci(r, "speedup", ".2f", "×")] for _, r in t.iterrows()]  # fmt: skip
    if c.get("left out"):
        lead += (f"Not timed here (their small model is not built on this machine): "
                 f"{', '.join(f'`{x}`' for x in c['left out'])}.\n\n")  # fmt: skip
    return (f"*`{f}`: n = {c['n']} {c['split']} sentences, {t['dtype'].iloc[0]}, {c['processor']} "
            f"({c['cpu']}), {_threads(c)}, CTranslate2 {c['ctranslate2']}; each engine in its own "
            f"process, alternated in blocks of {c['block']} sentences; `{c['signature']}`.*\n\n" + lead
            + md_table(["decoder", "BLEU", "ms / sentence", "time vs the peer [95 %]" if "peer" in t else
                        "time vs CTranslate2 greedy [95 %]",
                      "speedup vs vanilla large [95 %]"], rows))  # fmt: skip


def _threads(c: dict) -> str:
    """The thread counts a ct2 run timed each engine at: each engine's fastest, from a probe, in
    runs that made one; one count for both in earlier runs."""
    if "ct2 settings" in c:
        n = c["threads"]
        return (f"bildlib at {n} thread{'' if n == 1 else 's'}, its fastest ({c['thread probe']}); "
                f"CTranslate2 at {', '.join(k.removeprefix('CTranslate2 ') for k in c['ct2 settings'])}")
    if "ct2 threads" not in c:
        return f"{c['threads']} threads each"
    n = c["threads"]
    return (f"bildlib at {n} thread{'' if n == 1 else 's'} and CTranslate2 at {c['ct2 threads']}, each its "
            f"fastest ({c['thread probe']})")


def ct2_fp32(root: Path) -> str:
    return ct2(root, "figures/peers/val-float32")


# docs/engines-cpu.md: the engines' calls against their weights' read time (bildlib.bench.callbench)
CALLS = "figures/engines/calls-native-bfloat16.csv"


def calls_block(root: Path, path: str = CALLS) -> str:
    """One row per (model, engine) of a callbench --out CSV: the one-token step, the 10-token
    call and its cost in steps, the weights a step reads and the step in units of their read
    time at the measured rate; the machine under the table."""
    df = read_csv(root, path)
    cols = ["model", "engine", "step_ms", "call10_ms", "call10_in_steps", "weights_MB", "read_GBps",
            "step_in_reads"]  # fmt: skip
    valid(df, cols)
    rows = [[r.model, f"**{r.engine}**" if r.engine == "native" else r.engine, f"{r.step_ms:.2f}",
             f"{r.call10_ms:.2f}", f"{r.call10_in_steps:.2f}", f"{r.weights_MB:.1f}",
             f"{r.step_in_reads:.2f}"] for r in df.itertuples()]  # fmt: skip
    head = ["model", "engine", "step (ms)", "10-token call (ms)", "call in steps", "weights read (MB)",
            "step in read times"]  # fmt: skip
    return (md_table(head, rows) + f"\n\n`{path}`: {df['machine'].iloc[0]}, {int(df['threads'].iloc[0])} "
            f"threads, {df['dtype'].iloc[0]}; read rate {df['read_GBps'].iloc[0]:.1f} GB/s "
            "(a sum over 256 MB).")
