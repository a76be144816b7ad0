"""Every checks file names the commit its run ran from and the machine (notebook.save_checks)."""

import json
import re
import subprocess

from bildlib import notebook
from conftest import REPO


def test_commit_names_head_and_changes(tmp_path):
    assert re.fullmatch(r"[0-9a-f]{12}(\+changes)?", notebook.commit(REPO))
    assert notebook.commit(tmp_path) == "unknown"  # not a git checkout (an installed wheel's run)
    repo = tmp_path / "r"
    (repo / "bildlib").mkdir(parents=True)
    (repo / "bildlib" / "x.py").write_text("a = 1\n")
    for d in ("kernels", "notebooks"):
        (repo / d).mkdir()
        (repo / d / "k.py").write_text("")
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    head = head.stdout.strip()
    assert notebook.commit(repo) == head
    (repo / "figures").mkdir()
    (repo / "figures" / "a.csv").write_text("x\n")  # outputs are not code: still the clean commit
    assert notebook.commit(repo) == head
    code = notebook.code_state(repo)
    (repo / "docs.md").write_text("more\n")  # a commit of docs only: another commit, the same code
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "docs"], check=True)
    assert notebook.commit(repo) != head and notebook.code_state(repo) == code
    (repo / "bildlib" / "x.py").write_text("a = 2\n")
    assert notebook.commit(repo).endswith("+changes") and notebook.code_state(repo) == code + "+changes"
    subprocess.run([*git, "commit", "-qam", "code"], check=True)
    assert re.fullmatch(r"[0-9a-f]{12}", notebook.code_state(repo)) and notebook.code_state(repo) != code
    assert notebook.code_state(tmp_path) == "unknown"


def test_save_checks_adds_the_commit_and_the_machine(tmp_path, capsys):
    notebook.save_checks({"n": 3} | notebook.run_fields("float32", "lean"), "demo", tmp_path)
    c = json.loads((tmp_path / "demo_checks.json").read_text())
    assert c["n"] == 3 and c["commit"] == notebook.commit() and "torch" in c["machine"]
    assert c["code"] == notebook.code_state()
    assert c["dtype"] == "float32" and c["engine"] == "lean" and c["device"]
    assert "checks saved to" in capsys.readouterr().out


def test_save_checks_refuses_a_run_that_names_no_dtype(tmp_path):
    import pytest

    with pytest.raises(ValueError, match="demo's checks must name the run's engine, device"):
        notebook.save_checks({"n": 3, "dtype": "float32"}, "demo", tmp_path)
    assert not (tmp_path / "demo_checks.json").exists()
