"""Every doc page opens with a short table of contents: the paragraph beginning `**Contents:**`
right after the page's opening paragraph, one link per `## ` section, in order, each to the anchor
GitHub gives that heading. `make report` writes them (python -m bildlib.reports.toc; --check only
checks), so a section added, renamed or moved shows in its page's contents.
"""

from __future__ import annotations

import argparse
import re
import sys
import unicodedata
from pathlib import Path

from bildlib import REPO_ROOT, data

PAGES = ["README.md", "docs/*.md"]  # every page a reader opens
LEAD = "**Contents:** "
WIDTH = 118


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: Markdown's code and emphasis marks dropped, lower case,
    every character that is not a letter, mark, number, underscore, space or hyphen dropped, spaces
    as hyphens."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    keep = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LMN")
    return keep.replace(" ", "-")


def sections(text: str) -> list[tuple[str, str]]:
    """(heading, anchor) of each `## ` heading outside code blocks; a repeated anchor gets -1, -2, ..."""
    out, seen, fenced = [], {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("## "):
            title = line[3:].strip()
            a = slug(title)
            n = seen.get(a, 0)
            seen[a] = n + 1
            out.append((re.sub(r"[`*]", "", title), a if n == 0 else f"{a}-{n}"))
    return out


def contents(text: str) -> str:
    """The contents paragraph for text, wrapped at WIDTH characters."""
    links = [f"[{t}](#{a})" for t, a in sections(text)]
    lines, line = [], LEAD.rstrip()
    for i, link in enumerate(links):
        piece = link + (" ·" if i < len(links) - 1 else "")
        if len(line) + 1 + len(piece) > WIDTH and line != LEAD.rstrip():
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}"
    return "\n".join([*lines, line])


def render(text: str, name: str = "a page") -> str:
    """text with its contents paragraph written (replaced, or put after the opening paragraph).
    A page must open with a `# ` title and a paragraph: a ValueError names it otherwise."""
    paras = text.split("\n\n")
    if not paras[0].startswith("# ") or len(paras) < 3:
        raise ValueError(f"{name}: a page opens with a '# ' title and a paragraph before its contents")
    if not sections(text):
        return text
    toc = contents(text)
    at = next((i for i, p in enumerate(paras) if p.startswith(LEAD.rstrip())), None)
    if at is None:
        paras.insert(2, toc)
    else:
        paras[at] = toc
    return "\n\n".join(paras)


def pages(root: Path = REPO_ROOT) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern)})


def check(root: Path = REPO_ROOT) -> list[str]:
    """The pages (relative names) whose contents do not match their sections."""
    stale = [p for p in pages(root) if render(text := p.read_text(), p.name) != text]
    return [p.relative_to(root).as_posix() for p in stale]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bildlib.reports.toc", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check: exit 1 if a page's contents are stale")
    a = ap.parse_args(argv)
    if a.check:
        if stale := check():
            print(f"stale contents in {', '.join(stale)}: run make report", file=sys.stderr)
            return 1
        return 0
    for p in pages():
        text = p.read_text()
        if (new := render(text, p.name)) != text:
            with data.atomic_path(p) as tmp:
                tmp.write_text(new)
            print(f"{p.relative_to(REPO_ROOT)}: contents written")
    return 0


if __name__ == "__main__":
    sys.exit(main())
