"""arXiv v1 Table 2 on a decoder-only pair (notebooks/table2_lm): perplexity under fallback-only
BiLD (bildlib.analysis.perplexity) beside the latency of generating under the same policy, and a Fig.
4-style frontier of generation (BiLD with rollback, speculative decoding).

    s, l = scores("multi30k-lm", "val")          # teacher-forced, both models, once
    ppl = perplexity_table(s, l, [0.3, 0.5])      # one row per model and per α_FB
    df = X.sweep("multi30k-lm", grid([0.3, 0.5], [1.0], [4]))
    t = table(ppl, A.summarize(df))               # + speedup and BLEU of generating
"""

from __future__ import annotations

import pandas as pd

from bildlib import data
from bildlib.analysis import perplexity
from bildlib.experiments import Config, bild, presets, speculative, vanilla
from bildlib.models import load_model
from bildlib.train import causal

# arXiv v1 (2302.07863v1) Table 2, GPT-2 on WikiText-2, as quoted to this project (not re-read from
# the PDF here): perplexity and latency normalized to vanilla large (1 / speedup).
V1 = pd.DataFrame(
    {"row": ["vanilla large", "BiLD", "BiLD"], "perplexity": [13.70, 13.53, 14.56],
     "speedup": [1.0, 1.30, 1.59]}
)  # fmt: skip


def texts(preset: str, split: str, n: int | None = None) -> list[str]:
    """The texts perplexity is taken over: a language-modelling split's own texts (WikiText's
    lines), or each pair as the preset's prompt followed by its reference (multi30k-lm:
    "de: <German> en: <English>", the decoder-only pair's training format, train.causal)."""
    p = presets.get(preset)
    if preset not in presets.DECODER_ONLY:
        names = ", ".join(presets.DECODER_ONLY)
        raise ValueError(f"preset must be a decoder-only one ({names}), got {preset!r}")
    s = data.load(p.dataset, split)
    out = s.texts
    if out is None:  # a pair's text as the decoder-only pair was trained on it
        out = [causal.text(p.prefix, p.suffix, src, ref) for src, ref in s.pairs]
    if n is not None and n < 1:
        raise ValueError(f"n_texts must be >= 1 (or 0 for all), got {n}")
    return out[:n] if n else out


def scores(
    preset: str, split: str = "val", n: int | None = None, window: int = 128, stride: int = 64,
    device: str = "cpu", dtype: str = "default", checkpoints: dict | None = None,
) -> tuple[perplexity.Scores, perplexity.Scores]:  # fmt: skip
    """Teacher-forced scores of the small and the large model of `preset` over texts(...);
    checkpoints: replacements of the preset's models, as a sweep takes them (e.g. the student as
    the small model)."""
    from bildlib.experiments.runner import with_checkpoints

    p = with_checkpoints(presets.get(preset), checkpoints)
    t = texts(preset, split, n)
    out = []
    for which in ("small", "large"):
        model, tok = load_model(p.model(which), device, dtype)
        out.append(perplexity.score(model, perplexity.stream(tok, t), window, stride))
    return out[0], out[1]


def perplexity_table(small: perplexity.Scores, large: perplexity.Scores, fallbacks) -> pd.DataFrame:
    """Perplexity of each model alone and of fallback-only BiLD at each α_FB, with the share of
    tokens the large model scored."""
    nan = float("nan")
    rows = [
        {"row": "vanilla small", "fallback": nan, "perplexity": small.perplexity, "fallback_pct": 0.0},
        {"row": "vanilla large", "fallback": nan, "perplexity": large.perplexity, "fallback_pct": 100.0},
    ]
    for fb in fallbacks:
        r = perplexity.policy(small, large, fb)
        rows.append({"row": "BiLD", "fallback": fb, "perplexity": r.perplexity,
                     "fallback_pct": r.fallback_pct})  # fmt: skip
    out = pd.DataFrame(rows)
    out.attrs["n_tokens"] = len(small.nll)
    return out


def grid(fallbacks, rollbacks, windows) -> list[Config]:
    """The generation sweep: fallback-only BiLD at each α_FB (Table 2's latency), BiLD with
    rollback over α_FB × α_RB and speculative decoding at each window (the frontier), vanilla
    small, and two checks: exact BiLD (must equal vanilla large) and α_FB = 0 without the step
    limit (must equal vanilla small)."""
    out = [vanilla("small")] + [bild("small", fb, None) for fb in fallbacks]
    out += [bild("small", fb, rb) for fb in fallbacks for rb in rollbacks]
    out += [speculative("small", w) for w in windows]
    out += [EXACT, SMALL_ONLY]
    return list(dict.fromkeys(out))


EXACT = Config("bild", "small", fallback=0.5, rollback=1.0, distance="exact")
SMALL_ONLY = Config("bild", "small", fallback=0.0, rollback=None, max_small_steps=None)


def table(ppl: pd.DataFrame, s: pd.DataFrame) -> pd.DataFrame:
    """Table 2: perplexity_table's rows with the speedup (and normalized latency) and score of
    generating under the same policy, from analysis.summarize(sweep): vanilla small and large,
    and fallback-only BiLD (rollback off, at most 10 small tokens in a row) at each α_FB."""
    gen = s[(s["method"] == "bild") & s["rollback"].isna() & (s["label"] != SMALL_ONLY.label)]
    by_fb = gen.set_index("fallback")
    van = s[s["method"] == "vanilla"].groupby("model").first()
    cols = ["speedup", "speedup_lo", "speedup_hi", "norm_latency", "score", "fallback_pct"]
    cols = [c for c in cols if c in s]
    rows = []
    for _, r in ppl.iterrows():
        g = van.loc[r["row"].split()[-1]] if r["row"].startswith("vanilla") else by_fb.loc[r["fallback"]]
        rows.append(r.to_dict() | {f"gen_{c}": g[c] for c in cols})
    return pd.DataFrame(rows)


def block(root, folder: str = "figures") -> str:
    """README's Table 2 block, from the committed table2_lm.csv and its checks in folder
    (figures/lm-student: the same with the student as the small model, make figures-lm-student)."""
    from bildlib.analysis import tables as R

    t, c = R.read_csv(root, f"{folder}/table2_lm.csv"), R.read_json(root, f"{folder}/table2_lm_checks.json")
    R.valid(t, ["row", "perplexity", "fallback_pct", "gen_speedup", "gen_score", "gen_fallback_pct"])
    R.valid(t, ["preset"])
    R.valid(t, ["fallback"], ~t["row"].str.startswith("vanilla"))
    rows = [[r["row"], R.num(r["fallback"], "g"), R.num(r["perplexity"]), R.num(r["fallback_pct"], ".1f"),
             R.ci(r, "gen_speedup", ".2f", "×"), R.num(r["gen_score"]),
             R.num(r["gen_fallback_pct"], ".1f")] for _, r in t.iterrows()]  # fmt: skip
    v1 = "; ".join(f"{r.row} {r.perplexity:.2f} at {r.speedup:.2f}×" for r in V1.itertuples())
    return "\n".join([
        f"*Preset `{t['preset'].iloc[0]}`; perplexity over {c['perplexity tokens']:,} tokens of val "
        f"(windows of {c['window']} every {c['stride']}); generating: {R.run_line(c)}. "
        "Exact BiLD wrote vanilla "
        f"large's tokens on {c['exact BiLD = vanilla large, % of examples']:.0f} % of the prompts.*", "",
        R.md_table(["row", "α_FB", "perplexity", "tokens scored by the large model %",
                  "generating: speedup [95 %]", "BLEU", "fallbacks per token %"], rows),
        "", f"arXiv v1 Table 2 (GPT-2 on WikiText-2, quoted, not re-read from the PDF here): {v1}.",
    ])  # fmt: skip


def pair_block(root) -> str:
    """docs/language-modelling.md's table of the decoder-only pair (and of its student, once its
    card is committed), from their committed cards."""
    from bildlib.analysis import tables as R

    rows = []
    student = (root / "data/checkpoints/cards/multi30k-lm-student.json").is_file()
    for name in ("multi30k-lm-small", "multi30k-lm-large") + (("multi30k-lm-student",) if student else ()):
        m = R.read_json(root, f"data/checkpoints/cards/{name}.json")
        z, tr = m["size"], m["train"]
        g = m["greedy"]
        rows.append([f"`{name}`", f"{z['layers']} × {z['d_model']}", f"{z['parameters'] / 1e6:.1f} M",
                     f"{m['perplexity']:.2f}", f"{g['bleu']:.2f}", f"{g['ms_per_token']:.2f}",
                     f"{tr['wall_s'] / 60:.1f} min, {tr['epochs']} epochs"])  # fmt: skip
    return R.md_table(["model", "layers × width", "parameters", "val perplexity", "greedy BLEU, val",
                     "ms / token (CPU, float32)", "training (2 CPU threads)"], rows)  # fmt: skip


def best_within(points: pd.DataFrame, tol: float = 0.5) -> pd.Series | None:
    """The fastest BiLD point of table2_lm_points.csv whose measured BLEU is within tol of vanilla
    large's (the paper's point rule), or None."""
    from bildlib import analysis as A

    base = points.loc[points["label"] == "vanilla-large", "score"].iloc[0]
    bild = points[points["method"] == "bild"]
    ok = bild[A.within(bild, base, tol, "point")]  # the rule every other table uses (analysis.RULES)
    return ok.loc[ok["speedup"].idxmax()] if len(ok) else None


def targets_block(root, folders=(("small model", "figures"), ("student", "figures/lm-student"))) -> str:
    """docs/language-modelling.md's targets for the decoder-only pair, per small model: BiLD within
    0.5 BLEU at 1.5× or more, and a policy perplexity below the large model's at some α_FB."""
    from bildlib.analysis import tables as R

    lines = []
    for who, folder in folders:
        pts = R.read_csv(root, f"{folder}/table2_lm_points.csv")
        t = R.read_csv(root, f"{folder}/table2_lm.csv")
        b = best_within(pts)
        large = t.loc[t["row"] == "vanilla large", "perplexity"].iloc[0]
        low = t[t["row"] == "BiLD"].sort_values("perplexity").iloc[0]
        fast = "none"
        if b is not None:
            rb = "no rollback" if pd.isna(b["rollback"]) else f"α_RB {b['rollback']:g}"
            ci = f"[{b['speedup_lo']:.2f}, {b['speedup_hi']:.2f}]"
            fast = f"{b['speedup']:.2f}× {ci} (α_FB {b['fallback']:g}, {rb}; BLEU {b['score']:.2f})"
        lines.append(f"- **{who}** (`{folder}/`): fastest BiLD within 0.5 BLEU {fast}; target 1.5×, "
                     f"{'reached' if b is not None and b['speedup'] >= 1.5 else 'missed'}. Lowest policy "
                     f"perplexity {low['perplexity']:.2f} (α_FB {low['fallback']:g}) against vanilla large's "
                     f"{large:.2f}: {'below' if low['perplexity'] < large else 'not below'}.")  # fmt: skip
    return "\n".join(lines)
