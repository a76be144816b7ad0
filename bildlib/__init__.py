"""bildlib: reproduce Big Little Decoder (Kim et al., NeurIPS 2023). One folder per concept, each
saying its job: data, models, decoding, experiments, analysis, plots, bench, reports, train, quant,
notebook, and kernels (as bildlib.kernels). This module: where the shipped files are read from."""

import os
from pathlib import Path

__version__ = "0.1.0"
HOME = "BILD_HOME"  # a checkout (or a copy of its data/) to read checkpoints, data and figures from


def _root() -> tuple[Path, str]:
    """(the folder holding data/, notebooks/ and figures/, how it was found): $BILD_HOME; else the
    checkout the package was imported from (an editable install); else the checkout holding the
    working directory (an installed wheel run from a clone); else the working directory, marked."""
    if v := os.environ.get(HOME):
        return Path(v).expanduser().resolve(), f"${HOME}"
    here = Path(__file__).resolve().parent.parent
    if (here / "data" / "checkpoints").is_dir():
        return here, "the checkout bildlib was imported from"
    cwd = Path.cwd().resolve()
    for p in (cwd, *cwd.parents):
        if (p / "data" / "checkpoints").is_dir() and (p / "bildlib").is_dir():
            return p, "the checkout holding the working directory"
    return cwd, ""


REPO_ROOT, ROOT_FOUND_BY = _root()


def where() -> str:
    """Where bildlib reads shipped checkpoints and data from, said in the errors of a missing file."""
    if not ROOT_FOUND_BY:
        return (f"bildlib (installed in {Path(__file__).resolve().parent}) found no checkout: none holds it "
                f"or the working directory; run from a clone of the repository, or set ${HOME} to one")
    if not (REPO_ROOT / "data" / "checkpoints").is_dir():
        return f"{ROOT_FOUND_BY} is {REPO_ROOT}, which has no data/checkpoints/"
    return f"shipped files are read from {REPO_ROOT} ({ROOT_FOUND_BY})"


def repo_relative(path) -> str:
    """A path as committed files record it: relative to the checkout when inside it (so nothing
    names the machine it was made on), otherwise as given."""
    p = Path(path)
    try:
        return p.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)
