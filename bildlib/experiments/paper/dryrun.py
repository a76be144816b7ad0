"""The reviewer's path, offline: every paper preset through every notebook that accepts it, on
random models of the checkpoints' shapes (paper.shapes, at reduced width) and datasets in the
hub's schema (paper.fixtures), n = 2, on the CPU (or --device cuda: make gpu-check), with the lean
and the HF engine.

    python -m bildlib.experiments.paper.dryrun             # make paper-dryrun; everything under build/dryrun/
    python -m bildlib.experiments.paper.dryrun --presets cnndm-t5 --notebooks fig4 --papermill
    python -m bildlib.experiments.paper.dryrun --covering  # the subset make test-e2e runs (`covering`)

What runs is the notebooks' own code, through the same Preset, Models, engine selection, sweep,
analysis and plotting a reviewer's run goes through. Only the inputs are stand-ins: $BILD_MODELS
points the hub ids at the random models, $BILD_HUB_DATA the datasets at the fixtures, and
HF_HUB_OFFLINE=1 keeps everything off the network. Random models rarely write EOS, so each
preset's max_new_tokens is capped (`cap`) for the run. By default the cells run in this process
(one import of torch for the whole matrix); --papermill runs each notebook in its own kernel, as
`papermill` on the command line does (slower; the cap then does not apply).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import time
import traceback
from pathlib import Path

import pandas as pd

from bildlib import REPO_ROOT
from bildlib.experiments import presets
from bildlib.experiments.paper import fixtures, shapes

# the paper's hub presets: encoder-decoder ones through every notebook but table2_lm, the
# decoder-only one (arXiv v1 Table 2, GPT-2 on WikiText-2) through table2_lm alone
PAPER = [p for p in presets.PRESETS if p != "multi30k" and p not in presets.DECODER_ONLY]
LM_PAPER = [p for p in presets.DECODER_ONLY if p != "multi30k-lm"]
GRID = {"fallbacks": [0.6], "rollbacks": [2.0]}
CELL_TIMEOUT = 900  # seconds a cell may run under --papermill (a hang fails, the cell named)
# Each notebook that takes a paper preset, with a grid small enough for n = 2 (fig6 / fig7 are
# early exit, which runs on multi30k only: they refuse a paper preset, which the tests check).
NOTEBOOKS = {
    "fig4": GRID,
    "fig2": {"thresholds": [0.0, 0.5]},
    "fig5": GRID | {"windows": [3]},
    "fig10": GRID,
    "latency_scatter": GRID,
    "fig9": {"fallback": 0.6, "rollback": 2.0, "n_shown": 1},
    "fig8": GRID | {"fallback": 0.6, "rollback": 2.0},
    "table3": GRID | {"windows": [3], "seeds": [0]},  # several seeds: table5 here, table3 in test_notebooks
    "table5": {"fallbacks": [0.6], "rollbacks": [2.0], "seeds": [0, 1]},
    "peers": {"fallbacks": [0.6], "rollbacks": [2.0], "assisted": [[3, 0.2]], "tolerance": 100.0},
    "table2_lm": {"fallbacks": [0.6], "rollbacks": [2.0], "windows": [3], "window": 16, "stride": 8},
}
ENGINES = {"fig4": ("auto", "hf")}  # the HF engine too, where the lean one runs by default


def takes(preset: str) -> list[str]:
    """The notebooks a paper preset runs through."""
    lm = preset in presets.DECODER_ONLY
    return [nb for nb in NOTEBOOKS if (nb == "table2_lm") == lm]


def matrix(names: list[str] = PAPER + LM_PAPER, notebooks=tuple(NOTEBOOKS)) -> list[tuple[str, str]]:
    """Every (preset, notebook) of names x notebooks that the preset takes."""
    return [(p, nb) for p in names for nb in notebooks if nb in takes(p)]


def covering() -> list[tuple]:
    """The covering dry run (make test-e2e, make gpu-check): each notebook on one mT5 translation
    preset and one T5 summarization preset (alternating within each pair), fig4 on every preset (and on the HF
    engine for one preset of each family), and table2_lm on GPT-2. Every notebook meets both
    model families and both tasks, and every preset loads its models and data: the presets of a
    family differ only in their dataset and checkpoint ids."""
    by_metric: dict = {}
    for p in PAPER:
        by_metric.setdefault(presets.get(p).metric, []).append(p)
    plan = [(p, "fig4", "auto") for p in PAPER]
    plan += [(family[0], "fig4", "hf") for family in by_metric.values()]  # HF's forward, once a family
    for i, nb in enumerate(nb for nb in NOTEBOOKS if nb not in ("fig4", "table2_lm")):
        plan += [(family[i % len(family)], nb) for family in by_metric.values()]
    return plan + [(p, "table2_lm") for p in LM_PAPER]


def prepare(root: Path, names: list[str] = PAPER + LM_PAPER) -> dict:
    """The stand-ins under root (built once; a second call reuses them) and the environment that
    points the presets at them."""
    models, hub_data = root / "models", root / "hub-data"
    shapes.mirror(models, names, shapes.Scale(), fixtures.words())
    if not (hub_data / ".complete").is_file():
        fixtures.write(hub_data)
        (hub_data / ".complete").write_text("")
    return {
        "BILD_MODELS": str(models), "BILD_HUB_DATA": str(hub_data), "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": str(root / "hf-home"),
    }  # fmt: skip


@contextlib.contextmanager
def environment(env: dict, cap: int | None):
    """env set and every paper preset's max_new_tokens capped at `cap`, undone on exit."""
    old_env = {k: os.environ.get(k) for k in env}
    old = dict(presets.PRESETS)
    os.environ.update(env)
    if cap:
        for k in PAPER + LM_PAPER:
            presets.PRESETS[k] = dataclasses.replace(old[k], max_new_tokens=min(cap, old[k].max_new_tokens))
    try:
        yield
    finally:
        presets.PRESETS.update(old)
        for k, v in old_env.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def execute(name: str, params: dict) -> None:
    """notebooks/<name>.ipynb's code cells in this process, params after the parameters cell
    (what papermill's injected cell does)."""
    nb = json.loads((REPO_ROOT / "notebooks" / f"{name}.ipynb").read_text())
    ns: dict = {"__name__": "__main__"}
    for c in nb["cells"]:
        if c["cell_type"] != "code":
            continue
        src = "".join(c["source"])
        if "parameters" in c.get("metadata", {}).get("tags", []):
            src += "\n" + "\n".join(f"{k} = {v!r}" for k, v in params.items())
        exec(compile(src, f"notebooks/{name}.ipynb", "exec"), ns)


def run(root: Path, names: list[str] = PAPER + LM_PAPER, notebooks: list[str] = tuple(NOTEBOOKS), cap=8,
        use_papermill: bool = False, n_examples: int = 2, engines: dict = ENGINES,
        plan: list[tuple] | None = None, device: str = "cpu") -> pd.DataFrame:  # fmt: skip
    """Every (preset, notebook, engine) of plan (default: names x notebooks); one row each:
    seconds, and the error where one stopped it, each on `device`. A plan's (preset, notebook) runs on each of
    `engines[notebook]`, a (preset, notebook, engine) on that engine only."""
    plan = plan or matrix(names, notebooks)
    env = prepare(root, list(dict.fromkeys(item[0] for item in plan)))
    rows = []
    with environment(env, None if use_papermill else cap):
        for preset, nb, *only in plan:
            for engine in only or engines.get(nb, ("auto",)):
                out = root / "figures" / preset / (nb if engine == "auto" else f"{nb}-{engine}")
                params = NOTEBOOKS[nb] | {
                    "preset": preset, "n_examples": n_examples, "device": device, "engine": engine,
                    "threads": 2, "out_dir": str(out), "results_dir": str(root / "results"),
                }  # fmt: skip
                t0, err = time.perf_counter(), ""
                try:
                    if use_papermill:
                        import papermill

                        out.mkdir(parents=True, exist_ok=True)
                        papermill.execute_notebook(
                            str(REPO_ROOT / "notebooks" / f"{nb}.ipynb"), str(out / f"{nb}.ipynb"),
                            parameters=params, cwd=str(REPO_ROOT), progress_bar=False,
                            execution_timeout=CELL_TIMEOUT)  # fmt: skip
                    else:
                        execute(nb, params)
                    if not list(out.glob("*.png")) or not list(out.glob("*_checks.json")):
                        raise RuntimeError(f"{nb} wrote no figure or no checks into {out}")
                except Exception as e:  # recorded: the table names every failure
                    err = f"{type(e).__name__}: {e}"
                    traceback.print_exc()
                rows.append({"preset": preset, "notebook": nb, "engine": engine,
                             "seconds": round(time.perf_counter() - t0, 1), "error": err})  # fmt: skip
                print(f"{preset:>14} {nb:>15} {engine:>4}: {'ok' if not err else err[:200]}", flush=True)
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.experiments.paper.dryrun",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=REPO_ROOT / "build" / "dryrun", help="where everything goes")
    ap.add_argument("--presets", nargs="+", default=PAPER + LM_PAPER, choices=PAPER + LM_PAPER)
    ap.add_argument("--notebooks", nargs="+", default=list(NOTEBOOKS), choices=list(NOTEBOOKS))
    ap.add_argument("--cap", type=int, default=8, help="max_new_tokens of every preset for the run")
    ap.add_argument("--device", default="cpu", help="the notebooks' device parameter (cpu, cuda)")
    ap.add_argument("--papermill", action="store_true", help="each notebook in its own kernel (no cap)")
    ap.add_argument("--covering", action="store_true",
                    help="only the covering subset (make test-e2e): each notebook on both families and tasks")
    a = ap.parse_args(argv)
    plan = covering() if a.covering else matrix(a.presets, a.notebooks)
    t = run(a.root, cap=a.cap, use_papermill=a.papermill, plan=plan, device=a.device)
    t.to_csv(a.root / "dryrun.csv", index=False)
    bad = t[t["error"] != ""]
    print(f"{len(t) - len(bad)} of {len(t)} runs passed in {t['seconds'].sum():.0f} s")
    print(f"every run: {a.root / 'dryrun.csv'}")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    raise SystemExit(main())
