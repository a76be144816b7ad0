"""bildlib installs as one package; its kernels import only as bildlib.kernels."""

import importlib.util
import os
from pathlib import Path

import pytest

from conftest import REPO, run_python, run_together


def test_imports_work_from_the_repo_root():
    # From the checkout's root, `kernels/` is on sys.path as a top-level name: transformers'
    # probe for Hugging Face's `kernels` package finds it and must not be fooled.
    out = run_python(
        "import bildlib, bildlib.kernels, transformers.modeling_utils\n"
        "from transformers.utils import is_kernels_available\n"
        "import sys\n"
        "print(is_kernels_available(), 'kernels' in sys.modules, hasattr(bildlib.kernels, 'max_prob'))",
        cwd=REPO,
    ).stdout.split()
    # not available, yet probed (transformers imported our folder under the name `kernels`)
    assert out == ["False", "True", "True"]


def test_top_level_kernels_folder_is_inert():
    out = run_python(
        "import kernels, bildlib.kernels\n"
        "print(getattr(kernels, '__file__', None), hasattr(kernels, 'max_prob'), kernels is bildlib.kernels)",
        cwd=REPO,
    ).stdout.split()
    assert out == ["None", "False", "False"]


def test_install_exposes_no_top_level_kernels(tmp_path):
    out = run_python(
        "import importlib.util, bildlib.kernels\n"
        "print(importlib.util.find_spec('kernels'), bildlib.kernels.__file__)",
        cwd=tmp_path,
    ).stdout.split()
    assert out[0] == "None"
    assert out[1] == str(REPO / "kernels" / "__init__.py")


def test_kernels_import_without_triton(tmp_path):
    out = run_python(
        "import sys; sys.modules['triton'] = None  # what an environment without Triton sees\n"
        "import torch, bildlib.kernels as k\n"
        "p, i = k.max_prob(torch.tensor([[0.0, 2.0, 1.0]]))\n"
        "print(k.HAS_TRITON, int(i), round(float(p), 4))",
        cwd=tmp_path,
    ).stdout.split()
    assert out == ["False", "1", "0.6652"]


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed here")
def test_kernels_import_with_triton(tmp_path):
    out = run_python("import triton, bildlib.kernels as k; print(k.HAS_TRITON)", cwd=tmp_path).stdout.split()
    assert out == ["True"]


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """A wheel built from a copy of the package's sources, installed into a fresh venv; deps come
    from this environment's site-packages on PYTHONPATH (.pth files there, such as an editable
    install's, are not read from PYTHONPATH, so only the wheel's bildlib is importable)."""
    import shutil
    import site
    import subprocess
    import sys
    import zipfile

    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in ("bildlib", "kernels"):
        shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(tmp / "dist"),
                    str(src)], check=True, capture_output=True)  # fmt: skip
    (whl,) = (tmp / "dist").glob("bildlib-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (purelib,) = venv.glob("lib/python*/site-packages")
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--target", str(purelib), str(whl)],
                   check=True)
    deps = os.pathsep.join(p for p in site.getsitepackages() if Path(p).is_dir())
    return {"names": zipfile.ZipFile(whl).namelist(), "python": str(venv / "bin" / "python"),
            "env": {**os.environ, "PYTHONPATH": deps}, "site": purelib}  # fmt: skip


def _in_venv(w, code: str, cwd: Path, **env) -> list[str]:
    import subprocess

    proc = subprocess.run([w["python"], "-c", code], cwd=cwd, env={**w["env"], **env}, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    return proc.stdout.strip().splitlines()


def test_the_wheel_holds_every_subpackage_and_its_data(wheel_venv):
    names = wheel_venv["names"]
    packages = sorted(str(p.parent.relative_to(REPO)) for p in (REPO / "bildlib").rglob("__init__.py"))
    for pkg in packages:
        assert f"{pkg}/__init__.py" in names, f"the wheel lacks {pkg}"
    assert "bildlib/kernels/triton_policy.py" in names and not any(n.startswith("kernels/") for n in names)
    for f in ("bildlib/experiments/paper/shapes.json", "bildlib/kernels/cpu_t5.cpp",
              "bildlib/kernels/cpu_draft.h", "bildlib/kernels/cpu_policy.h",
              "bildlib/notebook/jupyter_config/labconfig/page_config.json"):
        assert f in names, f"the wheel lacks {f}"
    assert len(packages) >= 10  # found, not listed


def test_the_installed_wheel_imports_every_module(wheel_venv, tmp_path):
    code = (
        "import importlib, pathlib, bildlib\n"
        "root = pathlib.Path(bildlib.__file__).parent\n"
        "print(root)\n"
        "for f in sorted(root.rglob('*.py')):\n"
        "    parts = f.relative_to(root.parent).with_suffix('').parts\n"
        "    if parts[-1] == '__main__':\n"
        "        continue\n"
        "    importlib.import_module('.'.join(parts[:-1] if parts[-1] == '__init__' else parts))\n"
        "    print('.'.join(parts))\n"
        "import importlib.util; print('top-level kernels:', importlib.util.find_spec('kernels'))\n"
    )
    out = _in_venv(wheel_venv, code, tmp_path)
    assert out[0] == str(wheel_venv["site"] / "bildlib")  # the wheel's copy, not the checkout's
    assert "bildlib.bench.gpu.check" in out and "bildlib.kernels.triton_policy" in out and len(out) > 100
    assert out[-1] == "top-level kernels: None"


def test_the_installed_wheel_finds_the_checkout_or_says_where_to_look(wheel_venv, tmp_path):
    """Five fresh interpreters of the wheel's venv, side by side (conftest.run_together)."""
    code = "import bildlib; print(bildlib.REPO_ROOT); print(bildlib.where())"
    load = ("from bildlib.models import locate\n"
            "try:\n    locate('data/checkpoints/multi30k-large')\n"
            "except FileNotFoundError as e:\n    print(e)")
    found = load.replace("except", "    print('found')\nexcept")
    runs = [(code, REPO / "notebooks", {}),  # run from a clone: its data
            (code, tmp_path, {"BILD_HOME": str(REPO)}), (code, tmp_path, {}), (load, tmp_path, {}),
            (found, tmp_path, {"BILD_HOME": str(REPO)})]  # fmt: skip
    w = wheel_venv
    procs = run_together([{"args": [w["python"], "-c", c], "cwd": d, "env": w["env"] | e}
                          for c, d, e in runs])
    for proc in procs:
        assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    inside, home, nowhere, (err,), found = (p.stdout.strip().splitlines() for p in procs)
    assert inside == [str(REPO),
                      f"shipped files are read from {REPO} (the checkout holding the working directory)"]
    assert home == [str(REPO), f"shipped files are read from {REPO} ($BILD_HOME)"]
    assert "found no checkout" in nowhere[1] and "BILD_HOME" in nowhere[1]
    assert "cannot load model 'data/checkpoints/multi30k-large'" in err and "BILD_HOME" in err
    assert found == ["found"]


def test_dependencies_are_ranges_and_constraints_pin_them():
    """pyproject.toml states compatible ranges (installable next to other projects); the tested
    versions are pinned in constraints.txt, which make setup installs with, and satisfy them."""
    import tomllib
    from packaging.requirements import Requirement

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for extra in project["optional-dependencies"].values() for r in extra]
    pins = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("_", "-")] = version
    for r in reqs:
        assert not any(s.operator == "==" for s in r.specifier), f"{r}: pin versions in constraints.txt"
        assert any(s.operator == ">=" for s in r.specifier), f"{r}: state the lowest version that works"
        pinned = pins.get(r.name.lower().replace("_", "-"))
        assert pinned and r.specifier.contains(pinned), f"{r}: constraints.txt pins {pinned}"
    assert "-c constraints.txt" in (REPO / "Makefile").read_text()


def test_committed_results_name_no_machine_paths():
    """Files under data/ and figures/ record paths relative to the checkout, never where it was."""
    import json
    import re

    import pandas as pd

    absolute = re.compile(r"(^|[\s\"'(=:])(/(home|root|work|tmp|Users|mnt|opt|var|private)/|[A-Z]:\\)")
    checked = 0
    for folder in ("data", "figures"):
        for f in sorted((REPO / folder).rglob("*")):
            if "results" in f.parts or f.suffix not in (".json", ".csv", ".md"):
                continue
            if f.suffix == ".json":
                texts = [s for s in _strings(json.loads(f.read_text()))]
            elif f.suffix == ".csv":
                texts = [str(v) for v in pd.read_csv(f).astype(str).to_numpy().ravel()]
            else:
                texts = f.read_text().splitlines()
            bad = [t for t in texts if absolute.search(t) or str(REPO) in t]
            assert not bad, f"{f.relative_to(REPO)} names a machine path: {bad[:3]}"
            checked += 1
    assert checked >= 10


def test_no_link_is_committed():
    """A symbolic link holds a path of the machine it was made on (and a link committed over a
    built folder replaces it, ignored files and all, on the next checkout)."""
    import subprocess

    proc = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    links = [line.split("\t", 1)[1] for line in proc.stdout.splitlines() if line.startswith("120000 ")]
    assert not links, f"committed symbolic links: {links}"


def _strings(o):
    if isinstance(o, dict):
        for k, v in o.items():
            yield k
            yield from _strings(v)
    elif isinstance(o, list):
        for v in o:
            yield from _strings(v)
    elif isinstance(o, str):
        yield o


def test_each_checkout_installs_its_own_jupyter_kernel(tmp_path):
    """make setup names the user's Jupyter kernel after the checkout's path, so a second clone
    installs its own and leaves the first one's pointing at the first one's venv (a shared name
    made the newest clone take over the kernel of every other)."""
    import shutil
    import subprocess

    def install_line(root: Path) -> str:
        out = subprocess.run(["make", "-n", "setup", "VENV=nowhere/venv"], cwd=root, capture_output=True,
                             text=True, check=True).stdout  # fmt: skip
        return next(ln for ln in out.splitlines() if "ipykernel install" in ln)

    other = tmp_path / "second clone"
    other.mkdir()
    for f in ("Makefile", "pyproject.toml", "constraints.txt"):
        shutil.copy(REPO / f, other / f)
    here, there = install_line(REPO), install_line(other)
    assert f'--display-name "bildlib ({REPO})"' in here and f'"bildlib ({other})"' in there
    name = lambda line: line.split("--name ")[1].split()[0]  # noqa: E731
    assert name(here).startswith("bildlib-") and name(here) != name(there)
