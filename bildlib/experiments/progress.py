"""A sweep's progress bar where its reader is. In Jupyter: tqdm.auto's widget. In a make target,
whose notebook runs under papermill with --log-output (Makefile: PAPERMILL), a widget never
reaches the terminal, so BILD_PROGRESS=text turns the bar into whole lines of text on stderr,
one every BILD_PROGRESS_EVERY seconds (15 by default) and a last one when it closes, which
papermill relays as the cell runs:

    100 configurations interleaved:  35%|###5      | 1400/4000 [02:00<03:40, 11.70 decodes/s]
"""

from __future__ import annotations

import os
import sys

from tqdm import tqdm as text_tqdm
from tqdm.auto import tqdm

MODE = "BILD_PROGRESS"  # "text": lines on stderr; anything else: tqdm.auto
EVERY = "BILD_PROGRESS_EVERY"  # seconds between two lines of text


class Lines:
    """A file for tqdm that writes each refresh as a line of its own (no carriage returns), so that
    a log that relays it line by line shows each state once."""

    def __init__(self, stream=None):
        self.stream, self.last = stream, ""

    def write(self, s: str) -> None:
        line = s.replace("\r", "").rstrip()
        if line and line != self.last:  # the closing refresh repeats the last state
            self.last = line
            out = self.stream or sys.stderr  # looked up when written: a kernel replaces sys.stderr
            out.write(line + "\n")

    def flush(self) -> None:
        (self.stream or sys.stderr).flush()


def every() -> float:
    """BILD_PROGRESS_EVERY as seconds; a value that is not a positive number is a ValueError naming it."""
    raw = os.environ.get(EVERY, "15")
    try:
        s = float(raw)
    except ValueError:
        s = -1.0
    if not s > 0:
        raise ValueError(f"{EVERY} must be a number of seconds > 0, got {raw!r}")
    return s


def bar(total: int, desc: str, disable: bool = False, unit: str = "decode"):
    """A progress bar of `total` steps: tqdm.auto's, or lines of text when BILD_PROGRESS=text."""
    if os.environ.get(MODE) == "text":
        s = every()
        return text_tqdm(total=total, desc=desc, disable=disable, unit=unit, file=Lines(), mininterval=s,
                         maxinterval=s, ascii=True, leave=True, ncols=100)  # fmt: skip
    return tqdm(total=total, desc=desc, disable=disable, unit=unit, leave=False)
