"""One release: the runs README quotes share one dtype (the default), or README says why for that
block with a "**dtype:** why" in the three lines above it; every run a block reads names its dtype."""

import json
import re

import pandas as pd
import pytest

from bildlib.analysis.targets import default_dtype
from bildlib.reports import readme, release
from conftest import REPO

WHY = re.compile(r"\*\*dtype:\*\* \w")
DTYPES = ("bfloat16", "float32")


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
    return {name: dtypes_read(root, reads) for name, reads in readme.reads(text, root).items()}


def unexplained(text: str, found: dict, default: str) -> dict[str, dict]:
    """The blocks that quote a run in another dtype (or one naming none) with no "**dtype:** why"
    in the three lines above them."""
    bad = {}
    for m in readme.BLOCK.finditer(text):
        if m["name"] not in found:
            continue
        other = {p: d for p, d in found[m["name"]].items() if d != {default}}
        above = "\n".join(text[: m.start()].splitlines()[-3:])
        if (other or not found[m["name"]]) and not WHY.search(above):
            bad[m["name"]] = other or "reads no run that names its dtype"
    return bad


def test_readme_quotes_one_dtype_or_says_why():
    text = (REPO / "README.md").read_text()
    default = default_dtype(REPO)
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


def test_readme_quotes_the_release_code_state_or_names_the_blocks_that_do_not():
    text = (REPO / "README.md").read_text()
    code = release.rows(REPO)["code"].iloc[-1]
    off = []
    for name, reads in readme.reads(text, REPO).items():
        codes = release.codes_read(REPO, reads)
        assert codes, f"README block {name} reads no run's checks JSON: its code state is unknown"
        if set(codes.values()) != {code}:
            off.append(name)
    assert off == readme.off_release(REPO)
    line = readme.BLOCKS["release"](REPO)
    assert all(f"`{b}`" in line for b in off) and (off or "Every block below" in line)


def test_codes_read_finds_each_csv_s_run(tmp_path):
    (tmp_path / "f").mkdir()
    for name, code in (("table5", "aaa"), ("fig4", "bbb")):
        (tmp_path / "f" / f"{name}_checks.json").write_text(json.dumps({"code": code}))
    assert release.codes_read(tmp_path, ["f/table5.csv"]) == {"f/table5_checks.json": "aaa"}
    # a JSON read from the folder names the run: the folder's other checks are not guessed at
    got = release.codes_read(tmp_path, ["f/table1.csv", "f/fig4_checks.json"])
    assert got == {"f/fig4_checks.json": "bbb"}
    (tmp_path / "f" / "old_checks.json").write_text("{}")
    assert release.codes_read(tmp_path, ["f/old.csv"]) == {"f/old_checks.json": "none"}


def test_release_records_each_target_once_per_code_state(tmp_path, monkeypatch):
    from bildlib import notebook

    state = {"code": "abc123"}
    monkeypatch.setattr(notebook, "code_state", lambda root=None: state["code"])
    (tmp_path / "figures").mkdir()
    (tmp_path / "data" / "results" / "p").mkdir(parents=True)
    assert not release.done("figures", tmp_path) and release.count(tmp_path) == 0
    before = release.count(tmp_path)
    (tmp_path / "data" / "results" / "p" / "k.parquet").write_bytes(b"x")
    (tmp_path / "data" / "results" / "p" / "j.partial.parquet").write_bytes(b"x")  # unfinished: not a result
    assert release.count(tmp_path) == 1
    release.record("figures", 125, before, tmp_path)
    t = release.rows(tmp_path)
    row = t.to_dict("records")[0]
    assert row | {"machine": ""} == {"target": "figures", "code": "abc123", "minutes": 2.1, "new_results": 1,
                                     "machine": ""} and "CPUs" in row["machine"]
    assert release.done("figures", tmp_path) and not release.done("bench", tmp_path)
    line = release.block(tmp_path, ["ct2"])
    assert "`abc123`" in line and "1 targets in 0 h 2 min (figures 2.1; minutes)" in line and "`ct2`" in line
    assert "In docs/" not in line
    line = release.block(tmp_path, [], {"docs/results.md": ["pet", "students"]})
    assert "Every block below" in line and "In docs/" in line and "results.md (pet, students)" in line
    state["code"] = "def456"  # new code: every target runs again
    assert not release.done("figures", tmp_path)
    state["code"] = "def456+changes"
    with pytest.raises(SystemExit, match="committed code only"):
        release.record("bench", 60, 0, tmp_path)
