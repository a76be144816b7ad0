"""bildlib: reproduce Big Little Decoder (Kim et al., NeurIPS 2023)."""

from pathlib import Path

__version__ = "0.1.0"

# The checkout's root: data/, notebooks/ and figures/ live beside the package.
REPO_ROOT = Path(__file__).resolve().parent.parent


def repo_relative(path) -> str:
    """A path as committed files record it: relative to the checkout when inside it (so nothing
    names the machine it was made on), otherwise as given."""
    p = Path(path)
    try:
        return p.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)
