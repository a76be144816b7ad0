"""One release: the runs README quotes share one dtype (the default), or README says why for that
block with a "**dtype:** why" in the three lines above it; every run a block reads names its dtype."""

import json
import re

import pandas as pd

from bildlib.analysis import tables
from bildlib.analysis.targets import RUNS, dtype_choice
from bildlib.reports import readme
from conftest import REPO

WHY = re.compile(r"\*\*dtype:\*\* \w")
DTYPES = ("bfloat16", "float32")


def default_dtype(root=REPO) -> str:
    """The default as make bench decided it (the dtype block's rule), from the committed runs."""
    def read(f):
        checks = json.loads((root / f"{f}/peers_checks.json").read_text())
        return pd.read_csv(root / f"{f}/peers_all.csv"), checks

    runs = {k: read(f) for k, f in RUNS.items()}
    (b, cb), (f, cf) = runs["bfloat16"], runs["float32"]
    auto = dtype_choice(b, f, cb["baseline ms"], cf["baseline ms"])["auto_is_default"]
    return "bfloat16" if auto else "float32"


def dtypes_read(root, paths: list[str]) -> dict[str, set[str]]:
    """{file: the dtypes its run names} for each checks JSON or CSV a block read."""
    out = {}
    for p in dict.fromkeys(paths):
        f = root / p
        if p.endswith(".json"):
            text = json.dumps(json.loads(f.read_text()).get("dtype", ""))
        else:
            t = pd.read_csv(f)
            text = " ".join(map(str, t["dtype"].dropna().unique())) if "dtype" in t else ""
        out[p] = {d for d in DTYPES if re.search(rf"\b{d}\b", text)}
    return out


def blocks_and_dtypes(text: str, root=REPO) -> dict[str, dict[str, set[str]]]:
    """{block: {file: dtypes}}: each block of text rendered with its reads recorded."""
    out = {}
    for m in readme.BLOCK.finditer(text):
        tables.READ = []
        try:
            readme.BLOCKS[m["name"]](root)
            out[m["name"]] = dtypes_read(root, tables.READ)
        finally:
            tables.READ = None
    return out


def unexplained(text: str, found: dict, default: str) -> dict[str, dict]:
    """The blocks that quote a run in another dtype (or one naming none) with no "**dtype:** why"
    in the three lines above them."""
    bad = {}
    for m in readme.BLOCK.finditer(text):
        other = {p: d for p, d in found[m["name"]].items() if d != {default}}
        above = "\n".join(text[: m.start()].splitlines()[-3:])
        if (other or not found[m["name"]]) and not WHY.search(above):
            bad[m["name"]] = other or "reads no run that names its dtype"
    return bad


def test_readme_quotes_one_dtype_or_says_why():
    text = (REPO / "README.md").read_text()
    default = default_dtype()
    found = blocks_and_dtypes(text)
    assert found and all(found.values()), {k: v for k, v in found.items() if not v}
    assert not unexplained(text, found, default), f"blocks not in {default}, with no **dtype:** line above"


def test_the_dtype_check_sees_a_mixed_block():
    text = ("a\n<!-- report:x -->\nbody\n<!-- /report:x -->\n\nSome text. **dtype:** float32, because.\n"
            "<!-- report:y -->\nb\n<!-- /report:y -->\n")
    found = {"x": {"figures/a.csv": {"float32"}}, "y": {"figures/b.json": {"float32"}}}
    assert unexplained(text, found, "bfloat16") == {"x": {"figures/a.csv": {"float32"}}}
    assert unexplained(text, {"x": {}, "y": {}}, "bfloat16") == {"x": "reads no run that names its dtype"}
    assert not unexplained(text, {"x": {"f": {"bfloat16"}}, "y": {"f": {"float32", "bfloat16"}}}, "bfloat16")
