"""The peers table: BiLD against the decoders a user would pick instead, from one interleaved
sweep (notebooks/peers.ipynb). Every speedup is against vanilla large on the same engine (lean
configurations against the sweep's own baseline, HF ones against vanilla large on HF's
forward), and each is also given against transformers' `generate`."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

from bildlib import experiments as X
from bildlib.analysis import summarize, vanilla_large


def configs(preset: str, small: str, fallbacks, rollbacks, assisted, verify_below=(),
            others=()) -> list[X.Config]:  # fmt: skip
    """The peers sweep (besides its vanilla-large baseline on the run's engine): vanilla large
    on HF's forward, `generate`, assisted generation at HF's defaults and at each (drafts,
    threshold) in `assisted`, lossless BiLD at each α_FB, and BiLD over α_FB × α_RB with and
    without verify_end, and with verify_end_below at each value of `verify_below`; the BiLD
    rows also for each small model in `others` (the student beside the aligned model)."""
    out = [X.Config("vanilla", "large", max_small_steps=None, engine="hf")]
    out += [X.Config("generate", "large"), X.Config("assisted", small)]
    out += [X.Config("assisted", small, window=int(n), threshold=float(c)) for n, c in assisted]
    for m in (small, *others):
        out += [X.Config("bild", m, fb, 1.0, distance="exact") for fb in fallbacks]
        out += X.bild_grid(
            preset, models=(m,), fallbacks=fallbacks, rollbacks=rollbacks, verify_end=(False, True)
        )
        out += [X.Config("bild", m, float(fb), float(rb), verify_end_below=float(v))
                for v in verify_below for fb in fallbacks for rb in rollbacks]  # fmt: skip
    return out


def _bild_picks(ok: pd.DataFrame, tol: float, of: str = "") -> dict:
    """The fastest lossless BiLD row and the fastest within tol with each end rule, among `ok`
    (rows within tol); of: the small model's name in the row names, "" for the run's own."""
    below = ok["verify_end_below"].notna()
    exact = ok["label"].str.contains("-exact")
    fast = lambda rows: rows.nsmallest(1, "latency_s")  # noqa: E731
    return {
        f"BiLD lossless (exact){of}": fast(ok[exact]),
        f"BiLD ≤ {tol:g} BLEU, Algorithm 1 end{of}": fast(ok[~ok["verify_end"] & ~below & ~exact]),
        f"BiLD ≤ {tol:g} BLEU, verify_end{of}": fast(ok[ok["verify_end"] & ~exact]),
        f"BiLD ≤ {tol:g} BLEU, verify_end_below{of}": fast(ok[below]),
    }


def table(df: pd.DataFrame, tol: float = 0.5, small: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every configuration, the headline rows). Columns: score, ms per sentence, speedup against
    vanilla large on the same engine and against HF generate, the loop's own cost. Headline rows:
    HF generate; HF assisted at its defaults and at its fastest tuned setting; vanilla large on
    both engines; the fastest lossless BiLD; the fastest BiLD within `tol` of vanilla large's
    score with Algorithm 1's end, with verify_end and with verify_end_below. Speedups carry
    their 95 % intervals (speedup_lo / _hi), and BiLD rows their model calls per sentence.
    small: the small model of the BiLD rows above (None: every BiLD row); each other small model
    of the sweep's BiLD rows gets the same four BiLD rows, named ", with <model>"."""
    s = summarize(df)  # ran_on: the engine each configuration ran on ("lean" or "hf")
    s = calls_per_sentence(df, _hf_intervals(df, s))
    run = vanilla_large(s)["ran_on"].iloc[0]  # the run's engine
    is_hf_large = (s["method"] == "vanilla") & (s["model"] == "large") & (s["engine"] == "hf")
    if not is_hf_large.any() or not (s["method"] == "generate").any():
        raise ValueError("the peers table needs vanilla large on engine hf and HF generate in the sweep")
    base = {
        run: float(vanilla_large(s)["latency_s"].mean()),
        "hf": float(s[is_hf_large]["latency_s"].iloc[0]),
    }
    s["ms"] = 1e3 * s["latency_s"]
    s["speedup_same_engine"] = s["ran_on"].map(base) / s["latency_s"]
    s["speedup_vs_generate"] = float(s[s["method"] == "generate"]["latency_s"].iloc[0]) / s["latency_s"]
    hf_large, gen = s[is_hf_large], s[s["method"] == "generate"]
    v = float(vanilla_large(s)["score"].mean())
    assisted = s[s["method"] == "assisted"]
    default = assisted[assisted["window"].isna()]
    tuned = assisted[assisted["window"].notna()]
    bild = s[(s["method"] == "bild") & (s["ran_on"] == run)]
    ok = bild[bild["score"] >= v - tol - 1e-9]
    mine = ok if small is None else ok[ok["model"] == small]
    pick = {
        "HF generate (large, greedy)": gen,
        "HF assisted generation, defaults": default,
        "HF assisted generation, fastest tuned": tuned.nsmallest(1, "latency_s"),
        "vanilla large (hf engine)": hf_large,
        f"vanilla large ({run} engine)": vanilla_large(s).iloc[:1],
        **_bild_picks(mine, tol),
    }
    for m in [] if small is None else [m for m in bild["model"].unique() if m != small]:
        pick |= _bild_picks(ok[ok["model"] == m], tol, f", with {m}")
    cols = ["label", "ran_on", "score", "ms", "speedup_same_engine", "speedup_lo", "speedup_hi",
            "speedup_vs_generate", "large_calls_per_sentence", "small_calls_per_sentence", "loop_pct",
            "loop_us_per_token", "fallback_pct", "rollback_pct"]  # fmt: skip
    rows = [r[cols].iloc[0].to_dict() | {"decoder": name} for name, r in pick.items() if not r.empty]
    head = pd.DataFrame(rows)[["decoder", *cols]]
    head.attrs = s.attrs
    return s[cols + ["method", "model", "fallback", "rollback", "verify_end", "verify_end_below"]], head


def _hf_intervals(df: pd.DataFrame, s: pd.DataFrame) -> pd.DataFrame:
    """summarize's speedup intervals are against the run's baseline; the rows that ran on HF are
    timed against vanilla large on HF, so theirs come from the same paired bootstrap against
    that row (bildlib.analysis.intervals)."""
    from bildlib.analysis import intervals

    s = s.copy()
    hf = s[s["ran_on"] == "hf"]["label"].tolist()
    base = s[(s["method"] == "vanilla") & (s["model"] == "large") & (s["ran_on"] == "hf")]["label"]
    if hf and not base.empty and "output" in df:
        rows = df[df["label"].isin(hf)]
        iv = intervals.shard_intervals(rows, [base.iloc[0]], df.attrs.get("metric", "bleu"))
        for c in ("speedup_lo", "speedup_hi"):
            s.loc[s["label"].isin(hf), c] = s["label"].map(iv[c])
    return s


def calls_per_sentence(df: pd.DataFrame, s: pd.DataFrame) -> pd.DataFrame:
    """Each configuration's model calls per sentence (the per-call breakdown): s (summarize's
    table of df) with large_calls_per_sentence and small_calls_per_sentence."""
    s = s.copy()
    calls = df.groupby("label")[["large_calls", "small_calls"]].mean()
    s["large_calls_per_sentence"] = s["label"].map(calls["large_calls"])
    s["small_calls_per_sentence"] = s["label"].map(calls["small_calls"])
    big = (s["method"] == "vanilla") & (s["model"] == "large")  # vanilla's Trace counts its one model as S
    s.loc[big, "large_calls_per_sentence"] = s.loc[big, "small_calls_per_sentence"]
    s.loc[big, "small_calls_per_sentence"] = 0.0
    unknown = s["method"] == "assisted"  # HF does not report assisted generation's calls
    s.loc[unknown, ["large_calls_per_sentence", "small_calls_per_sentence"]] = float("nan")
    return s


def versus_ct2(preset: str, grid: list[X.Config], head: pd.DataFrame, split: str, n_examples: int,
               device: str, dtype: str, engine: str, threads: int, out, checkpoints: dict | None = None,
               left_out: list[str] = ()) -> pd.DataFrame:  # fmt: skip
    """CTranslate2 greedy on the large checkpoint against vanilla large and the headline BiLD
    rows of `head` (peers.table) that ran on the run's engine, on the same `n_examples`, each
    engine in its own process, alternated (bildlib.bench.ct2peer). CTranslate2 runs at every
    setting a CPU user picks from (float32 and int8, at 1 .. `threads` threads: ct2peer.peers, each
    timed on every sentence), and every row is compared with the fastest of them within 0.5 BLEU
    of its float32 (ct2peer.reference); bildlib at its fastest thread count of at most `threads`
    (a short probe, bench.threads.torch_threads, recorded in the checks). Writes <out>/ct2.csv (one
    row per decoder: score, ms, time relative to that peer with its 95 % interval, speedup against
    vanilla large) and ct2_checks.json (the run: machine, versions, n, threads, probe, signature).
    checkpoints: the sweep's replacements of the preset's models (runner.with_checkpoints);
    left_out: rows of the peers table not timed (ct2_again: their model is not built here)."""
    import hashlib
    from pathlib import Path

    import torch

    from bildlib import notebook, plots
    from bildlib.analysis.evaluate import device_name, machine
    from bildlib.bench import ct2peer
    from bildlib.bench import threads as threads_
    from bildlib.experiments import presets
    from bildlib.experiments.runner import examples
    from bildlib.models import native_bf16

    if device != "cpu":
        raise ValueError(f"device: the CTranslate2 peer runs on cpu here, not {device!r}")
    from bildlib.experiments.runner import with_checkpoints

    models = X.Models(with_checkpoints(presets.get(preset), checkpoints), device, dtype, engine)
    base = X.vanilla("large")
    labels = head[head["label"].str.startswith("bild")]["label"].tolist()
    picks = [base] + [c for c in grid if c.label in labels]
    ex = examples(models.preset, split, n_examples)
    bl_t, bl_ms = threads_.bildlib_threads(models, ex, threads)
    settings = ct2peer.peers(threads)
    run = [preset, split, n_examples, dtype, engine, threads, bl_t, settings, [c.label for c in picks]]
    partial = Path(out) / f"ct2_rows-{hashlib.sha256(repr(run).encode()).hexdigest()[:12]}.partial.parquet"
    rows = ct2peer.compare(models, picks, ex, bl_t, partial=partial, settings=settings)
    t = ct2peer.summary(rows, ex, models.preset.metric, base.label)
    names = dict(zip(head["label"], head["decoder"], strict=True))
    names[base.label] = f"vanilla large ({models.get('large').engine} engine)"  # the engine that ran here
    t.insert(1, "label", t["decoder"])
    t["decoder"] = t["label"].map(lambda x: names.get(x, x))
    t["dtype"] = models.get("large").precision
    plots.save_table(t.drop(columns="signature"), "ct2", out)
    cpu = torch.backends.cpu.get_cpu_capability() + (", native bf16" if native_bf16() else "")
    probe = ", ".join(f"{t}: {ms:.1f}" for t, ms in bl_ms.items())
    checks = {"n": n_examples, "split": split, "threads": bl_t,
              "ct2 settings": {d: f"{ct}, {n} threads" for d, (ct, n) in settings.items()},
              "peer": t["peer"].iloc[0],
              "thread probe": f"ms per sentence by threads on {threads_.PROBE} sentences: bildlib vanilla "
                              f"large {{{probe}}}",
              "device": device_name(torch.device("cpu")),
              "engine": f"{models.get('large').engine} / ctranslate2",
              "dtype": f"{t['dtype'].iloc[0]} (bildlib); float32 and int8_float32 (CTranslate2)",
              "block": ct2peer.BLOCK, "warmup": ct2peer.WARMUP, "ctranslate2": rows.attrs["ctranslate2"],
              "signature": t["signature"].iloc[0],
              "processor": device_name(torch.device("cpu")), "cpu": cpu, "torch": torch.__version__,
              "platform": machine()["platform"], "processes": "separate, alternated in blocks"}  # fmt: skip
    if left_out:
        checks["left out"] = list(left_out)
    notebook.save_checks(checks, "ct2", out)
    partial.unlink(missing_ok=True)
    return t


def config_of(label: str) -> X.Config:
    """The BiLD configuration a peers table's label names (bild-<small>-fb<α_FB>-rb<α_RB>[...])."""
    m = re.fullmatch(r"bild-(\w+?)-fb([\d.]+)-rb([\d.]+)(.*)", label)
    if m:
        model, fb, rb, rest = m.groups()
        below = re.search(r"-verify-below([\d.]+)", rest)
        for ve in (None, False, True):
            for exact in (False, True):
                kw = {"verify_end": ve} | ({"distance": "exact"} if exact else {})
                kw |= {"verify_end_below": float(below.group(1))} if below else {}
                c = X.Config("bild", model, float(fb), float(rb), **kw)
                if c.label == label:
                    return c
    raise ValueError(f"{label!r}: not the label of a BiLD configuration of the peers sweep")


def ct2_again(folder: str, dtype: str, n_examples: int = 1014, threads: int = 2, preset: str = "multi30k",
              split: str = "val", picks: str | None = None) -> pd.DataFrame:  # fmt: skip
    """make bench-ct2: CTranslate2 against vanilla large and the BiLD rows of the committed peers
    table in `folder` (its peers.csv: the rows the sweep picked), timed again on this machine,
    each engine at its fastest thread count (versus_ct2), into folder's ct2.csv and
    ct2_checks.json, without the sweep. Rows whose small model is not built here are left out,
    and the checks say which. `picks`: another folder whose peers.csv names the rows (the int8
    run times the rows the default run's sweep picked)."""
    from bildlib import REPO_ROOT
    from bildlib.experiments import presets
    from bildlib.models import locate

    out = REPO_ROOT / folder
    out.mkdir(parents=True, exist_ok=True)
    head = pd.read_csv(REPO_ROOT / (picks or folder) / "peers.csv")
    bild = head[head["label"].str.startswith("bild-", na=False)]
    grid = [config_of(lb) for lb in bild["label"]]
    p, missing = presets.get(preset), set()
    for c in grid:
        try:
            if not Path(locate(p.model(c.model))).is_dir():
                missing.add(c.model)
        except (FileNotFoundError, KeyError, ValueError):
            missing.add(c.model)
    left = [c.label for c in grid if c.model in missing]
    keep = head[~head["label"].isin(left)]
    return versus_ct2(preset, [c for c in grid if c.model not in missing], keep, split, n_examples, "cpu",
                      dtype, "auto", threads, out, left_out=left)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.bench.peers",
                                 description=ct2_again.__doc__.split(":")[0])  # fmt: skip
    ap.add_argument("folder", help="a make bench folder with its peers.csv, e.g. figures/peers/val")
    ap.add_argument("--dtype", default="auto", help="auto (make bench's default run), float32 or int8")
    ap.add_argument("--picks", help="the folder whose peers.csv names the rows (default: folder)")
    ap.add_argument("--n", type=int, default=1014, help="val sentences (1014: all)")
    ap.add_argument("--threads", type=int, default=2, help="the most threads each engine is probed at")
    a = ap.parse_args(argv)
    print(ct2_again(a.folder, a.dtype, a.n, a.threads, picks=a.picks).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
