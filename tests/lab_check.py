"""make test-lab: the tutorial opened the way a student opens it. JupyterLab from the venv on
127.0.0.1, driven in a real browser (Debian's chromium, through Playwright's executable_path: no
browser is downloaded), Run → Run All Cells, then File → Save.

It asserts on the notebook as Lab holds it after the run (its model, read in the page): every
code cell ran, no cell raised, the inline figures are there. Then `git status` must be as before
(Lab saves the project's notebooks as git has them: bildlib.notebook.jupyter). The notebook's bytes are put
back at the end; the screenshots and the notebook with its outputs go to build/lab/.

Lab starts as make lab starts it (bildlib.notebook.jupyter.command), with no BILD_DATA_DIR, as when a user
types it: the data must be found in the repository. make test-lab runs it: `python tests/lab_check.py`."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "build" / "lab"
NOTEBOOK = "notebooks/tutorial.ipynb"
RUN_TIMEOUT_S = 600  # the whole Run All; the tutorial takes under a minute on 2 CPU cores
FIGURES = 2  # the tutorial's inline pictures: the trace of part 1 and the sweep of part 2


def chromium() -> str:
    path = os.environ.get("BILD_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        sys.exit("make test-lab needs Debian's chromium (apt-get install -y chromium), or BILD_CHROMIUM "
                 "set to a Chromium binary; Playwright's own browser downloads are not used")  # fmt: skip
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def start_lab(port: int, token: str, log) -> subprocess.Popen:
    from bildlib.notebook import jupyter

    env = jupyter.environment({k: v for k, v in os.environ.items() if k != "BILD_DATA_DIR"})
    cmd = jupyter.command("--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
                          f"--IdentityProvider.token={token}",  # news and update checks: off in command()
                          "--LabApp.expose_app_in_browser=True")  # window.jupyterapp: the notebook's model
    lab = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/status?token={token}", timeout=2)
            return lab
        except OSError:
            if lab.poll() is not None:
                sys.exit(f"JupyterLab exited with {lab.returncode}; its log is {log.name}")
            time.sleep(0.5)
    lab.terminate()
    sys.exit(f"JupyterLab did not answer on port {port} within 60 s; its log is {log.name}")


def menu(page, top: str, item: str) -> None:
    page.locator(".lm-MenuBar-itemLabel", has_text=top).first.click()
    page.locator(".lm-Menu-itemLabel").get_by_text(item, exact=True).first.click()


# the notebook as Lab's page holds it: its kernel's status and, for each code cell, whether it ran
# (an execution count), or raised. Read from the model, not from the toolbar's busy/idle indicator,
# which also goes busy and idle while the kernel starts, before a queued Run All has begun
PROGRESS = """() => {
  const w = window.jupyterapp.shell.currentWidget;
  const kernel = w.sessionContext.session?.kernel;
  const code = w.context.model.toJSON().cells.filter(c => c.cell_type === 'code');
  if (!window.seenStatus) {  // every status the kernel goes through, so that a restart is not missed
    window.seenStatus = [];
    w.sessionContext.statusChanged.connect((_, status) => window.seenStatus.push(status));
  }
  return {kernel: kernel ? kernel.connectionStatus + '/' + kernel.status : 'none', total: code.length,
          died: window.seenStatus.some(s => ['dead', 'restarting', 'autorestarting'].includes(s)),
          ran: code.filter(c => c.execution_count !== null).length,
          raised: code.some(c => (c.outputs || []).some(o => o.output_type === 'error'))};
}"""


def wait_for(page, done, timeout_s: float, what: str) -> dict:
    """Poll PROGRESS until done(progress) holds; exit naming what did not happen in time."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        progress = page.evaluate(PROGRESS)
        if done(progress):
            return progress
        if progress["died"]:
            page.screenshot(path=OUT / "kernel.png")
            sys.exit(f"the kernel died or restarted: {progress}; see {OUT / 'jupyterlab.log'}")
        time.sleep(0.5)
    page.screenshot(path=OUT / "timeout.png")
    sys.exit(f"{what} within {timeout_s:.0f} s; last seen {progress}; screenshot in {OUT / 'timeout.png'}")


def run_all(page, url: str) -> float:
    """Open the notebook, wait until its kernel is connected and idle, Run All Cells, wait until
    every code cell ran (or one raised: Lab stops there) and the kernel is idle again; the seconds
    the run took."""
    page.goto(url)
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=120_000)
    page.wait_for_function("() => window.jupyterapp?.shell.currentWidget?.sessionContext", timeout=120_000)
    wait_for(page, lambda p: p["kernel"] == "connected/idle", 120, "the kernel was not connected and idle")
    page.screenshot(path=OUT / "1-opened.png")
    t0 = time.perf_counter()
    menu(page, "Run", "Run All Cells")
    finished = lambda p: p["kernel"] == "connected/idle" and (p["ran"] == p["total"] or p["raised"])  # noqa: E731
    wait_for(page, finished, RUN_TIMEOUT_S, "Run All Cells did not finish")
    seconds = time.perf_counter() - t0
    page.screenshot(path=OUT / "2-ran.png")
    return seconds


def save(page, path: Path, before: float) -> None:
    menu(page, "File", "Save Notebook")
    for _ in range(120):
        if path.stat().st_mtime > before:
            return
        time.sleep(0.25)
    sys.exit(f"Lab did not save {path} within 30 s")


def check(ran: dict, seconds: float) -> list[str]:
    """What is wrong with the notebook after the run (nothing: an empty list)."""
    code = [c for c in ran["cells"] if c["cell_type"] == "code"]
    problems = [f"code cell {i} did not run" for i, c in enumerate(code) if c.get("execution_count") is None]
    for i, c in enumerate(code):
        for o in c.get("outputs", []):
            if o["output_type"] == "error":
                problems.append(f"code cell {i} raised {o['ename']}: {o['evalue']}")
    pictures = sum("image/png" in o.get("data", {}) for c in code for o in c.get("outputs", []))
    if pictures < FIGURES:
        problems.append(f"{pictures} inline figures, expected at least {FIGURES}")
    print(f"{len(code)} code cells ran in {seconds:.0f} s; {pictures} inline figures")
    return problems


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    path = REPO / NOTEBOOK
    original, before = path.read_bytes(), git_status()
    port, token = free_port(), secrets.token_hex(16)
    with open(OUT / "jupyterlab.log", "w") as log:
        lab = start_lab(port, token, log)
        try:
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                seconds = run_all(page, f"http://127.0.0.1:{port}/lab/tree/{NOTEBOOK}?token={token}")
                ran = page.evaluate("() => window.jupyterapp.shell.currentWidget.context.model.toJSON()")
                news = page.get_by_text("Jupyter news").count()  # Lab's first-start question, if it came
                save(page, path, path.stat().st_mtime)
                page.screenshot(path=OUT / "3-saved.png")
                browser.close()
            (OUT / "tutorial-ran.ipynb").write_text(json.dumps(ran, indent=1, ensure_ascii=False))
            problems = check(ran, seconds)
            if news:
                problems.append("Lab asked about Jupyter news over the tutorial")
            after = git_status()
            if after != before:
                problems.append(f"git status changed:\nbefore:\n{before}after:\n{after}")
        finally:
            lab.terminate()
            lab.wait(timeout=30)
            path.write_bytes(original)  # the working tree as it was: outputs never stay behind
    for p in problems:
        print("FAIL:", p)
    print("PASS: the tutorial runs in JupyterLab and leaves git clean" if not problems else "")
    return 1 if problems else 0


def log_tail(lines: int = 40) -> None:
    """The end of Lab's log on stdout: CI keeps only what the check printed."""
    log = OUT / "jupyterlab.log"
    if log.exists():
        print(f"--- the last {lines} lines of {log}:", *log.read_text().splitlines()[-lines:], sep="\n")


if __name__ == "__main__":
    rc = 1
    try:
        rc = main()
    finally:
        if rc:
            log_tail()
    sys.exit(rc)
