"""README's blocks for the paper's figures and tables (Table 1, Fig. 5, Tables 3-5, Fig. 8, early
exit, the latency scatter, the shipped pair, the tutorial run), each from its notebook's committed
CSV and JSON."""

from __future__ import annotations

from pathlib import Path

from bildlib.analysis.tables import (
    agree,
    ci,
    md_table,
    num,
    read_csv,
    read_json,
    regimes,
    run_line,
    valid,
)

RULE_TEXT = {
    "interval": "Regimes decided on the interval: a configuration qualifies when the lower end of the 95 % "
    "paired interval of its BLEU difference to vanilla large is at least −tol (at 95 % confidence it "
    "loses at most tol).",
    "point": "The paper's rule: the measured BLEU within tol of vanilla large's.",
}


def table1(root: Path, folder: str = "figures", rule: str = "interval", min_n: int = 100) -> str:
    """Table 1 (fig4.ipynb's table1.csv in folder) under one rule (analysis.RULES), from a run of at
    least min_n sentences (make figures: fig4's default, 100)."""
    t, c = read_csv(root, f"{folder}/table1.csv"), read_json(root, f"{folder}/fig4_checks.json")
    agree(t, c, min_n)
    return f"*{run_line(c)}; `{c['signature']}`.* {RULE_TEXT[rule]}\n\n" + regimes(t, rule)


def headline(root: Path) -> str:
    return table1(root, "figures/full", min_n=1014)  # make headline: all of val


def fig5(root: Path) -> str:
    t, c = read_csv(root, "figures/fig5_best.csv"), read_json(root, "figures/fig5_checks.json")
    valid(t, ["variant", "pick"])
    valid(t, ["score", "delta", "speedup"], t["label"].notna())
    rows = []
    for _, r in t[~t["pick"].str.contains("point rule")].iterrows():
        what = r["label"] if isinstance(r.get("label"), str) else "none"
        rows.append([r["variant"], r["pick"].replace(" (interval rule)", ""), what, ci(r, "score"),
                     ci(r, "delta", "+.2f"), ci(r, "speedup", ".2f", "×")])  # fmt: skip
    head = [
        "variant",
        "pick (interval rule)",
        "configuration",
        "BLEU [95 %]",
        "Δ vs vanilla [95 %]",
        "speedup [95 %]",
    ]
    return f"*{run_line(c)}.*\n\n" + md_table(head, rows)


def tables34(root: Path) -> str:
    out = []
    for name in ("table3", "table4"):
        t = read_csv(root, f"figures/{name}.csv")
        valid(t, ["mode", "seeds", "method", "score", "speedup"])
        valid(t, ["score_std", "speedup_std"], t["seeds"] > 1)
        valid(t, ["delta"], t["seeds"] == 1)
        valid(t, ["fallback_pct", "rollback_pct", "large_call_pct"], t["method"] != "Vanilla (large)")
        rows = []
        for _, r in t.iterrows():
            if r["seeds"] > 1:
                score, delta = f"{r['score']:.2f} ± {r['score_std']:.2f}", "–"
                speed = f"{r['speedup']:.2f} ± {r['speedup_std']:.2f}×"
            else:
                score, delta, speed = ci(r, "score"), ci(r, "delta", "+.2f"), ci(r, "speedup", ".2f", "×")
            pcts = ("fallback_pct", "rollback_pct", "large_call_pct")
            rates = ["–"] * 3 if r["method"] == "Vanilla (large)" else [num(r.get(c), ".1f") for c in pcts]
            what = [r["mode"], str(int(r["seeds"])), r["method"], str(r.get("label", ""))]
            rows.append([*what, score, delta, speed, *rates])
        head = ["mode", "seeds", "method", "configuration", "BLEU", "Δ vs vanilla [95 %]", "speedup",
                "fallback %", "rollback %", "large calls per token %"]  # fmt: skip
        out += [f"**Table {name[-1]}**", "", md_table(head, rows), ""]
    c = read_json(root, "figures/table3_checks.json")
    greedy = c["greedy speculative = vanilla large, % of examples (worst window)"]
    return "\n".join(out) + (
        "\nThe rows are picked as the paper picks them, on the measured (mean) scores; the intervals "
        "say how sure each pick is. "
        f"Greedy: one sweep, [95 % intervals]. Sampled: seeds {c['sampled seeds']}, one sweep each, "
        f"mean ± std over seeds. Greedy speculative decoding wrote vanilla large's tokens on {greedy:.0f} % "
        "of the sentences at its worst window."
    )


def table5(root: Path) -> str:
    t = read_csv(root, "figures/table5.csv")
    has = t["score_mean"].notna()
    valid(t, ["row", "score_std", "speedup_mean", "speedup_std", "seeds"], has)
    valid(t, ["fallback_pct", "rollback_pct"], has & (t["row"] != "Vanilla (large)"))
    rows = []
    for _, r in t[t["score_mean"].notna()].iterrows():
        van = r["row"] == "Vanilla (large)"
        rates = ["–", "–"] if van else [num(r.get(c), ".1f") for c in ("fallback_pct", "rollback_pct")]
        score = f"{r['score_mean']:.2f} ± {r['score_std']:.2f}"
        speed = f"{r['speedup_mean']:.2f} ± {r['speedup_std']:.2f}×"
        rows.append([r["row"], str(r.get("config", "")), score, speed, *rates, num(r.get("seeds"), ".0f")])
    return md_table(
        ["row", "configuration", "BLEU (mean ± std)", "speedup", "fallback %", "rollback %", "seeds"], rows
    )


def fig8(root: Path) -> str:
    t, p, c = (
        read_csv(root, "figures/fig8.csv"),
        read_csv(root, "figures/fig8_roofline.csv"),
        read_json(root, "figures/fig8_checks.json"),
    )
    valid(t, ["pair", "flops_rel", "bytes_rel", "intensity_rel"], t["run"] != "vanilla large")
    valid(p, ["pair", "layer_overhead_us", "gpu", "speedup"])
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
        md_table(["pair", "FLOPs", "memory ops", "arithmetic intensity"], rows), "",
        "Roofline projection (a model, not a measurement; 16-bit weights):", "",
        md_table(["pair", "overhead per layer", *proj.columns], prow), "",
        f"Measured on this machine: {c['measured speedup']:.2f}× [{lo:.2f}, {hi:.2f}] ({run_line(c)}).",
    ])  # fmt: skip


PICKED = {  # fig7_best.csv's rule (plots.ee.best_within); the runs before its picked_on column: point
    "point": "The fastest configuration of each curve whose measured BLEU is within 0.5 or 1 point of the "
    "full model's (the paper's rule; the Δ interval says how sure):",
    "interval": "The fastest configuration of each curve whose 95 % interval of Δ to the full model clears "
    "−0.5 or −1 (README's rule):",
}


def early_exit(root: Path) -> str:
    b, m = read_csv(root, "figures/fig7_best.csv"), read_csv(root, "figures/fig7_matched.csv")
    c6, c7 = read_json(root, "figures/fig6_checks.json"), read_json(root, "figures/fig7_checks.json")
    valid(b, ["curve", "within", "score", "delta", "speedup"])
    valid(m, ["speedup"])
    rows = [[r["curve"], f"{r['within']:g}", str(r.get("label", "")), ci(r, "score"),
             ci(r, "delta", "+.2f"), ci(r, "speedup", ".2f", "×")] for _, r in b.iterrows()]  # fmt: skip
    mrow = [[f"{r['speedup']:.2f}×", num(r["bild"]), num(r["calm"]), num(r["bild_minus_calm"], "+.2f")]
            for _, r in m.iterrows()]  # fmt: skip
    return "\n".join([
        f"*fig6: {run_line(c6)}. fig7: {run_line(c7)}.*", "",
        PICKED[b["picked_on"].iloc[0] if "picked_on" in b.columns else "point"], "",
        md_table(["curve", "within", "fastest", "BLEU [95 %]", "Δ vs full model [95 %]", "speedup [95 %]"],
               rows),
        "",
        "Best BLEU at or below each latency (the frontiers read as step functions):", "",
        md_table(["speedup", "early-exit BiLD", "CALM", "BiLD − CALM"], mrow),
    ])  # fmt: skip


def latency(root: Path) -> str:
    c = read_json(root, "figures/latency_scatter_checks.json")
    return (f"`{c['shown']}` was slower than vanilla large on {c['slower examples']} of {c['examples']} "
            f"sentences ({run_line(c)}).")  # fmt: skip


def pair(root: Path) -> str:
    p = read_json(root, "data/checkpoints/pair.json")
    rows = []
    for name, m in p["models"].items():
        scores = [f"{m[split]['bleu']:.2f}" for split in ("val", "test_2016_flickr")]
        ms = f"{m['latency']['per_token_ms']:.2f}"
        rows.append([f"`{name}`", f"{m['params'] / 1e6:.2f} M", *scores, ms])
    return md_table(
        ["checkpoint", "parameters", "greedy BLEU, val (1,014)", "test 2016 (1,000)", "ms / token (CPU)"],
        rows,
    )


def tutorial(root: Path) -> str:
    c = read_json(root, "figures/tutorial_checks.json")
    return (f"The committed run (`make tutorial`, every exercise filled in by its solution): "
            f"{c['passed']} of {c['exercises']} checks pass; its cells ran in {c['seconds']:.0f} s on "
            f"{c['device']} ({c['threads']} threads, {c['dtype']}), with n_examples = {c['n_examples']} and "
            f"n_sweep = {c['n_sweep']}.")  # fmt: skip
