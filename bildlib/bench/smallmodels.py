"""Which small model makes BiLD fastest (notebooks/small_models.ipynb): the candidates measured by
what BiLD asks of a small model, not by their own BLEU.

Per candidate:
- parameters (each shared tensor once) and shape;
- ms per token: a lean one-token step after a 9-token prefix (as callbench), in float32 and
  bf16, the candidates and the large model interleaved in blocks, medians;
- agreement with the large model, teacher-forced on its own greedy outputs, and how well max p_S
  says so (train.agreement: reliability diagram, ECE) -- what α_FB relies on;
- from one interleaved sweep of all of them against one vanilla-large baseline: BLEU alone
  (vanilla), BiLD's lossless speedup (`distance="exact"`) and its best speedup within `tol`
  of vanilla large (Algorithm 1), with the large calls per sentence that explain it.

Candidates run as model "student:<label>" (presets.CANDIDATE) with their folders as checkpoints.
"""

from __future__ import annotations

import statistics

import pandas as pd
import torch

from bildlib import data
from bildlib import experiments as X
from bildlib.analysis import metrics, summarize, vanilla_large
from bildlib.analysis.evaluate import greedy_ids, translate
from bildlib.analysis.targets import fastest
from bildlib.bench.peers import calls_per_sentence
from bildlib.experiments.calls import prefix, timed
from bildlib.experiments.presets import CANDIDATE
from bildlib.models import LM, load_model, locate
from bildlib.train import agreement

# the default candidates (make small-models): the shipped two, the first student, and the
# students of train.config.CANDIDATES (make models-candidates)
CANDIDATES = {
    "small": "data/checkpoints/multi30k-small",
    "aligned": "data/checkpoints/multi30k-small-aligned",
    "kd": "data/checkpoints/multi30k-student-kd",
    **{k: f"data/checkpoints/multi30k-student-{k}" for k in ("top32", "dec2", "w256", "pet")},
}
LARGE = "data/checkpoints/multi30k-large"


def check(candidates: dict) -> dict:
    """{label: folder}, every folder found; a missing one names the label and how to build it."""
    if not isinstance(candidates, dict) or not candidates:
        raise ValueError(f"candidates must be a non-empty dict {{label: folder}}, got {candidates!r}")
    out = {}
    for label, path in candidates.items():
        try:
            out[label] = locate(path)
        except FileNotFoundError as e:
            raise FileNotFoundError(
                f"candidates: {label!r}: {path} does not exist; `make models-candidates` trains the "
                "students (docs/data-and-models.md, Students)"
            ) from e
    return out


def shape(model) -> dict:
    """Parameters (each tied tensor once: model.parameters() yields it once) and the config's shape."""
    c = model.config
    pet = {k: getattr(c, k) for k in ("pet_pairs", "pet_encoder_qk", "pet_decoder_q") if getattr(c, k, None)}
    n = sum(p.numel() for p in model.parameters())
    return {"params_m": n / 1e6, "d_model": c.d_model, "encoder_layers": c.num_layers,
            "decoder_layers": c.num_decoder_layers, "pet": str(pet or "")}  # fmt: skip


def step_ms(paths: dict, device="cpu", threads: int = 2, dtypes=("float32", "bfloat16"), rounds: int = 20,
            block: int = 10) -> pd.DataFrame:  # fmt: skip
    """One row per (label, dtype): the median ms of a lean one-token step on `threads` torch
    threads; models of one dtype interleaved in blocks of `block` steps, `rounds` times
    (callbench.bench's method)."""
    src = data.load("multi30k", "val", 1).sources[0]
    torch.set_num_threads(threads)  # as the sweep fixes them
    rows = []
    for dtype in dtypes:
        lms = {}
        for label, path in paths.items():
            model, tok = load_model(path, device, dtype)
            lms[label] = LM(model, tok, path, "lean")
            prefix(lms[label], tok(src)["input_ids"])
            timed(lms[label], [7], 9)  # warm-up, untimed
        times = {label: [] for label in lms}
        for _ in range(rounds):
            for label, lm in lms.items():
                times[label] += [timed(lm, [7], 9) for _ in range(block)]
        med = {k: 1e3 * statistics.median(t) for k, t in times.items()}
        rows += [{"label": k, "dtype": dtype, "step_ms": m} for k, m in med.items()]
    return pd.DataFrame(rows)


def agreements(paths: dict, large: str = LARGE, split: str = "val", n: int | None = None,
               bins: int = 10, bleu: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """(one row per label: shape, greedy BLEU, agreement, ECE, mean max p; the reliability
    diagrams' bins of every label), in float32: BLEU of batched greedy decoding (evaluate; not
    computed where `bleu` is False, for a caller that scores with its signature), the rest
    teacher-forced on the large model's greedy outputs on split[:n]."""
    s = data.load("multi30k", split, n)
    big, tok = load_model(large, dtype="float32")
    targets = greedy_ids(big, tok, s.sources)
    rows, bins_ = [], []
    for label, path in paths.items():
        small, _ = load_model(path, dtype="float32")
        pos = agreement.positions(small, tok, s.sources, targets)
        score = {"bleu": metrics.bleu(translate(small, tok, s.sources), s.references).value} if bleu else {}
        rows.append({"label": label, **shape(small), **score, **agreement.summary(pos, bins)})
        bins_.append(agreement.reliability(pos, bins).assign(label=label))
    return pd.DataFrame(rows), pd.concat(bins_, ignore_index=True)


def configs(labels, fallbacks, lossless_fallbacks, rollback: float = 1.0, limits=(10,)) -> list[X.Config]:
    """Per label and limit of small steps in a row (10 is the paper's): Algorithm 1 at each α_FB
    and lossless BiLD at each of lossless_fallbacks, α_RB `rollback`."""
    out = []
    for label in labels:
        for n in limits:
            kw = dict(model=CANDIDATE + label, rollback=float(rollback), max_small_steps=int(n))
            out += [X.Config("bild", fallback=float(fb), **kw) for fb in fallbacks]
            out += [X.Config("bild", fallback=float(fb), distance="exact", **kw) for fb in lossless_fallbacks]
    return out


def table(df: pd.DataFrame, tol: float = 0.5) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every BiLD configuration with its label, α_FB, limit, score, speedup and large calls per
    sentence; one row per (label, max_small_steps): BLEU alone, its vanilla speedup, the best
    lossless speedup and the best Algorithm 1 speedup within `tol` of vanilla large, with their
    95 % intervals, α_FB and large calls per sentence)."""
    s = calls_per_sentence(df, summarize(df))
    v = float(vanilla_large(s)["score"].mean())
    s["candidate"] = s["model"].str.removeprefix(CANDIDATE)
    lim = df.groupby("label")["max_small_steps"].first()
    s["max_small_steps"] = s["label"].map(lim)
    bild = s[(s["method"] == "bild") & s["model"].str.startswith(CANDIDATE)].copy()
    bild["lossless"] = bild["label"].str.contains("-exact")
    rows = []
    for (cand, n), g in bild.groupby(["candidate", "max_small_steps"], sort=False):
        alone = s[(s["method"] == "vanilla") & (s["model"] == CANDIDATE + cand)].iloc[0]
        row = {"candidate": cand, "max_small_steps": int(n), "bleu_alone": alone["score"],
               "vanilla_speedup": alone["speedup"], "large_bleu": v}  # fmt: skip
        got = {"speedup": "speedup", "speedup_lo": "speedup_lo", "speedup_hi": "speedup_hi",
               "fb": "fallback", "bleu": "score", "large_calls": "large_calls_per_sentence"}  # fmt: skip
        for name, b in fastest(g, g["lossless"], v, tol).items():
            row |= {f"{name}_{k}": b[c] for k, c in got.items()}
        rows.append(row)
    cols = ["label", "candidate", "max_small_steps", "fallback", "lossless", "score", "speedup", "speedup_lo",
            "speedup_hi", "large_calls_per_sentence", "small_calls_per_sentence"]  # fmt: skip
    return bild[cols].reset_index(drop=True), pd.DataFrame(rows)


def winner(head: pd.DataFrame) -> str:
    """The candidate with the best speedup within the tolerance at 10 small steps (table's head);
    the best lossless one where none stays within it."""
    ten = head[head["max_small_steps"] == 10]
    within = "best_speedup" in ten and ten["best_speedup"].notna().any()
    col = "best_speedup" if within else "lossless_speedup"
    return str(ten.loc[ten[col].idxmax(), "candidate"])


GOALS = {"best": 2.0, "lossless": 1.8}  # the students' speed bars (docs/data-and-models.md, Students)


def block(root, folder: str = "figures/small_models") -> str:
    """The study's report block (bildlib.reports.readme): one row per candidate and limit, then each bar
    and the candidate that comes nearest, from the committed CSVs and the run's _checks.json; then the
    winner's limits of small steps in a row, from their own run."""
    from bildlib.analysis.tables import ci, md_table, num, read_csv, read_json, run_line, valid

    t = read_csv(root, f"{folder}/small_models.csv")
    prof = read_csv(root, f"{folder}/small_models_profile.csv")
    c = read_json(root, f"{folder}/small_models_checks.json")
    valid(t, ["candidate", "max_small_steps", "bleu_alone", "large_bleu", "lossless_speedup"])
    valid(prof, ["label", "params_m", "agreement", "ece", "step_ratio_bfloat16", "step_ratio_float32",
                  "step_ms_float32", "large_step_ms_bfloat16"])
    p = prof.set_index("label")
    rows = []
    for _, r in t.iterrows():
        q = p.loc[r["candidate"]]
        limit = "" if r["max_small_steps"] == 10 else f" ({r['max_small_steps']} steps)"
        name = f"`{r['candidate']}`{limit}"
        best = ci(r, "best_speedup", unit="×")
        if pd.notna(r.get("best_fb")):
            best += f" (α_FB {r['best_fb']:g}, {r['best_bleu']:.2f})"
        calls = num(r["lossless_large_calls"], ".1f")
        lossless = ci(r, "lossless_speedup", unit="×") + f" ({calls} large calls)"
        step = f"{q['step_ratio_bfloat16']:.3f} / {q['step_ratio_float32']:.3f}"
        rows.append([name, f"{q['params_m']:.2f} M", step, f"{100 * q['agreement']:.1f} %", f"{q['ece']:.3f}",
                     f"{r['bleu_alone']:.2f}", lossless, best])  # fmt: skip
    tol = f"{c['tolerance']:g}"
    head = ["candidate", "parameters", "step / large's (bf16 / fp32)", "agreement", "ECE", "BLEU alone",
            "lossless BiLD", f"best within {tol} BLEU (Algorithm 1)"]  # fmt: skip
    ten = t[t["max_small_steps"] == 10]
    bars = []
    for key, what in (("best", f"BiLD within {tol} BLEU"), ("lossless", "lossless BiLD")):
        col = f"{key}_speedup"
        r = ten.loc[ten[col].idxmax()] if col in ten and ten[col].notna().any() else None
        got = "no candidate within its BLEU" if r is None else f"{r[col]:.2f}× (`{r['candidate']}`)"
        met = r is not None and r[col] >= GOALS[key]
        bars.append(f"{what} ≥ {GOALS[key]:.1f}×: {got}, {'reached' if met else 'missed'}")
    q = p.loc[[k for k in ten["candidate"] if k in p.index]]
    mixed = q["step_ms_float32"] / q["large_step_ms_bfloat16"]  # dtype "mixed": the small in float32
    pairs = zip(q.index, q["step_ratio_bfloat16"], mixed, strict=True)
    ratios = ", ".join(f"`{k}` {a:.3f} / {b:.3f}" for k, a, b in pairs)
    bars.append(f"step ≤ 1/8 of the large model's bf16 step, the small in bf16 / in float32 (dtype mixed): "
                f"{ratios}")  # fmt: skip
    large = t["large_bleu"].iloc[0]
    run = f"*{run_line(c)}; vanilla large {large:.2f} BLEU; the profile in float32, same sentences.*"
    out = run + "\n\n" + md_table(head, rows) + "\n\n" + "\n".join(f"- {b}" for b in bars) + "\n"
    lim = read_csv(root, f"{folder}/small_models_limits.csv")
    lc = read_json(root, f"{folder}/small_models_limits_checks.json")
    valid(lim, ["candidate", "max_small_steps", "lossless_speedup"])
    rows = []
    for _, r in lim.iterrows():
        fb = f" (α_FB {r['best_fb']:g})" if pd.notna(r.get("best_fb")) else ""
        rows.append([str(r["max_small_steps"]), ci(r, "lossless_speedup", unit="×"),
                     ci(r, "best_speedup", unit="×") + fb])  # fmt: skip
    why = "given" if lc["chosen"] == "given" else f"the fastest within {tol} BLEU above"
    out += (f"\nThe winner, `{lc['winner']}` ({why}), at each limit of small steps in a row, in an "
            f"interleaved run of its own (*{run_line(lc)}*):\n\n")  # fmt: skip
    return out + md_table(["small steps in a row", "lossless BiLD", f"best within {tol} BLEU"], rows) + "\n"
