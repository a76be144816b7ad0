"""Config: one decoder configuration of an experiment, and the grids the notebooks sweep."""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass

from bildlib.decoding import MEASURES, RULES, Sampling
from bildlib.decoding.bild import BildSettings
from bildlib.decoding.common import check_count, check_threshold
from bildlib.experiments import presets

HF_METHODS = ("generate", "assisted")  # transformers' own decoders: they run on the HF engine
METHODS = ("vanilla", "bild", "speculative", "oracle", "calm", *HF_METHODS)
# None: the run's engine (run / sweep argument `engine`)
ENGINES = (None, "auto", "lean", "native", "hf", "static")
MODELS = presets.MODEL_NAMES
FLOATS = ("fallback", "rollback", "threshold", "temperature", "top_p", "tau", "verify_end_below")
EARLY_EXIT = {"ee": ("vanilla", "bild"), "calm": ("vanilla", "calm")}  # what the early-exit models run


@dataclass(frozen=True)
class Config:
    """One decoder configuration. `model` is the model of vanilla decoding ("small", "aligned",
    "student", "large") or the small model of the two-model methods (whose large model is "large").
    temperature 0 is greedy; above it, nucleus sampling with top_p and seed. "generate" and
    "assisted" are transformers' greedy generate (model large) and assisted generation
    (decoding.hf; window: num_assistant_tokens, threshold: assistant_confidence_threshold, None:
    HF's defaults). engine: models.engine's "auto", "lean", "native" or "hf", or None: the run's.
    Early exit (docs/early-exit.md): "bild" with model "ee" is early-exit BiLD, the ee model's first layers
    against all of them (models.early_exit); "calm" runs model "calm" with threshold lambda, tau
    and measure (decoding.calm); "vanilla" runs either model whole."""

    method: str  # "vanilla" | "bild" | "speculative" | "oracle" | "generate" | "assisted"
    model: str = "small"
    fallback: float | None = None
    rollback: float | None = None
    window: int | None = None
    max_small_steps: int | None = 10
    distance: str = "ce"
    threshold: float | None = None
    verify_end: bool | None = None  # bild: large model checks the final small tokens (None: exact only)
    rules: str = "ours"  # bild: "ours" or "authors" (decoding.bild)
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    repeat: int = 0  # repeated runs of one configuration (the vanilla-large baseline)
    engine: str | None = None
    tau: float | None = None  # calm: the threshold's decay (decoding.calm_threshold)
    measure: str | None = None  # calm: "state" or "softmax"
    verify_end_below: float | None = None  # bild: check the end only if a final small token was below it

    def __post_init__(self):
        for f in FLOATS:  # numpy's floats (np.float32 too) as Python's: one key per value, JSON-able
            v = getattr(self, f)
            if isinstance(v, numbers.Real) and not isinstance(v, bool | int):
                object.__setattr__(self, f, float(v))
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.model not in MODELS and not presets.is_candidate(self.model):
            known = f"{', '.join(MODELS)} or 'student:<label>'"
            raise ValueError(f"model must be one of {known}, got {self.model!r}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of auto, lean, native, hf, static or None, "
                             f"got {self.engine!r}")
        if self.method in HF_METHODS and self.engine not in (None, "hf"):
            raise ValueError(f"{self.method} is transformers' own generate: engine must be hf or None")
        if self.method == "generate" and self.model != "large":
            raise ValueError(f"generate runs the large model: model must be 'large', got {self.model!r}")
        if self.method not in ("vanilla", "generate") and self.model == "large":
            small = "small, aligned or student"
            raise ValueError(f"{self.method} needs a small model ({small}), got model='large'")
        if self.model in EARLY_EXIT and self.method not in EARLY_EXIT[self.model]:
            runs = " or ".join(EARLY_EXIT[self.model])
            raise ValueError(f"model {self.model!r} runs {runs}, not {self.method!r}")
        if self.method == "calm" and self.model != "calm":
            raise ValueError(f"calm runs model 'calm', got model {self.model!r}")
        if self.rules not in RULES or (self.rules != "ours" and self.method != "bild"):
            raise ValueError(f"rules must be one of {', '.join(RULES)} (bild only), got {self.rules!r}")
        Sampling(self.temperature, self.top_p, self.seed)  # checks the three
        if self.method == "oracle" and self.sampling is not None:
            raise ValueError("oracle is greedy: temperature must be 0")
        # The decoder's own checks, now: a sweep refuses a bad configuration before anything runs.
        if self.method == "bild":
            BildSettings(self.fallback, self.rollback, self.max_small_steps, self.window, self.distance,
                         self.sampling, verify_end=self.verify_end, rules=self.rules,
                         verify_end_below=self.verify_end_below)  # fmt: skip
        elif self.method == "oracle":
            check_threshold("threshold", self.threshold, 0, 1)
        elif self.method == "calm":
            check_threshold("threshold", self.threshold, 0, 1)
            check_threshold("tau", self.tau, 0)
            if self.measure not in MEASURES:
                raise ValueError(f"measure must be one of {', '.join(MEASURES)}, got {self.measure!r}")
            if self.sampling is not None:
                raise ValueError("calm is greedy here: temperature must be 0")
        elif self.method == "speculative":
            check_count("window", self.window)
        elif self.method == "assisted":
            check_count("window", self.window, optional=True)
            check_threshold("threshold", self.threshold, 0, 1, optional=True)
        if self.method in HF_METHODS and self.sampling is not None:
            raise ValueError(f"{self.method} runs greedy here: temperature must be 0")
        check_count("repeat", self.repeat, minimum=0)

    @property
    def sampling(self) -> Sampling | None:
        return Sampling(self.temperature, self.top_p, self.seed) if self.temperature > 0 else None

    @property
    def runs_on(self) -> str | None:
        """The engine asked for: "hf" for transformers' own decoders, else `engine` (None: the
        run's). What decoding uses and what the cache key resolves."""
        return "hf" if self.method in HF_METHODS else self.engine

    @property
    def label(self) -> str:
        return self._label() + (f"@{self.engine}" if self.engine else "")

    def _label(self) -> str:
        end = ""
        if self.sampling is not None:
            end = f"-T{self.temperature:g}-p{self.top_p:g}-s{self.seed}"
        if self.method == "vanilla":
            return f"vanilla-{self.model}" + end + (f"#{self.repeat}" if self.repeat else "")
        if self.method == "oracle":
            return f"oracle-{self.model}-t{self.threshold}"
        if self.method == "calm":
            return f"calm-{self.measure}-l{self.threshold}-tau{self.tau:g}"
        if self.method == "generate":
            return "hf-generate" + (f"#{self.repeat}" if self.repeat else "")
        if self.method == "assisted":
            n, c = ("default" if v is None else f"{v:g}" for v in (self.window, self.threshold))
            return f"hf-assisted-{self.model}-n{n}-c{c}"
        if self.method == "speculative":
            return f"speculative-{self.model}-w{self.window}" + end
        fb = f"fb{self.fallback}" if self.fallback is not None else f"nofb-w{self.window}"
        rb = f"rb{self.rollback}" if self.rollback is not None else "norb"
        end = {True: "-verify", False: "-noverify", None: ""}[self.verify_end] + end
        if self.verify_end_below is not None:
            end = f"-verify-below{self.verify_end_below:g}" + end
        end = ("-exact" if self.distance == "exact" else "") + end
        if self.max_small_steps not in (10, None):  # the paper's limit of 10 goes unnamed
            end = f"-max{self.max_small_steps}" + end
        return f"bild-{self.model}-{fb}-{rb}" + end + ("-authors" if self.rules == "authors" else "")

    def canonical(self) -> Config:
        """This configuration with the fields its method does not read at their defaults: two
        configurations that decode alike have equal canonical forms (e.g. Config("vanilla",
        "small") and vanilla("small"), whose unused max_small_steps differ)."""
        used = READS.get(self.method)
        if used is None:  # bild reads every field
            return self
        keep = {"method", "model", "engine", "repeat"} | used
        return dataclasses.replace(self, **{f.name: f.default for f in dataclasses.fields(self)
                                            if f.name not in keep})  # fmt: skip

    def needs(self) -> list[str]:
        """The models this configuration runs."""
        alone = self.method in ("vanilla", "generate", "calm") or self.model == "ee"
        return [self.model] if alone else [self.model, "large"]


FIELDS = [f.name for f in dataclasses.fields(Config)]
SAMPLED = {"temperature", "top_p", "seed"}
# The fields each method's decoder reads besides method, model, engine and repeat
# (experiments.measure.decode); bild reads them all.
READS = {
    "vanilla": SAMPLED, "generate": set(), "calm": {"threshold", "tau", "measure"},
    "assisted": {"window", "threshold"}, "oracle": {"threshold"}, "speculative": {"window"} | SAMPLED,
}  # fmt: skip


def unique(first: list[Config], rest: list[Config]) -> list[Config]:
    """rest without the configurations that decode as one before them (in first or earlier in
    rest; Config.canonical), in order. Two that decode differently under one label are an error:
    their rows would be summarized as one configuration."""
    seen = {c.canonical(): c for c in first}
    labels = {c.label: c for c in first}
    out = []
    for c in rest:
        k = c.canonical()
        if k in seen:
            continue
        if c.label in labels:
            raise ValueError(f"two configurations share the label {c.label!r} but decode differently: "
                             f"{labels[c.label]!r} and {c!r}")  # fmt: skip
        seen[k], labels[c.label] = c, c
        out.append(c)
    return out


def _sampled(sampling: Sampling | None) -> dict:
    """Config fields of a sampling setting (None: greedy)."""
    if sampling is None:
        return {}
    return {"temperature": sampling.temperature, "top_p": sampling.top_p, "seed": sampling.seed}


def vanilla(model: str, repeat: int = 0, sampling: Sampling | None = None) -> Config:
    return Config("vanilla", model, repeat=repeat, max_small_steps=None, **_sampled(sampling))


def bild(
    model: str,
    fallback,
    rollback,
    window: int | None = None,
    verify_end: bool | None = None,
    rules="ours",
    sampling: Sampling | None = None,
) -> Config:
    steps = None if window else 10  # the No-FB ablation's window replaces the step limit
    return Config(
        "bild",
        model,
        fallback,
        rollback,
        window,
        steps,
        verify_end=verify_end,
        rules=rules,
        **_sampled(sampling),
    )


def speculative(model: str, window: int, sampling: Sampling | None = None) -> Config:
    """Speculative sampling with `window` drafts per large call (greedy when sampling is None)."""
    return Config("speculative", model, window=window, max_small_steps=None, **_sampled(sampling))


def bild_grid(
    preset: str,
    models=("small", "aligned"),
    fallbacks=None,
    rollbacks=None,
    verify_end=(None,),
    rules: str = "ours",
    sampling: Sampling | None = None,
) -> list[Config]:
    """BiLD over the preset's α_FB × α_RB grid, for each small model and each verify_end value
    (decoding.bild; None or False: Algorithm 1, which stops at the small model's EOS unchecked)."""
    p = presets.get(preset)
    fbs = _numbers("fallbacks", p.fallback_grid if fallbacks is None else fallbacks)
    rbs = _numbers("rollbacks", p.rollback_grid if rollbacks is None else rollbacks)
    if isinstance(verify_end, str) or not all(v is None or isinstance(v, bool) for v in verify_end):
        raise ValueError(f"verify_end must be a list of true/false, got {verify_end!r}")
    ends = dict.fromkeys(v or None for v in verify_end)  # False is Algorithm 1, as None; once each
    _nonempty("BiLD", models=models, fallbacks=fbs, rollbacks=rbs, verify_end=ends)
    return [
        bild(m, fb, rb, verify_end=v, rules=rules, sampling=sampling)
        for v in ends
        for m in models
        for fb in fbs
        for rb in rbs
    ]


def ee_grid(fallbacks, rollbacks) -> list[Config]:
    """Early-exit BiLD (model "ee": the early-exit model's first layers against all of them) over
    α_FB × α_RB; the paper's grid is α_FB in [0.2, 0.8] × α_RB in [0.5, 1.5]."""
    fbs, rbs = _numbers("fallbacks", fallbacks), _numbers("rollbacks", rollbacks)
    _nonempty("early-exit BiLD", fallbacks=fbs, rollbacks=rbs)
    return [bild("ee", fb, rb) for fb in fbs for rb in rbs]


def calm_grid(thresholds, taus, measure: str = "state") -> list[Config]:
    """CALM (model "calm") over λ × τ; the paper swept λ in [0.7, 0.98] and τ in {0, 1, 2, 4, 8}."""
    lams, taus = _numbers("thresholds", thresholds), _numbers("taus", taus)
    _nonempty("CALM", thresholds=lams, taus=taus)
    return [Config("calm", "calm", threshold=lam, tau=tau, measure=measure, max_small_steps=None)
            for lam in lams for tau in taus]  # fmt: skip


def _numbers(name: str, vals) -> list:
    """A grid axis as a list, checked to hold numbers (papermill -p passes a list as a string)."""
    numeric = all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in vals)
    if isinstance(vals, str) or not numeric:
        raise ValueError(
            f"{name} must be a list of numbers, got {vals!r} "
            f"(papermill command line: -y '{{{name}: [0.3, 0.5]}}')"
        )
    return list(vals)


def _nonempty(grid: str, **axes) -> None:
    """Every axis has values: an empty figure with rc 0 would look like a result."""
    if empty := [k for k, v in axes.items() if not v]:
        raise ValueError(f"the {grid} grid is empty: {' and '.join(empty)} has no values")


MODES = ("greedy", "sampled")


def sampling_of(mode: str, temperature: float, top_p: float, seed: int) -> Sampling | None:
    """The decoding of a notebook's mode: None for "greedy", nucleus sampling for "sampled"."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    return Sampling(temperature, top_p, seed) if mode == "sampled" else None
