"""The package's layout: a few subpackages by concept, each saying its job; no import circles
between modules or between subpackages; no module over 300 lines."""

import ast
import re
from pathlib import Path

from conftest import REPO

PKG = REPO / "bildlib"
MAX_LINES = 300
MAX_TOP = 12  # entries at the top of bildlib/: __init__.py and one folder per concept


def modules() -> dict[str, Path]:
    """{dotted name: file} for every module of bildlib, kernels/ as bildlib.kernels."""
    out = {}
    for root, prefix in ((PKG, "bildlib"), (REPO / "kernels", "bildlib.kernels")):
        for f in root.rglob("*.py"):
            parts = list(f.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = f
    return out


def imports(f: Path, name: str, known: set[str]) -> set[str]:
    """The bildlib modules f imports anywhere (a function's lazy import counts too), and the
    packages whose __init__ those imports run (other than f's own)."""
    is_pkg = f.name == "__init__.py"
    out = set()
    for node in ast.walk(ast.parse(f.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative
                here = name.split(".") if is_pkg else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        for t in targets:
            if not t.startswith("bildlib"):
                continue
            parts = t.split(".")
            for i in range(2, len(parts) + 1):  # bildlib.x, bildlib.x.y, ...: each __init__ runs
                m = ".".join(parts[:i])
                if m in known and m != name and not name.startswith(m + "."):
                    out.add(m)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(f, m, set(mods)) - {"bildlib"} for m, f in mods.items() if m != "bildlib"}


def test_no_import_circles_between_modules():
    assert not cycles(graph()), "modules that import each other (directly or round a circle)"


def test_no_import_circles_between_subpackages():
    def top(m):
        return ".".join(m.split(".")[:2])

    g = {}
    for m, deps in graph().items():
        g.setdefault(top(m), set()).update(top(d) for d in deps if top(d) != top(m))
    assert not cycles(g), "subpackages that import each other"


def test_the_checker_sees_a_circle_and_a_lazy_import(tmp_path):
    a = tmp_path / "a.py"
    a.write_text("def f():\n    from bildlib.x import b  # lazy\n")
    known = {"bildlib.x", "bildlib.x.b", "bildlib.a"}
    assert imports(a, "bildlib.a", known) == {"bildlib.x", "bildlib.x.b"}
    assert cycles({"p": {"q"}, "q": {"r"}, "r": {"p"}, "s": {"p"}}) == [["p", "q", "r"]]


def test_no_module_over_300_lines():
    long = {str(f.relative_to(REPO)): n for f in modules().values()
            if (n := len(f.read_text().splitlines())) > MAX_LINES}  # fmt: skip
    assert not long, f"modules over {MAX_LINES} lines: split them by concept"


def test_a_few_subpackages_each_saying_its_job():
    top = sorted(p.name for p in PKG.iterdir() if p.name != "__pycache__")
    assert len(top) <= MAX_TOP, f"bildlib/ holds {len(top)} entries: {top}"
    assert all((PKG / p).is_dir() for p in top if p != "__init__.py"), "a loose module at bildlib/'s top"
    for init in PKG.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and doc.splitlines()[0].strip(), f"{init.relative_to(REPO)} says nothing of its job"


PRODUCT = ["bildlib", "kernels", "notebooks", "course", "docs", ".ci"]  # and the files below
PRODUCT_FILES = ["README.md", "Makefile", "pyproject.toml", "setup.py", "environment.yml"]
TRACKER = re.compile(r"\bissues?\s*#?\s*\d+|\bissue-\d+|\bsessions?\b|\bthe issue\b", re.I)


def tracker_words(text: str) -> list[str]:
    return [m[0] for m in TRACKER.finditer(text)]


def test_no_tracker_or_session_words_in_the_product():
    files = [REPO / f for f in PRODUCT_FILES if (REPO / f).is_file()]
    files += [f for d in PRODUCT for f in (REPO / d).rglob("*") if f.is_file() and f.suffix in
              {".py", ".md", ".ipynb", ".json", ".yml", ".toml", ".txt", ""}
              and "__pycache__" not in f.parts]  # fmt: skip
    found = {str(f.relative_to(REPO)): w for f in files
             if (w := tracker_words(f.read_text(errors="replace")))}  # fmt: skip
    assert not found, "cite the paper, a doc or a commit instead"


def test_the_tracker_check_sees_what_it_should():
    assert tracker_words("as issue 29 quotes it; (Issue #30); issue-15 run; this session; the issue's") == [
        "issue 29", "Issue #30", "issue-15", "session", "the issue"]
    assert tracker_words("the paper's Table 2; commit 3541138; reissued 12 times") == []
