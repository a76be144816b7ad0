"""make reproduce: the paper's tables rerun on its checkpoints, with the paper's numbers beside them.

    make reproduce PRESETS="iwslt2017-mt5 xsum-t5" DEVICE=cuda          # all of validation
    make reproduce PRESETS=xsum-t5 DEVICE=cuda N=500                     # its first 500 examples
    make reproduce DRY=1 PRESETS="xsum-t5 wikitext2-gpt2"               # offline, random models

Per preset it prints the plan first (bildlib.experiments.preflight: models, memory, disk, projected
time), checks that every checkpoint and dataset can be had (offline and uncached, it stops naming
each missing one), then runs fig4 (Table 1 on the paper's grid), fig2 (the oracle's share of large
tokens), fig5 (the ablations), fig8 (FLOPs and memory operations), table3 (Tables 3 and 4) and table5
(Table 5), or table2_lm for GPT-2 (arXiv v1 Table 2; both models fine-tuned on WikiText-2 first, as v1
did: FINETUNED): each notebook through papermill into
<root>/<preset>/<notebook>/, every sweep cached in <root>/results. Run again after an interruption,
it skips the notebooks that finished (runs.csv) and resumes the others from the cache. Last, it
writes report.md and report.html (self-contained, the figures inline): per preset and table, the
paper's rows beside this run's (bildlib.analysis.reported), with the device, engine, dtype and code
state. --dry runs the whole path on the dry run's random models of the checkpoints' shapes
(paper.dryrun): its numbers mean nothing, its report renders.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT, data
from bildlib.experiments import presets
from bildlib.experiments.paper import dryrun
from bildlib.experiments.paper.report import write_report
from bildlib.models.load import resolve_device

ENC_DEC = dryrun.PAPER  # the mT5 and T5 presets
PAPER_GRID = {"fallbacks": [], "rollbacks": []}  # empty: the preset's own grid, the paper's
NOTEBOOKS = {
    "fig4": PAPER_GRID | {"student": "no"},
    "fig2": {},  # the oracle's thresholds: the notebook's own
    "fig5": PAPER_GRID,  # the ablations over the preset's grid
    "fig8": PAPER_GRID,  # FLOPs and memory operations counted on the checkpoints' shapes
    "table3": PAPER_GRID,
    "table5": PAPER_GRID,
    # arXiv v1 Table 2 as v1 ran it: perplexity over 512-token chunks (windows that do not overlap),
    # fallback-only BiLD at v1's α_FB grid
    "table2_lm": {"window": 512, "stride": 512, "fallbacks": [0.01, 0.02, 0.05, 0.1, 0.2]},
}
# arXiv v1 fine-tuned both GPT-2 models on WikiText-2 (5 epochs) before Table 2: so does make reproduce,
# into <root>/<preset>/finetuned/<model>/ (bildlib.train.gpt2, resumable), and table2_lm reads those
FINETUNED = {"wikitext2-gpt2"}
CELL_TIMEOUT = 6 * 3600  # seconds a cell may run (the largest sweep of a preset, on a T4-class GPU)


def notebooks_of(preset: str) -> list[str]:
    return ["table2_lm"] if preset in presets.DECODER_ONLY else [nb for nb in NOTEBOOKS if nb != "table2_lm"]


def missing(preset: str) -> list[str]:
    """What a run of preset needs and cannot have here: each checkpoint neither in a folder nor in
    the Hugging Face cache with the hub unreachable, and a dataset that does not load."""
    from bildlib.data import hub
    from bildlib.models.load import locate

    p, out = presets.get(preset), []
    reachable = not hub._offline() and hub.hub_reachable()
    for which in ("small", "aligned", "large"):
        name = getattr(p, which)
        if name is None or Path(locate(name)).is_dir() or reachable:
            continue
        from huggingface_hub import try_to_load_from_cache

        if not isinstance(try_to_load_from_cache(name, "config.json"), str):
            out.append(f"{which} model {name} (not cached, and the hub is not reachable)")
    try:
        data.load(p.dataset, "val", 1)
    except (
        data.DataError,
        OSError,
        ValueError,
        RuntimeError,
    ) as e:  # DatasetUnavailableError: a RuntimeError
        out.append(f"dataset {p.dataset}: {e}")
    return out


def plan_text(names: list[str], device: str, n: int | None) -> str:
    from bildlib.experiments import preflight

    lines = []
    for name in names:
        if name in presets.DECODER_ONLY:
            lines.append(f"plan for preset {name}: table2_lm (perplexity and generation); no projection")
            continue
        lines.append(preflight.describe(preflight.plan(name, device, n_examples=n or 100)))
        if not n:
            lines.append("  n: all of validation (the projection above is per 100 sentences)")
    return "\n".join(lines)


def _done(root: Path) -> set[tuple[str, str]]:
    f = root / "runs.csv"
    if not f.is_file():
        return set()
    t = pd.read_csv(f, keep_default_na=False)
    return set(zip(t.loc[t["error"] == "", "preset"], t.loc[t["error"] == "", "notebook"], strict=True))


def _record(root: Path, row: dict) -> None:
    f = root / "runs.csv"
    old = pd.read_csv(f, keep_default_na=False) if f.is_file() else pd.DataFrame()
    if len(old):
        old = old[~((old["preset"] == row["preset"]) & (old["notebook"] == row["notebook"]))]
    with data.atomic_path(f) as tmp:
        pd.concat([old, pd.DataFrame([row])], ignore_index=True).to_csv(tmp, index=False)


def run(root: Path, names: list[str], device: str, n: int | None, dry: bool = False,
        overrides: dict | None = None, in_process: bool = False) -> pd.DataFrame:  # fmt: skip
    """Every notebook of every preset in names, skipping those runs.csv records as finished."""
    root.mkdir(parents=True, exist_ok=True)
    env = dryrun.prepare(root / "stand-ins", names) if dry else {}
    done = _done(root)
    with dryrun.environment(env, 8 if dry and in_process else None):
        bad = {name: m for name in names if (m := missing(name))}
        if bad:
            lines = [f"  {name}: {'; '.join(m)}" for name, m in bad.items()]
            how = (
                "Run it where the Hugging Face Hub is reachable, or copy its cache (~/.cache/huggingface) "
                "here and set HF_HUB_OFFLINE=1 (docs/paper-checkpoints.md)."
            )
            raise SystemExit("make reproduce cannot run: it needs\n" + "\n".join(lines) + "\n" + how)
        for name in names:
            count = n or len(data.load(presets.get(name).dataset, "val"))
            for nb in notebooks_of(name):
                if (name, nb) in done:
                    print(f"{name:>14} {nb:>9}: finished before, kept", flush=True)
                    continue
                out = root / name / nb
                params = NOTEBOOKS[nb] | (overrides or {}).get(nb, {}) | {
                    "preset": name, "n_examples": count, "device": device, "out_dir": str(out),
                    "results_dir": str(root / "results")}  # fmt: skip
                t0, err = time.perf_counter(), ""
                try:
                    if name in FINETUNED and nb == "table2_lm":
                        params["checkpoints"] = finetuned(root, name, device, dry)
                    _execute(nb, params, out, in_process)
                except Exception as e:  # recorded; the report marks the notebook's tables missing
                    err = f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"
                _record(root, {"preset": name, "notebook": nb, "n": count, "device": device,
                               "seconds": round(time.perf_counter() - t0, 1), "error": err})  # fmt: skip
                print(f"{name:>14} {nb:>9}: {'ok' if not err else err[:200]}", flush=True)
    return pd.read_csv(root / "runs.csv", keep_default_na=False)


def finetuned(root: Path, name: str, device: str, dry: bool) -> dict:
    """The preset's small and large models fine-tuned on its dataset as v1 did (train.gpt2; a run
    that finished before is kept), as table2_lm's checkpoints. The dry run's: 1 epoch on 2 blocks."""
    from bildlib.train import gpt2

    cfg = gpt2.FinetuneConfig()
    if dry:  # random models on the fixture's few paragraphs: the path, not the result
        cfg = gpt2.FinetuneConfig(epochs=1, block=32, batch=2, max_blocks=2)
    p, out = presets.get(name), {}
    for which in ("small", "large"):
        path = root / name / "finetuned" / getattr(p, which)
        log = gpt2.finetune(getattr(p, which), path, cfg, device)
        best = log["epochs"][log["best"] - 1]
        print(f"{name:>14} fine-tuned {getattr(p, which)}: epoch {log['best']} of {cfg.epochs}, val "
              f"perplexity {best['val_perplexity']:.2f} ({path})", flush=True)
        out[which] = str(path)
    return out


def _execute(nb: str, params: dict, out: Path, in_process: bool) -> None:
    if in_process:  # the notebook's own cells in this process (the dry run's fast path)
        dryrun.execute(nb, params)
        return
    import papermill

    out.mkdir(parents=True, exist_ok=True)
    papermill.execute_notebook(str(REPO_ROOT / "notebooks" / f"{nb}.ipynb"), str(out / f"{nb}.ipynb"),
                               parameters=params, cwd=str(REPO_ROOT), progress_bar=False,
                               execution_timeout=CELL_TIMEOUT)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The command line of `python -m bildlib.experiments.paper.reproduce` (make reproduce's)."""
    every = ENC_DEC + dryrun.LM_PAPER
    ap = argparse.ArgumentParser(prog="python -m bildlib.experiments.paper.reproduce",
                                 description=__doc__.splitlines()[0])  # fmt: skip
    ap.add_argument("--presets", nargs="+", default=every, choices=every)
    ap.add_argument("--device", default="auto", help="the notebooks' device: cuda, cpu or auto")
    ap.add_argument("--n", type=int, default=0, help="examples per configuration; 0: all of validation")
    ap.add_argument("--root", type=Path, default=REPO_ROOT / "build" / "reproduction")
    ap.add_argument("--dry", action="store_true", help="offline, on random models of the checkpoints' shapes")
    ap.add_argument("--fast", action="store_true", help="with --dry: the dry run's small grids (test-e2e)")
    ap.add_argument("--in-process", action="store_true",
                    help="with --dry: the notebooks' cells in this process, outputs capped (make test)")
    ap.add_argument("--plan", action="store_true", help="print the plan and stop")
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    a = ap.parse_args(argv)
    if a.n < 0:
        ap.error(f"--n must be 0 (all of validation) or more, got {a.n}")
    if (a.fast or a.in_process) and not a.dry:
        ap.error("--fast and --in-process are the dry run's fast paths: give --dry with them")
    if a.dry and not a.n:
        a.n = 2
    device = str(resolve_device("auto")) if a.device == "auto" else a.device  # auto: as the notebooks take it
    print(plan_text(a.presets, device, a.n or None), flush=True)
    if a.plan:
        return 0
    fast = {nb: dryrun.NOTEBOOKS[nb] for nb in NOTEBOOKS} if a.fast else None
    runs = run(a.root, a.presets, a.device, a.n or None, a.dry, overrides=fast, in_process=a.in_process)
    md, html = write_report(a.root, a.presets, runs, dry=a.dry)
    print(f"report: {md}\n        {html}")
    return 1 if (runs["error"] != "").any() else 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    raise SystemExit(main())
