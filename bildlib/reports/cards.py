"""A built model's card (make models-student, models-ee, models-lm). The weights of these models are
not committed, but their cards are (data/checkpoints/cards/): each describes the model that the
committed results came from. So a build never rewrites a committed card: it writes its own card
beside the weights (<checkpoint>/README.md and card.json) and under build/cards/, and prints how
its numbers differ from the committed card's. `--publish` (with the results made from the new
model) replaces the committed card."""

from __future__ import annotations

import json
import math
from pathlib import Path

from bildlib import REPO_ROOT, data, repo_relative

COMMITTED = REPO_ROOT / "data" / "checkpoints" / "cards"
BUILT = REPO_ROOT / "build" / "cards"


def write_card(name: str, text: str, m: dict, checkpoint: Path | None, publish: bool = False) -> str:
    """Write the card (text, the measurements m) of the model `name` built at checkpoint; returns
    the comparison with the committed card (printed too)."""
    files = [BUILT / f"{name}.md", BUILT / f"{name}.json"]
    if checkpoint is not None and Path(checkpoint).is_dir():
        files += [Path(checkpoint) / "README.md", Path(checkpoint) / "card.json"]
    if publish:
        files += [COMMITTED / f"{name}.md", COMMITTED / f"{name}.json"]
    doc = json.dumps(m, indent=1, default=str) + "\n"
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        with data.atomic_path(f) as tmp:
            tmp.write_text(doc if f.suffix == ".json" else text)
    said = "the committed card replaced (--publish)" if publish else compare(name, json.loads(doc))
    print(text)
    print(f"{name}: card in {', '.join(repo_relative(f) for f in files)}; {said}")
    return said


def compare(name: str, m: dict) -> str:
    """How the measurements m differ from the committed card's, one line per number."""
    f = COMMITTED / f"{name}.json"
    if not f.is_file():
        return f"no committed card {repo_relative(f)} to compare with"
    old, new = dict(_leaves(json.loads(f.read_text()))), dict(_leaves(m))
    lines = [f"{k}: committed {old[k]}, this build {new[k]}" for k in sorted(old.keys() & new.keys())
             if _differ(old[k], new[k])]  # fmt: skip
    lines += [f"{k}: only in the committed card" for k in sorted(old.keys() - new.keys())]
    head = f"differences from the committed card {repo_relative(f)} (left as it is; --publish replaces it)"
    return head + (":\n  " + "\n  ".join(lines) if lines else ": none")


def _leaves(x, prefix: str = ""):
    if isinstance(x, dict):
        for k, v in x.items():
            yield from _leaves(v, f"{prefix}.{k}" if prefix else str(k))
    elif not isinstance(x, list):
        yield prefix, x


def _differ(a, b) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a != b
