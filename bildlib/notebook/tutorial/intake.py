"""What `make grade` takes from a submissions folder before anything runs, and what it clears
from a student's folders around nbgrader's steps (docs/teaching.md, *What the sandbox isolates*).

Taken: a student folder whose name is a name, never a pattern (letters, digits and `_-.@+`:
nbgrader globs a student id, so `s?*` would be every student whose id starts with s), whose whole
tree, walked with lstat, holds only folders and regular files (no symbolic link, FIFO, device,
socket or second hard link at any depth), at most MAX_FILES of them and none over MAX_BYTES, and
one notebook that is valid notebook JSON by nbformat's own validation. What nbgrader then reads
is a fresh copy of those regular files (`copy`), never the student's tree. Cleared: anything in a
folder nbgrader is about to copy, chmod or render that is not a regular file or folder, or is over
the limit.
Every refusal is one line naming the path, returned, never raised: one student's file does not
stop the others' grading.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

MAX_BYTES = 16 << 20  # a notebook, or any file nbgrader copies: the handout is about 100 KB
MAX_NAME = 100
MAX_FILES, MAX_TOTAL = 200, 64 << 20  # in a student's folder: files, and their bytes together
NAME_MARKS = set("_-.@+")  # besides letters and digits: nothing a glob, nbgrader or a shell reads


def student_name(name: str) -> str:
    """Why a folder name is refused as a student id ("" when it is taken)."""
    if not name.isprintable() or any(c.isspace() for c in name):
        return "holds a space, a newline or a control character"
    if name.startswith((".", "-")):
        return "starts with a dot or a dash"
    if ".." in name:
        return "holds '..'"
    if len(name) > MAX_NAME:
        return f"is longer than {MAX_NAME} characters"
    if bad := sorted({c for c in name if not (c.isalnum() or c in NAME_MARKS)}):
        return (f"holds {' '.join(bad)}, which a glob, nbgrader or a shell reads as more than a letter "
                "(a student id is letters, digits and _-.@+)")  # fmt: skip
    return ""


def tree(folder: Path) -> tuple[list[Path], str]:
    """([the regular files under folder, relative], "") or ([], why the folder is refused): walked
    with lstat, never following a link; a link, FIFO, device, socket or second hard link at any
    depth, a file over MAX_BYTES, more than MAX_FILES files or MAX_TOTAL bytes: refused, naming
    the path."""
    files, total = [], 0
    for top, dirs, names in os.walk(folder):  # a link to a folder is listed in dirs, not entered
        for name in sorted([*dirs, *names]):
            p = Path(top) / name
            try:
                st = os.lstat(p)
            except OSError as e:
                return [], f"{p.relative_to(folder.parent)} cannot be read ({e.strerror})"
            if stat.S_ISDIR(st.st_mode):
                continue
            if why := kind(st):
                return [], f"{p.relative_to(folder.parent)} is {why}: hand in regular files only"
            files.append(p.relative_to(folder))
            total += st.st_size
            if len(files) > MAX_FILES or total > MAX_TOTAL:
                return [], f"{folder.name} holds more than {MAX_FILES} files or {MAX_TOTAL >> 20} MiB"
    return files, ""


def copy(src: Path, files: list[Path], dest: Path) -> str:
    """The regular files (tree's list, relative to src) copied into the new folder dest, each
    opened without following a link and checked again once open: "" or why not (a file replaced
    since the walk)."""
    for rel in files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            raw, why = read_regular(src / rel)
        except OSError as e:
            return f"{rel} cannot be read ({e.strerror})"
        if why:
            return f"{rel} is {why}"
        target.write_bytes(raw)
    return ""


def kind(st: os.stat_result) -> str:
    """What a file is, in words, when it is not a regular file with one link ("" when it is)."""
    m = st.st_mode
    if stat.S_ISLNK(m):
        return "a symbolic link"
    if stat.S_ISFIFO(m):
        return "a FIFO"
    if stat.S_ISCHR(m) or stat.S_ISBLK(m):
        return "a device"
    if stat.S_ISSOCK(m):
        return "a socket"
    if not stat.S_ISREG(m):
        return "not a regular file"
    if st.st_nlink > 1:
        return f"a file with {st.st_nlink} hard links"
    if st.st_size > MAX_BYTES:
        return f"{st.st_size} bytes, over the limit of {MAX_BYTES}"
    return ""


def read_regular(path: Path) -> tuple[bytes, str]:
    """(path's bytes, at most MAX_BYTES + 1, "") when it is a regular file kind() takes, opened
    without following a link and checked once open; (b"", what it is) otherwise. OSError passes."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if why := kind(os.fstat(f.fileno())):
            return b"", why
        return f.read(MAX_BYTES + 1), ""


def notebook(path: Path) -> str:
    """Why path is not a notebook nbgrader can grade, in one line ("" when it is one). Only a
    regular file is opened (never through a link), and nothing here raises."""
    import nbformat

    try:
        if why := kind(os.lstat(path)):
            return f"{path.name} is {why}: hand in the notebook file itself"
        raw, why = read_regular(path)
        if why:  # replaced since the lstat
            return f"{path.name} is {why}"
        doc = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        return _line(f"{path.name} is not notebook JSON: {type(e).__name__}: {e}")
    if not isinstance(doc, dict):
        return f"{path.name} holds a JSON {type(doc).__name__}, not a notebook (an object with cells)"
    major, minor = doc.get("nbformat"), doc.get("nbformat_minor")
    if type(major) is not int or major not in (3, 4) or type(minor) is not int:
        return f"{path.name} has nbformat {major!r}.{minor!r}: not a version nbformat reads (3 or 4)"
    try:  # a malformed notebook raises whatever nbformat's converter meets: any of it is a reason
        nbformat.validate(nbformat.reads(raw.decode("utf-8"), as_version=4))
    except Exception as e:  # noqa: BLE001
        return _line(f"{path.name}: {type(e).__name__}: {e}")
    return ""


def clear(folder: Path) -> list[str]:
    """Remove from folder (not following links) every entry that is not a regular file or a
    folder, and every file kind() refuses: [one line per entry removed]."""
    removed = []
    if not folder.is_dir() or folder.is_symlink():
        return removed
    for top, dirs, files in os.walk(folder):  # os.walk lists a link to a folder in dirs, unfollowed
        for name in [*dirs, *files]:
            p = Path(top) / name
            st = os.lstat(p)
            if stat.S_ISDIR(st.st_mode):
                continue
            if why := kind(st):
                p.unlink()
                removed.append(f"{p.relative_to(folder)} ({why})")
        dirs[:] = [d for d in dirs if (Path(top) / d).is_dir() and not (Path(top) / d).is_symlink()]
    return removed


def _line(s: str) -> str:
    return " ".join(s.split())[:200]
