"""Experiment presets: which models, which data, which metric and threshold grid.

`multi30k` is the embedded default (the checkpoints this project ships, Multi30k val). The
paper presets use the authors' published checkpoints on the Hugging Face Hub with the paper's
datasets. Each name goes through bildlib.models.locate: a repository folder, a
`$BILD_MODELS/<owner>/<name>` mirror of a hub id (a local mirror, or tiny stand-ins in the
tests), or the hub id itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from bildlib.models.load import locate

TRANSLATION_FB = (0.5, 0.6, 0.7, 0.8, 0.9)  # α_FB grid of the paper's translation sweeps
TRANSLATION_RB = tuple(float(x) for x in range(1, 11))  # the paper's α_RB "in [1, 10]", every integer
# The authors' translation script (examples/pytorch/translation/run_translation.py in their
# transformers fork) takes Hugging Face's defaults: sources truncated to 1024 tokens, generation to
# max_length 128, which counts the decoder's start token: at most 127 new tokens. Their repository
# publishes no summarization script; the same defaults are Hugging Face's run_summarization's, so the
# summarization presets take them too (docs/paper-checkpoints.md).
PAPER_SOURCE_TOKENS = 1024
PAPER_NEW_TOKENS = 127
SUMMARIZATION_FB = (0.2, 0.3, 0.4, 0.5, 0.6)
SUMMARIZATION_RB = (2.0, 3.0, 4.0, 5.0, 6.0)


@dataclass(frozen=True)
class Preset:
    name: str
    dataset: str  # a name bildlib.data.load knows
    small: str
    aligned: str | None  # the small model after prediction alignment (None: none, as for the LM pairs)
    large: str
    metric: str  # "bleu" | "rougeL"
    fallback_grid: tuple[float, ...]
    rollback_grid: tuple[float, ...]
    max_new_tokens: int = 128
    max_source_tokens: int | None = None  # sources truncated to this many tokens (EOS kept); None: whole
    prefix: str = ""  # prepended to each source; T5 summarization uses "summarize: "
    suffix: str = ""  # appended to each source: a decoder-only pair's prompt ends with it (" en:")
    ee: str | None = None  # early-exit model (fig6): its first `exit_layer` decoder layers are BiLD's small
    calm: str | None = None  # the same base trained with CALM's weighted exits (fig7)
    exit_layer: int = 1
    student: str | None = None  # a small model made for BiLD: distilled from the large (train.distill)
    candidates: tuple = ()  # (("student:<label>", folder), ...): notebooks/small_models' trials
    base: str | None = None  # the model a variant of `large` is timed against (a sweep's baseline "base"):
    # the unquantized large when `large` is a quantized one (notebooks/quantized), given at run time

    def model(self, which: str) -> str:
        """The checkpoint of `which` ("small", "aligned", "large", "ee", "calm", "student" or "base"): a
        local folder or a hub id. The early-exit models and the student are built, not shipped: a
        missing one is an error that says how to build it. A candidate "student:<label>" is
        found in `candidates` (given as checkpoints to a run)."""
        if is_candidate(which):
            name = dict(self.candidates).get(which)
            if name is None:
                raise ValueError(f"no checkpoint for model {which!r}: pass checkpoints={{{which!r}: folder}}")
            try:
                return locate(name)
            except FileNotFoundError as e:
                raise FileNotFoundError(
                    f"{which}: {name} does not exist; `make models-candidates` trains the candidate "
                    "students (docs/data-and-models.md, Students)"
                ) from e
        if which not in MODEL_NAMES:
            raise ValueError(f"which must be one of {', '.join(MODEL_NAMES)}, got {which!r}")
        name = getattr(self, which)
        if name is None:
            why = "early exit runs on multi30k" if which in ("ee", "calm") else "no aligned small model"
            why = "students are trained for multi30k" if which == "student" else why
            why = "pass checkpoints={'base': folder}" if which == "base" else why
            raise ValueError(f"preset {self.name} has no {which} model ({why})")
        try:
            return locate(name)
        except FileNotFoundError as e:
            if which in ("ee", "calm"):
                raise FileNotFoundError(
                    f"{name} does not exist: the early-exit models are built, not "
                    "shipped; `make models-ee` trains them (docs/early-exit.md)"
                ) from e
            if name in LM_BUILT:
                raise FileNotFoundError(
                    f"{name} does not exist: the decoder-only pair and its student are built, not "
                    "shipped; `make models-lm` trains them (docs/language-modelling.md)"
                ) from e
            if which == "student":
                raise FileNotFoundError(
                    f"{name} does not exist: the student is built, not shipped; `make models-student` "
                    "trains it (docs/data-and-models.md, Students)"
                ) from e
            raise

    def prompt(self, source: str) -> str:
        """The text a model is given for one source: prefix + source + suffix."""
        return self.prefix + source + self.suffix

    def source_ids(self, lm, source: str) -> list[int]:
        """The token ids a model is given for one source: its prompt, truncated to max_source_tokens
        as Hugging Face's tokenizers truncate (the EOS kept last)."""
        return lm.encode(self.prompt(source), self.max_source_tokens)


MODEL_NAMES = ("small", "aligned", "large", "ee", "calm", "student", "base")
SMALL_MODELS = ("small", "aligned", "student")  # BiLD's small models; ee and calm stand alone
BUILT = ("ee", "calm", "student")  # built by a make target, not shipped: model() says which
CANDIDATE = "student:"  # "student:<label>": a candidate small model, its checkpoint given at run time


def is_candidate(which) -> bool:
    """Whether `which` names a candidate small model ("student:" and a label)."""
    return isinstance(which, str) and which.startswith(CANDIDATE) and len(which) > len(CANDIDATE)


def is_small(which) -> bool:
    """Whether `which` is one of BiLD's small models: small, aligned, student or a candidate."""
    return which in SMALL_MODELS or is_candidate(which)


LM_BUILT = ("data/checkpoints/multi30k-lm-small", "data/checkpoints/multi30k-lm-large",
            "data/checkpoints/multi30k-lm-student")  # make models-lm
DECODER_ONLY = ("multi30k-lm", "wikitext2-gpt2")  # the presets of notebooks/table2_lm


def _paper(task: str, dataset: str, family: str, summarization: bool) -> Preset:
    owner = "kssteven"
    fb, rb = (SUMMARIZATION_FB, SUMMARIZATION_RB) if summarization else (TRANSLATION_FB, TRANSLATION_RB)
    return Preset(
        name=f"{task}-{family.lower()}",
        dataset=dataset,
        small=f"{owner}/{family}-small-{task}" + ("" if summarization else "-de-en"),
        aligned=f"{owner}/{family}-small-{task}" + ("" if summarization else "-de-en") + "-bild-aligned",
        large=f"{owner}/{family}-large-{task}" + ("" if summarization else "-de-en"),
        metric="rougeL" if summarization else "bleu",
        fallback_grid=fb,
        rollback_grid=rb,
        max_new_tokens=PAPER_NEW_TOKENS,
        max_source_tokens=PAPER_SOURCE_TOKENS,
        prefix="summarize: " if summarization else "",
    )


PRESETS = {
    "multi30k": Preset(
        name="multi30k",
        dataset="multi30k",
        small="data/checkpoints/multi30k-small",
        aligned="data/checkpoints/multi30k-small-aligned",
        large="data/checkpoints/multi30k-large",
        metric="bleu",
        # Our small models are less confident than the paper's mT5 (at α_FB = 0.5 the aligned
        # one falls back on ~20 % of tokens), so the grid reaches lower α_FB; and quality needs a
        # low α_RB (aligned: α_RB 2 instead of 1 costs 1.6-2.7 BLEU). 40 configurations keep a cold fig4
        # run under 10 minutes on 2 CPU cores.
        fallback_grid=(0.2, 0.3, 0.4, 0.5, 0.6),
        rollback_grid=(0.5, 1.0, 2.0, 3.0),
        max_new_tokens=64,
        ee="data/checkpoints/multi30k-ee",
        calm="data/checkpoints/multi30k-calm",
        student="data/checkpoints/multi30k-student-top32",  # make models-student (small_models' winner)
    ),
    # arXiv v1 Table 2: GPT-2 on WikiText-2. Generation continues the first words of each paragraph
    # (hub.lm_split); its BLEU against the paragraph's own continuation is a weak proxy.
    "wikitext2-gpt2": Preset(
        name="wikitext2-gpt2",
        dataset="wikitext2",
        small="gpt2",
        aligned=None,
        large="gpt2-large",
        metric="bleu",
        fallback_grid=TRANSLATION_FB,
        rollback_grid=TRANSLATION_RB,
        max_new_tokens=64,
    ),
    "iwslt2017-mt5": _paper("iwslt2017", "iwslt2017", "mT5", summarization=False),
    "wmt2014-mt5": _paper("wmt2014", "wmt14", "mT5", summarization=False),
    "xsum-t5": _paper("xsum", "xsum", "T5", summarization=True),
    "cnndm-t5": _paper("cnndm", "cnn_dailymail", "T5", summarization=True),
}


# The decoder-only pair this project trains (`make models-lm`; docs/language-modelling.md):
# prompt-style translation "de: <German> en:" (train.causal) on multi30k's data and grids; no aligned
# small model, no early exit.
PRESETS["multi30k-lm"] = dataclasses.replace(
    PRESETS["multi30k"], name="multi30k-lm", small=LM_BUILT[0], aligned=None, large=LM_BUILT[1],
    prefix="de: ", suffix=" en:", ee=None, calm=None, student=LM_BUILT[2],
)  # fmt: skip


def get(name: str) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"preset must be one of {sorted(PRESETS)}, got {name!r}")
    return PRESETS[name]


def bild_models(name: str, student: str = "auto") -> tuple[str, ...]:
    """The small models of a preset's BiLD figure (fig4, Table 1): small and aligned, and the
    student as `student` says: "auto" where the preset has one and it is built (make
    models-student), "yes" (a missing one is then Preset.model's error), "no"."""
    if student not in ("auto", "yes", "no"):
        raise ValueError(f"student must be auto, yes or no, got {student!r}")
    p = get(name)
    if student == "no" or student == "auto" and not p.student:
        return ("small", "aligned")
    if student == "auto":
        try:
            if not (Path(p.model("student")) / "config.json").is_file():
                return ("small", "aligned")
        except FileNotFoundError:
            return ("small", "aligned")
    return ("small", "aligned", "student")
