"""JupyterLab as `make lab` starts it: from this venv, on the checkout, with the project's notebooks
saved without their outputs.

Why the save hook: git's clean filter (nbstripout, installed by make setup) keeps outputs out of
commits, but git still lists a notebook saved with outputs as modified, because its size on disk
changed. So Lab saves the notebooks under notebooks/ as git has them: no outputs, no execution
counts, the cell ids kept. A run's figures and tables are in build/figures/<notebook>/. Notebooks
anywhere else keep their outputs.

    python -m bildlib.notebook.jupyter [jupyter lab options]      # make lab
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from bildlib import REPO_ROOT

# what nbstripout drops besides outputs and counts: what Lab writes about the kernel's Python. The
# Makefile's git filter (NBSTRIP) uses the same keys; a test holds the two together
LAB_WRITES = ("version", "codemirror_mode", "file_extension", "mimetype", "nbconvert_exporter",
              "pygments_lexer")  # fmt: skip
EXTRA_KEYS = tuple(f"metadata.language_info.{k}" for k in LAB_WRITES)
HOOK = "--ContentsManager.pre_save_hook=bildlib.notebook.jupyter.strip_before_save"
# Lab asks on first start whether to fetch Jupyter's news feed, and checks PyPI for a newer Lab: a
# pop-up over the tutorial, and requests a laptop offline cannot make. Both off (JupyterLab's docs,
# "Announcements"): no feed and no update check here, and the plugin that asks is disabled by the
# page config in CONFIG (news_url None alone still showed the question in Lab 4.6)
QUIET = ("--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate")
CONFIG = Path(__file__).resolve().parent / "jupyter_config"  # labconfig/page_config.json


# the keys nbstripout's command line drops by default (its strip_output does not add them itself)
NBSTRIPOUT_DEFAULTS = ("metadata.signature", "metadata.widgets", "cell.metadata.collapsed",
                       "cell.metadata.ExecuteTime", "cell.metadata.execution",
                       "cell.metadata.heading_collapsed", "cell.metadata.hidden",
                       "cell.metadata.scrolled")  # fmt: skip


def stripped(nb):
    """nb (a notebook node) as the git filter stores it: no outputs or counts, the cell ids kept."""
    from nbstripout import strip_output

    keys = [*NBSTRIPOUT_DEFAULTS, *EXTRA_KEYS]
    return strip_output(nb, keep_output=False, keep_count=False, keep_id=True, extra_keys=keys)


def strip_before_save(model: dict, path: str, contents_manager, **_) -> None:
    """Jupyter server's pre-save hook: a notebook of this checkout's notebooks/ is saved stripped."""
    import nbformat

    if model.get("type") != "notebook" or not model.get("content"):
        return
    where = (Path(contents_manager.root_dir) / path).resolve()
    if where.is_relative_to((REPO_ROOT / "notebooks").resolve()):
        model["content"] = stripped(nbformat.from_dict(model["content"]))


def command(*extra: str) -> list[str]:
    """The jupyter lab command line of make lab (extra: more options, or a notebook to open)."""
    exe = Path(sys.executable).parent / "jupyter"
    jupyter = str(exe) if exe.exists() else shutil.which("jupyter") or "jupyter"
    root = ["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []  # containers, CI
    return [jupyter, "lab", f"--ServerApp.root_dir={REPO_ROOT}", HOOK, *QUIET, *root, *extra]


def environment(base: dict | None = None) -> dict:
    """The environment make lab starts Jupyter in: base (os.environ) with CONFIG first on
    JUPYTER_CONFIG_PATH, so Lab reads its page config (nothing is written to the user's config)."""
    env = dict(os.environ if base is None else base)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(CONFIG), env.get("JUPYTER_CONFIG_PATH")]))
    return env


def main(argv: list[str] | None = None) -> None:
    cmd = command(*(sys.argv[1:] if argv is None else argv))
    os.execve(cmd[0], cmd, environment())


if __name__ == "__main__":
    main()
