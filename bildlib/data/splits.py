"""A task's split (source, reference pairs) and the errors data loading raises: the leaf that
bildlib.data and bildlib.data.hub both build on."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

TASK_KINDS = ("translation", "summarization", "language_modeling")


class DataError(ValueError):
    """A data file is missing, empty, corrupt or inconsistent; the message names the file."""


class ChecksumError(DataError):
    """A downloaded file does not have the expected SHA-256."""


class DatasetUnavailableError(RuntimeError):
    """A hub dataset could not be loaded (no network and no cached copy)."""


@dataclass(frozen=True)
class Task:
    name: str  # e.g. "multi30k", "xsum"
    kind: str  # "translation" | "summarization"
    source_lang: str
    target_lang: str
    prefix: str = ""  # prepended to every source before tokenization, e.g. "summarize: "

    def __post_init__(self):
        if self.kind not in TASK_KINDS:
            raise ValueError(f"Task.kind must be one of {TASK_KINDS}, got {self.kind!r}")


@dataclass
class Split:
    task: Task
    split: str
    pairs: list[tuple[str, str]] = field(repr=False)  # (source, reference)
    # language modelling: the raw texts perplexity is taken over (pairs are prompts and their
    # continuations, for generation); other tasks: None
    texts: list[str] | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.pairs)

    def __iter__(self) -> Iterator[tuple[str, str]]:
        return iter(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]

    @property
    def sources(self) -> list[str]:
        return [s for s, _ in self.pairs]

    @property
    def references(self) -> list[str]:
        return [r for _, r in self.pairs]

    def head(self, n: int) -> Split:
        """The first n pairs (a fixed, reproducible subset); the texts stay whole."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        return Split(self.task, self.split, self.pairs[:n], self.texts)
