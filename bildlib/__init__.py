"""bildlib: reproduce Big Little Decoder (Kim et al., NeurIPS 2023)."""

from pathlib import Path

__version__ = "0.1.0"

# The checkout's root: data/, notebooks/ and figures/ live beside the package.
REPO_ROOT = Path(__file__).resolve().parent.parent
