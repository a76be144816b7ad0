"""Built artifacts, verified before reuse: a folder that a build writes once and later runs reuse (a
quantized checkpoint, a CTranslate2 conversion, a trained student) gets MANIFEST.json, each file's
size and SHA-256 when it was built (`seal`). A later build reuses the folder only while every file
still matches (`reusable`); otherwise it says which file and why, removes the folder and builds it
again. A truncated or edited file is then rebuilt rather than failing later with an error that
names no file."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bildlib.data import sha256

MANIFEST = "MANIFEST.json"


def _files(folder: Path, besides: tuple[str, ...] = ()) -> list[Path]:
    """folder's files but its manifest and those named in besides (at its top level)."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST
                  and str(p.relative_to(folder)) not in besides)  # fmt: skip


def seal(folder: str | Path, besides: tuple[str, ...] = ()) -> dict:
    """Write folder/MANIFEST.json: {relative path: {"bytes", "sha256"}} of every file in it, but
    those named in besides (files other than the build's that may come and go beside it: a card)."""
    folder = Path(folder)
    doc = {str(f.relative_to(folder)): {"bytes": f.stat().st_size, "sha256": sha256(f)}
           for f in _files(folder, besides)}  # fmt: skip
    tmp = folder / f".{MANIFEST}.part"
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    tmp.replace(folder / MANIFEST)
    return doc


def check(folder: str | Path, besides: tuple[str, ...] = ()) -> str:
    """"" when every file of folder is as its manifest says, and it holds no other (but those
    named in besides); else why not, naming the file."""
    folder = Path(folder)
    m = folder / MANIFEST
    if not m.is_file():
        return f"{m} is missing (built before builds were sealed, or not finished)"
    try:
        doc = json.loads(m.read_text())
    except (ValueError, RecursionError) as e:
        return f"{m} is not JSON ({e})"
    if why := _schema(doc):
        return f"{m} is not a manifest: {why}"
    for rel, want in doc.items():
        f = folder / rel
        if not f.is_file():
            return f"{f} is missing"
        if f.stat().st_size != want["bytes"]:
            return f"{f} has {f.stat().st_size} bytes, {want['bytes']} when it was built"
        if sha256(f) != want["sha256"]:
            return f"{f} changed since it was built (SHA-256 differs)"
    rel = [str(f.relative_to(folder)) for f in _files(folder, besides)]
    if extra := [r for r in rel if r not in doc]:
        return f"{folder} holds files it was not built with: {', '.join(extra[:3])}"
    return ""


def _schema(doc) -> str:
    """Why doc is not {relative path: {"bytes": int >= 0, "sha256": 64 hex digits}} ("" when it is)."""
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__}, not an object of files"
    for rel, want in doc.items():
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            return f"the entry {rel!r} is not a path inside the folder"
        if not isinstance(want, dict) or set(want) != {"bytes", "sha256"}:
            return f"the entry {rel!r} is not {{\"bytes\": ..., \"sha256\": ...}}"
        if type(want["bytes"]) is not int or want["bytes"] < 0:
            return f"the entry {rel!r} has bytes {want['bytes']!r}, not a size"
        h = want["sha256"]
        if not isinstance(h, str) or len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
            return f"the entry {rel!r} has sha256 {h!r}, not 64 hex digits"
    return ""


def reusable(folder: str | Path, what: str) -> bool:
    """Whether folder holds a verified build of `what`. A folder that fails its check is removed,
    with a line saying why; False then (and when there is none): build it."""
    folder = Path(folder)
    if not folder.exists():
        return False
    if not (why := check(folder)):
        return True
    print(f"{what}: {why}; building it again")
    shutil.rmtree(folder) if folder.is_dir() else folder.unlink()
    return False
