"""README's result blocks, generated from the committed CSVs and JSON: one source for every number.

README.md and docs/results.md (FILES) hold each block between `<!-- report:NAME -->` and
`<!-- /report:NAME -->`; BLOCKS maps NAME to the function that writes it from the files under a
root (the repository, or a copy a test edits). `python -m bildlib.reports` (make report) rewrites
the blocks in place; `--check` exits 1, naming the blocks, when a file differs from what the
committed CSVs and JSON give (the test suite checks the same). Nothing between the markers is
typed by hand.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

from bildlib import REPO_ROOT, data
from bildlib.analysis.tables import NOT_A_NUMBER, ReportError
from bildlib.reports import firstrun, release
from bildlib.reports.bench import ct2, ct2_fp32, peers, peers_val, peers_val_fp32
from bildlib.reports.paper import (
    early_exit,
    fig5,
    fig8,
    headline,
    latency,
    pair,
    table1,
    table5,
    tables34,
    tutorial,
)

BLOCK = re.compile(r"(<!-- report:(?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /report:(?P=name) -->)", re.S)


def _table2():
    from bildlib.bench import table2  # notebooks/table2_lm's tables (it imports torch: only when asked)

    return table2


def _bench():
    from bildlib.reports import bench  # it formats with this module's helpers

    return bench


def _quantbench():
    from bildlib.bench import quantbench

    return quantbench


def _smallmodels():
    from bildlib.bench import smallmodels  # notebooks/small_models' block (it imports torch: only when asked)

    return smallmodels


def _petstudy():
    from bildlib.reports import petstudy  # notebooks/pet's block

    return petstudy


def _gpu():
    from bildlib.bench.gpu import render  # the GPU check's files

    return render


def _exactness():
    from bildlib.reports import exactness  # make exactness's CSVs

    return exactness


def _anatomy():
    from bildlib.reports import anatomy  # bench.anatomy's CSVs

    return anatomy


def _claims():
    from bildlib.analysis import claims  # the paper's claims beside the committed runs

    return claims


def _batchbench():
    from bildlib.reports import batch  # it imports torch: only when asked

    return batch


BLOCKS: dict[str, Callable[[Path], str]] = {
    "headline": headline, "firstrun": firstrun.block,  # README
    "table1": table1, "fig5": fig5, "tables34": tables34, "table5": table5,
    "early-exit": early_exit, "peers": peers, "ct2": ct2,
    # docs/results.md
    "headline-point": lambda r: table1(r, "figures/full", "point", min_n=1014),
    "table1-point": lambda r: table1(r, rule="point"),
    "authors": lambda r: table1(r, "figures/authors"),
    "authors-point": lambda r: table1(r, "figures/authors", "point"),
    "latency": latency, "fig8": fig8, "peers-val": peers_val, "pair": pair,
    "peers-val-float32": peers_val_fp32, "ct2-float32": ct2_fp32,
    "ct2-int8": lambda r: ct2(r, "figures/peers/val-int8"),
    "dtype": lambda r: _bench().dtype_block(r), "targets": lambda r: _bench().summary_block(r),
    "targets-detail": lambda r: _bench().targets_block(r),  # docs/results.md
    "tutorial": tutorial,  # docs/teaching.md
    "table2-lm": lambda r: _table2().block(r), "lm-pair": lambda r: _table2().pair_block(r),
    "table2-lm-student": lambda r: _table2().block(r, "figures/lm-student"),  # docs/language-modelling.md
    "lm-targets": lambda r: _table2().targets_block(r),
    "batch": lambda r: _batchbench().block(r),  # docs/batching.md
    "batch-detail": lambda r: _batchbench().detail_block(r),
    "batch-exact": lambda r: _batchbench().exact_block(r),
    "students": lambda r: _smallmodels().block(r),  # docs/results.md
    "students-mixed": lambda r: _smallmodels().block(r, "figures/small_models/mixed"),
    "pet": lambda r: _petstudy().block(r),
    "quantized-all": lambda r: _quantbench().block(r),  # docs/quantization.md
    "int8-products": lambda r: _quantbench().products_block(r),
    "int8-frontier": lambda r: table1(r, "figures/int8/fig4-int8"),  # make fig4-int8
    "int8-frontier-float32": lambda r: table1(r, "figures/int8/fig4-float32"),
    "gpu-check": lambda r: _gpu().block(r),  # docs/engines-gpu.md
    "gpu-static": lambda r: _gpu().static_block(r),
    "exactness": lambda r: _exactness().block(r),  # docs/row-invariance.md
    "native-calls": lambda r: _bench().calls_block(r),
    "native-calls-float32": lambda r: _bench().calls_block(r, "figures/engines/calls-native-float32.csv"),
    "native-calls-int8": lambda r: _bench().calls_block(r, "figures/engines/calls-native-int8.csv"),
    "anatomy": lambda r: _anatomy().block(r),  # docs/engines-cpu.md
    "release": lambda r: release.block(r, off_release(r), docs_off_release(r)),  # README
    "claims": lambda r: _claims().block(r),  # README
}  # fmt: skip


def reads(text: str, root: Path) -> dict[str, list[str]]:
    """{block: the paths its rendering read (analysis.tables.READ)} for each block of text but the
    release line, which quotes no run, only make release's minutes."""
    from bildlib.analysis import tables

    out, prev = {}, tables.READ
    try:
        for m in BLOCK.finditer(text):
            if m["name"] != "release":
                tables.READ = []
                BLOCKS[m["name"]](root)
                out[m["name"]] = tables.READ
    finally:
        tables.READ = prev
    return out


def off_release(root: Path, file: str = "README.md") -> list[str]:
    """The blocks of `file` that quote a run made at another code state than the last release's (or
    one from before runs recorded their code state)."""
    code = release.rows(root)["code"].iloc[-1]
    return [name for name, paths in reads((root / file).read_text(), root).items()
            if set(release.codes_read(root, paths).values()) != {code}]  # fmt: skip


def docs_off_release(root: Path) -> dict[str, list[str]]:
    """{doc: its blocks off the release} for the docs make report writes (README aside)."""
    docs = [f for f in FILES if f != "README.md" and (root / f).is_file()]
    return {f: off for f in docs if (off := off_release(root, f))}


def unnamed_runs(root: Path = REPO_ROOT) -> list[str]:
    """One line for each run (a `*_checks.json`) that a block of FILES quotes, naming no code state
    (notebook.code_state). Model cards and a GPU check's machine.json describe no run of a notebook."""
    out = []
    for f in FILES:
        for name, paths in reads((root / f).read_text(), root).items():
            codes = release.codes_read(root, paths)
            out += [f"{f}, block {name!r}: {p} names no code state (a run made outside its make "
                    f"target?); rerun it with its make target" for p, code in codes.items()
                    if code == "none" and p.endswith("_checks.json")]  # fmt: skip
    return out


# the files whose blocks make report writes
FILES = ("README.md", "docs/results.md", "docs/teaching.md", "docs/language-modelling.md", "docs/batching.md",
         "docs/engines-cpu.md", "docs/row-invariance.md", "docs/engines-gpu.md", "docs/quantization.md")


def render(text: str, root: Path = REPO_ROOT) -> str:
    """text with every block regenerated from the files under root; an unknown block is an error."""

    def one(m: re.Match) -> str:
        name = m["name"]
        if name not in BLOCKS:
            raise ValueError(f"README block {name!r} has no generator in bildlib.reports.readme.BLOCKS")
        body = _block(name, root)
        if bad := NOT_A_NUMBER.search(body):  # a value no check above caught: never print it
            raise ReportError(f"block {name!r} would show {bad[0]!r}: a file it reads holds a NaN or "
                              f"an infinity ({body[max(0, bad.start() - 60) : bad.end() + 20]!r})")
        return m.group(1) + body + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def _block(name: str, root: Path) -> str:
    """One block's text; an error no check caught (a value of the wrong kind met by a format or a
    sum) becomes a ReportError naming the files the block read."""
    from bildlib.analysis import tables

    before, tables.READ = tables.READ, []
    try:
        return BLOCKS[name](root).rstrip()
    except ReportError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        files = ", ".join(dict.fromkeys(tables.READ)) or "no file"
        raise ReportError(f"block {name!r} (from {files}): {type(e).__name__}: {e}; a file holds a value "
                          "of the wrong kind, or lacks one: rerun what writes it") from e  # fmt: skip
    finally:
        if before is not None:
            before.extend(tables.READ)
        tables.READ = before


def stale(text: str, root: Path = REPO_ROOT) -> list[str]:
    """The names of the blocks of text that differ from what the files under root give."""
    return _differ(text, render(text, root))


def _differ(text: str, rendered: str) -> list[str]:
    new = {m["name"]: m["body"] for m in BLOCK.finditer(rendered)}
    return [m["name"] for m in BLOCK.finditer(text) if new[m["name"]] != m["body"]]


def check(root: Path = REPO_ROOT, files_root: Path | None = None) -> dict[str, list[str]]:
    """{file: its stale blocks} for each of FILES (read under files_root, default root) whose blocks
    differ from what the CSVs and JSON under root give; empty when everything matches."""
    out = {}
    for name in FILES:
        if bad := stale((files_root or root).joinpath(name).read_text(), root):
            out[name] = bad
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.reports", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check: exit 1 if a block is stale")
    ap.add_argument("--root", type=Path, default=REPO_ROOT, help="the repository (its FILES and figures)")
    a = ap.parse_args(argv)
    bad = 0
    try:
        rendered = {name: render((a.root / name).read_text(), a.root) for name in FILES}
    except (ReportError, FileNotFoundError) as e:
        print(f"make report: {e}", file=sys.stderr)
        return 2
    if unnamed := unnamed_runs(a.root):
        print("make report: " + "\n".join(unnamed), file=sys.stderr)
        return 2
    for name in FILES:
        path = a.root / name
        text = path.read_text()
        if a.check:
            if stale_blocks := _differ(text, rendered[name]):
                print(f"{name}: stale block(s) {', '.join(stale_blocks)}: run make report", file=sys.stderr)
                bad = 1
            continue
        with data.atomic_path(path) as tmp:
            tmp.write_text(rendered[name])
        print(f"{name}: {len(BLOCK.findall(text))} blocks regenerated")
    if a.check and not bad:
        print(f"{', '.join(FILES)}: every block matches the committed files")
    return bad


if __name__ == "__main__":
    sys.exit(main())
