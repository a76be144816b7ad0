"""Files written and fetched safely: a file's SHA-256, atomic writes (a temporary file renamed into
place), and a download checked against its SHA-256."""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bildlib.data.splits import ChecksumError


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@contextmanager
def atomic_path(dest: Path) -> Iterator[Path]:
    """A temporary path beside dest to write to; it becomes dest (mode 644) only if the block
    ends without an exception, and is removed otherwise, so dest is never half-written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def download(url: str, dest: Path, expected_sha256: str, timeout: float = 60.0) -> Path:
    """Fetch url into dest atomically: nothing lands at dest unless its SHA-256 matches."""
    with atomic_path(dest) as tmp:
        with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as resp:
            for block in iter(lambda: resp.read(1 << 20), b""):
                out.write(block)
        got = sha256(tmp)
        if got != expected_sha256:
            raise ChecksumError(
                f"{url} downloaded to {dest} has SHA-256 {got}, expected {expected_sha256}; "
                "the file was not kept"
            )
    return dest
