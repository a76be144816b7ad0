"""The shipped checkpoints' SHA-256 sums, checked when a model or tokenizer loads from them.

`data/checkpoints/SHA256SUMS` lists every file of each shipped folder (the weights, config and
tokenizer files; not the model card, which `make cards` rewrites) in `sha256sum`'s format, so
`cd data/checkpoints && sha256sum -c SHA256SUMS` checks them too. `verify` checks a folder once
per process, at its first load: a file changed on disk (a bad copy, a byte flipped, an edit)
stops the load with its name and the fix, instead of decoding with damaged weights. A retrain
(`make models`) rewrites its folder's sums (`record`); a folder not listed is not checked.
"""

from __future__ import annotations

from pathlib import Path

from bildlib import REPO_ROOT, data

SUMS = REPO_ROOT / "data" / "checkpoints" / "SHA256SUMS"
BESIDES = ("README.md", "card.json", "MANIFEST.json")  # rewritten beside the weights; not shipped state
_checked: set[Path] = set()


def read(sums: Path | None = None) -> dict[str, str]:
    """{path relative to the sums file's folder: sha256}; {} where there is no sums file."""
    sums = sums or SUMS
    if not sums.is_file():
        return {}
    out = {}
    for i, line in enumerate(sums.read_text().splitlines(), 1):
        h, sep, rel = line.partition("  ")
        if not sep or len(h) != 64 or not rel:
            raise ValueError(f"{sums}, line {i}: not '<sha256>  <path>' (sha256sum's format): {line[:80]!r}")
        out[rel] = h
    return out


def verify(folder: str | Path, sums: Path | None = None) -> None:
    """Check a shipped folder against the sums, once per process; ValueError naming the file
    that differs and how to restore it. Folders not listed (trained here, from the hub) pass."""
    sums = sums or SUMS
    folder = Path(folder).resolve()
    if folder in _checked or not folder.is_relative_to(sums.parent.resolve()):
        return
    top = sums.parent.resolve()
    prefix = folder.relative_to(top).as_posix() + "/"
    listed = {rel: h for rel, h in read(sums).items() if rel.startswith(prefix)}
    for rel, h in sorted(listed.items()):
        f = top / rel
        why = "is missing" if not f.is_file() else "" if data.sha256(f) == h else "differs from its sum"
        if why:
            shown = f.relative_to(REPO_ROOT) if f.is_relative_to(REPO_ROOT) else f
            raise ValueError(f"{shown} {why} in {sums.name} (a damaged copy, or changed by hand): `git "
                             f"checkout -- {shown}` restores the shipped file; after a retrain, `make "
                             "models` rewrites the sums")  # fmt: skip
    _checked.add(folder)


def record(folder: str | Path, sums: Path | None = None) -> None:
    """Rewrite the sums of a shipped folder (listed already) from its files now: after a retrain."""
    sums = sums or SUMS
    folder, top = Path(folder).resolve(), sums.parent.resolve()
    if not folder.is_relative_to(top):
        return
    prefix = folder.relative_to(top).as_posix() + "/"
    old = read(sums)
    if not any(rel.startswith(prefix) for rel in old):
        return
    new = {rel: h for rel, h in old.items() if not rel.startswith(prefix)}
    for f in sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in BESIDES):
        new[f.relative_to(top).as_posix()] = data.sha256(f)
    with data.atomic_path(sums) as tmp:
        tmp.write_text("".join(f"{h}  {rel}\n" for rel, h in sorted(new.items())))
    _checked.discard(folder)
