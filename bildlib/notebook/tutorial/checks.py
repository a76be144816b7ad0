"""The tutorial's automatic checks: each runs a student's function on cases with known answers,
prints PASS or FAIL with the reason, and never raises (a function that raises, or is still a
blank, fails with its message). `Report` keeps the results for grading:
<out_dir>/tutorial_checks.json. The loop's check (exercise 3) is in checks_loop."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import sacrebleu
import torch

from bildlib.decoding.trace import Trace
from bildlib.notebook.tutorial.fakes import V, peaked

EXERCISES = {
    "1 fallback": "should_fall_back",
    "2 rollback position": "rollback_position",
    "3 BiLD loop": "bild_loop",
    "4 predicted speedup": "predict_speedup",
    "5 sweep row": "sweep_row",
}


@dataclass
class Result:
    exercise: str
    passed: bool
    message: str

    def __str__(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  exercise {self.exercise}: {self.message}"


class Failed(Exception):
    """A wrong answer; its message says which case and why."""


def run(exercise: str, body, *args) -> Result:
    """Runs body(*args), which raises Failed on a wrong answer and returns a message on success."""
    try:
        r = Result(exercise, True, body(*args))
    except NotImplementedError as e:
        r = Result(exercise, False, f"not done yet ({e or 'NotImplementedError'})")
    except Failed as e:
        r = Result(exercise, False, str(e))
    except Exception as e:  # the student's code raised: report it, do not stop the notebook
        r = Result(exercise, False, f"your code raised {type(e).__name__}: {e}")
    print(r)
    return r


class Report:
    """The checks of one notebook run, by exercise; save() writes them for grading."""

    def __init__(self):
        self.results: dict[str, Result] = {}

    def add(self, r: Result) -> Result:
        self.results[r.exercise] = r
        return r

    def passed(self, exercise: str) -> bool:
        r = self.results.get(exercise)
        return bool(r and r.passed)

    def save(self, out_dir: Path | str, **extra) -> None:
        """<out_dir>/tutorial_checks.json; it prints where (it returns nothing, so that a notebook
        cell ending with it echoes no path)."""
        from bildlib import data, notebook

        path = Path(out_dir) / "tutorial_checks.json"
        run = {"engine": "lean", "commit": notebook.commit(), "code": notebook.code_state()}  # lab: lean
        extra = run | extra
        doc = {
            "passed": sum(r.passed for r in self.results.values()),
            "exercises": len(EXERCISES),
            "checks": {k: {"passed": r.passed, "message": r.message} for k, r in self.results.items()},
        } | extra
        with data.atomic_path(path) as tmp:
            tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        print(f"{doc['passed']} of {doc['exercises']} exercises pass; checks saved to {path}")


# --- exercise 1: the fallback test -------------------------------------------------------------


def _flat_top(top: int, second: float) -> torch.Tensor:
    """Logits (V,) with large values everywhere: the top logit is 2.0, but its probability is low."""
    x = torch.full((V,), second)
    x[top] = 2.0
    return x


def check_fallback(fn) -> Result:
    cases = [  # (what, logits, α_FB, expected)
        ("90 % sure, α_FB = 0.5", peaked(3, 0.9), 0.5, False),
        ("30 % sure, α_FB = 0.5", peaked(3, 0.3), 0.5, True),
        ("30 % sure, α_FB = 0.2", peaked(3, 0.3), 0.2, False),
        ("top logit 2.0 but only 8 % sure, α_FB = 0.5", _flat_top(3, 1.8), 0.5, True),
        ("99 % sure, α_FB = 0.995", peaked(7, 0.99), 0.995, True),
    ]

    def body():
        for what, x, a, want in cases:
            got = fn(x.clone(), a)
            if isinstance(got, torch.Tensor):
                if got.numel() != 1:
                    raise Failed(f"should_fall_back must return one bool, got a tensor of shape "
                                 f"{tuple(got.shape)}")
                got = got.item()
            if bool(got) != want:
                hint = (" Compare the softmax probability with α_FB, not the raw logit."
                        if "logit" in what else
                        " Fall back when the max probability is below α_FB.")  # fmt: skip
                raise Failed(f"for a small model {what}, you said {'fall back' if got else 'keep'}; "
                             f"the answer is {'fall back' if want else 'keep'}.{hint}")  # fmt: skip
        return f"right on all {len(cases)} cases"

    return run("1 fallback", body)


# --- exercise 2: the rollback position m -------------------------------------------------------


def _large_rows(tokens: list[int], ps: list[float]) -> torch.Tensor:
    """One large call's logits (k, V): row i puts probability ps[i] on tokens[i]."""
    return torch.stack([peaked(t, p) for t, p in zip(tokens, ps, strict=True)])


def _flat_agree(token: int) -> torch.Tensor:
    """A row whose argmax is `token` at only 20 % (so -log p = 1.6, above α_RB = 1)."""
    return peaked(token, 0.2)


def check_rollback(fn) -> Result:
    d = [5, 6, 7, 8]  # the draft; the large call has one row more (past the draft)
    agree = _large_rows([5, 6, 7, 8, 1], [0.9] * 5)
    at2 = _large_rows([5, 6, 9, 8, 1], [0.9, 0.9, 0.999, 0.9, 0.9])  # -log p_L(7) = 9.6 at position 2
    mild1 = _large_rows([5, 9, 9, 8, 1], [0.9, 0.4, 0.999, 0.9, 0.9])  # at 1: 9 at 40 %, -log p_L(6) = 3.2
    own0 = torch.cat((_flat_agree(5)[None], at2[1:]))  # position 0: the large model's own token
    last = _large_rows([5, 6, 7, 8, 9], [0.9] * 5)  # only the row past the draft differs
    cases = [  # (what, logits, drafted, α_RB, expected m)
        ("the large model agrees with every drafted token", agree, d, 1.0, None),
        ("the large model rejects drafted[2] (-log p = 9.6)", at2, d, 1.0, 2),
        ("drafted[1] at -log p = 3.2 with α_RB = 5, drafted[2] at 9.6", mild1, d, 5.0, 2),
        ("drafted[1] at -log p = 3.2 with α_RB = 1", mild1, d, 1.0, 1),
        ("drafted[0] is the large model's own token at 20 % (-log p = 1.6 > α_RB = 1), "
         "drafted[2] is rejected", own0, d, 1.0, 2),  # fmt: skip
        ("only the last row (which predicts past the draft) differs", last, d, 1.0, None),
        ("an empty draft (the call scored only the token before it)", agree[:1], [], 1.0, None),
    ]

    def body():
        for what, x, drafted, a, want in cases:
            got = fn(x.clone(), list(drafted), a)
            got = got.item() if isinstance(got, torch.Tensor) else got
            if got != want:
                why = _why(got, want, what)
                raise Failed(f"when {what}, you returned {got!r}; the answer is {want!r}.{why}")
        return f"right on all {len(cases)} cases"

    return run("2 rollback position", body)


def _why(got, want, what: str) -> str:
    if isinstance(got, int) and isinstance(want, int) and abs(got - want) == 1:
        return (" Off by one: row i of the logits scores drafted[i] (the call ran the token before "
                "the draft too); the last row predicts past the draft.")  # fmt: skip
    if "own token" in what:
        return (" Where the large model's argmax is the drafted token, putting it back changes "
                "nothing: roll back only where the tokens differ and -log p_L > α_RB.")  # fmt: skip
    if "last row" in what:
        return " The last row predicts the token after the draft; it is not a drafted token."
    if want is None:
        return " Roll back only where -log p_L(drafted[m]) > α_RB and the large model's token differs."
    return " m is the first position past α_RB (and differing), not any later one."


# --- exercise 4: the speedup a trace predicts ---------------------------------------------------


def check_predict(fn) -> Result:
    tr = Trace(small_calls=12, large_calls=3, large_call_tokens=[1, 5, 3])

    def cost(k):  # seconds of a large call over k tokens: 4 ms plus 0.5 ms a token
        return 0.004 + 0.0005 * k

    want = 10 * cost(1) / (12 * 0.001 + cost(1) + cost(5) + cost(3))  # 0.045 / 0.0305 = 1.475
    wrong = {  # common mistakes, and what they give
        "every large call costs one step (large_call(1))": 10 * cost(1) / (0.012 + 3 * cost(1)),
        "the small model's calls are left out": 10 * cost(1) / sum(map(cost, [1, 5, 3])),
        "the ratio is upside down (BiLD over vanilla)": 1 / want,
        "large_call(k) is counted k times (k one-token calls)": 10 * cost(1) / (0.012 + 9 * cost(1)),
    }

    def body():
        got = float(fn(tr, 10, 0.001, cost))
        if math.isclose(got, want, rel_tol=1e-6):
            return f"predicted {got:.3f}x on the test trace"
        why = [w for w, v in wrong.items() if math.isclose(got, v, rel_tol=1e-6)]
        raise Failed(f"on a trace of 12 small calls and large calls over [1, 5, 3] tokens (10 tokens "
                     f"for vanilla large), you predicted {got:.4g}x; the answer is {want:.4g}x"
                     + (f". It looks as if {why[0]}." if why else "."))  # fmt: skip

    return run("4 predicted speedup", body)


# --- exercise 5: one row of the sweep ---------------------------------------------------------


def check_sweep_row(fn) -> Result:
    hyps = ["a man rides a bike .", "two dogs play in the snow", "a woman is cooking"]
    refs = ["a man rides a bicycle .", "two dogs are playing in the snow .", "a woman is cooking ."]
    traces = [Trace(source=["S"] * 6, fallbacks=1), Trace(source=["S"] * 7, fallbacks=3),
              Trace(source=["S"] * 4, fallbacks=0)]  # fmt: skip
    secs = [0.010, 0.020, 0.006]
    want = {"bleu": sacrebleu.corpus_bleu(hyps, [refs]).score, "fallback_pct": 100 * 4 / 17, "ms": 12.0}

    def body():
        got = fn(list(hyps), list(refs), traces, list(secs))
        for k in want:
            if k not in got:
                raise Failed(f"the row has no {k!r} (it needs bleu, fallback_pct and ms)")
            if not math.isclose(float(got[k]), want[k], rel_tol=1e-6):
                raise Failed(f"{k} is {float(got[k]):.4g}; the answer is {want[k]:.4g}. {_hint(k)}")
        return "bleu, fallback_pct and ms right"

    return run("5 sweep row", body)


def _hint(k: str) -> str:
    return {
        "bleu": "Corpus BLEU: sacrebleu.corpus_bleu(hypotheses, [references]).score, not a mean of "
        "sentence scores.",
        "fallback_pct": "Fallbacks per 100 output tokens over all sentences: sum of fallbacks over "
        "sum of tokens (len(trace.source)), not a mean of per-sentence rates.",
        "ms": "The mean latency per sentence, in milliseconds.",
    }[k]
