"""Exercise 3's check: a student's BiLD loop against decoding.bild, first on fake models built so
that each classic mistake shows (a fallback, a rollback, the limit, the check at the end), call
by call, then on real sentences with the shipped pair, and at the two limits: α_FB = 0 with no
limit is the small model's greedy output, α_RB = 0 with the check at the end the large one's."""

from __future__ import annotations

import torch

from bildlib import decoding as D
from bildlib.notebook.tutorial.checks import Failed, Result, run
from bildlib.notebook.tutorial.fakes import EOS, Markov
from bildlib.notebook.tutorial.record import Recorded


def chain(*paths: list[int]) -> Markov:
    """A fake whose next token follows the previous one along `paths` (each starting after bos
    = 0 or after a token of another path): e.g. chain([0, 5, 6, 1]) writes 5, 6, EOS."""
    t = torch.full((16, 16), -5.0)
    for path in paths:
        for a, b in zip(path, path[1:], strict=False):
            t[a] = -5.0
            t[a, b] = 5.0  # 99.9 % sure
    return Markov(t, eos=EOS, name="fake")


# (name, small, large, settings, what it shows); settings: α_FB, α_RB, limit, verify_end
def scenarios() -> list[tuple]:
    small = chain([0, 5, 6, 7, 8, 9, EOS], [11, 12, 13, EOS])
    large = chain([0, 5, 11, 12, 13, EOS], [6, 7, 8, 9, EOS])  # after 5 it writes 11, not 6
    unsure_small = _unsure(small, 5, 6, 10)  # 52 % sure of 6 after 5
    leaning = _unsure(large, 5, 11, 6, 4.6)  # 60 % sure of 11 after 5, 40 % of 6: no rollback of 6
    short = chain([0, 5, 6, EOS], [7, EOS])
    longer = chain([0, 5, 6, 7, EOS])
    return [
        ("fallback", unsure_small, leaning, (0.6, 1.0, 10, False),
         "the small model is unsure after token 5: its 6 is dropped, the large model writes 11"),
        ("rollback", small, large, (0.5, 1.0, 4, False),
         "the small model drafts 5 6 7 8; the large model rejects 6: 6 7 8 are discarded, 11 goes there"),
        ("limit", chain([0, 5, 6, 7, 8, 9, 11, 12, EOS]), chain([0, 5, 6, 7, 8, 9, 11, 12, EOS]),
         (0.5, 1.0, 3, False), "both models agree; the large model runs after every 3 small tokens"),
        ("end", short, longer, (0.5, 1.0, 10, True),
         "the small model ends early (5 6 EOS); with verify_end the large model checks it and writes 7"),
    ]  # fmt: skip


def _unsure(m: Markov, after: int, mine: int, other: int, second: float = 4.9) -> Markov:
    """m, but torn between `mine` (logit 5) and `other` (logit `second`) after token `after`."""
    t = m.table.clone()
    t[after] = -30.0
    t[after, mine], t[after, other] = 5.0, second
    return Markov(t, eos=EOS, name="fake")


def _calls(log: list) -> list[tuple]:
    """(who, sequence length) of every forward in a Recorded log."""
    return [(e[1], len(e[2])) for e in log if e[0] == "forward"]


def _fake_case(fn, name, small, large, st, what) -> None:
    fb, rb, limit, ve = st
    log_r, log_s = [], []
    want, _ = D.bild(Recorded(small, "S", log_r), Recorded(large, "L", log_r), [3], fallback=fb,
                      rollback=rb, max_small_steps=limit, verify_end=ve, max_new_tokens=32)  # fmt: skip
    s, lg = Recorded(small, "S", log_s), Recorded(large, "L", log_s)
    args = f"alpha_fb={fb}, alpha_rb={rb}, limit={limit}, verify_end={ve}"
    try:
        got = list(fn(s, lg, [3], fb, rb, limit=limit, max_new_tokens=32, verify_end=ve))
    except NotImplementedError:
        raise
    except Exception as e:
        raise Failed(f"case {name!r} ({what}; {args}): your loop raised {type(e).__name__}: {e}."
                     f"{_crop_hint(log_s, log_r)}") from None  # fmt: skip
    where = f"case {name!r} ({what}; {args})"
    if got != want:
        raise Failed(f"{where}: you wrote {_ids(got)}, decoding.bild writes {_ids(want)}. "
                     f"{_diagnose(name, got, want, log_s, log_r)}")  # fmt: skip
    for m, who in ((small, "small"), (large, "large")):
        if m.ids != ([0] + want)[: len(m.ids)]:
            raise Failed(f"{where}: the output is right, but the {who} model's cache ends holding "
                         f"{_ids(m.ids)}, not a prefix of [bos] + output: after a rollback crop both "
                         "models to the kept tokens")  # fmt: skip
    mine, ref = _calls(log_s), _calls(log_r)
    if mine != ref:
        i = next((i for i, (a, b) in enumerate(zip(mine, ref, strict=False)) if a != b),
                 min(len(mine), len(ref)))
        raise Failed(f"{where}: the output is right, but the calls differ from decoding.bild's at call "
                     f"{i + 1}: yours {_fmt(mine[i:i + 3])}, decoding.bild {_fmt(ref[i:i + 3])} "
                     "(who, sequence length). " + _calls_hint(name))  # fmt: skip


def _ids(ids) -> str:
    return "[" + " ".join("EOS" if t == EOS else str(t) for t in ids) + "]"


def _fmt(calls) -> str:
    return ", ".join(f"{'small' if w == 'S' else 'large'}@{n}" for w, n in calls) or "none"


def _crop_hint(log, ref_log) -> str:
    """Which model's cache the loop never cropped, where decoding.bild did."""
    never = [w for w in ("S", "L") if any(e[:2] == ("crop", w) for e in ref_log)
             and not any(e[:2] == ("crop", w) for e in log)]  # fmt: skip
    if not never:
        return ""
    who = {"S": "the small model", "L": "the large model"}
    who = " and ".join(who[w] for w in never) + (" (both caches)" if len(never) == 2 else "")
    return (f" Your loop never called crop() on {who} after the rollback, so a cache still holds "
            "the discarded tokens and the next call runs the wrong tokens (or none).")  # fmt: skip


def _diagnose(name, got, want, log, ref_log) -> str:
    if name == "end" and got == want[:2] + [EOS]:
        return ("With verify_end, when decoding ends the large model checks the small tokens it has "
                "not seen (here 5 6 EOS) in one last call.")  # fmt: skip
    if not any(e[:2] == ("forward", "L") for e in log) and any(e[:2] == ("forward", "L") for e in ref_log):
        return ("Your loop never ran the large model; decoding.bild runs it on a fallback, and after "
                "`limit` small tokens in a row.")  # fmt: skip
    if name == "fallback" and got[1:2] == [6]:
        return ("On a fallback the small token is dropped and the large model writes that position "
                "(your output keeps the small model's 6 there).")  # fmt: skip
    if name == "rollback" and got[:2] == [5, 6]:
        return ("The large model's token goes at m, the first rejected position (here the second "
                "token): check the index you cut the sequence at.")  # fmt: skip
    if name == "rollback" and {6, 7, 8} & set(got):
        return ("A rollback discards every drafted token from m on: your output keeps "
                f"{_ids([t for t in got if t in (6, 7, 8)])} of the discarded 6 7 8.")  # fmt: skip
    crop = _crop_hint(log, ref_log)
    if crop:
        return crop.strip()
    i = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return f"The first difference is at output position {i}."


def _calls_hint(name: str) -> str:
    if name == "limit":
        return "After `limit` small tokens in a row the large model runs (and the count starts again)."
    return "Each model runs the tokens its cache has not seen, in one call: seq[len(model.ids):]."


def check_loop(fn, small=None, large=None, sources: list[list[int]] = (), fb: float = 0.5,
               rb: float = 1.0, max_new_tokens: int = 64) -> Result:  # fmt: skip
    """Exercise 3: the fake scenarios, then (given the real pair) the sources against
    decoding.bild at (fb, rb), and the two limits."""

    def body():
        for case in scenarios():
            _fake_case(fn, *case)
        if small is None:
            return f"right on the {len(scenarios())} fake cases"
        runs = [
            (f"α_FB = {fb}, α_RB = {rb}", dict(alpha_fb=fb, alpha_rb=rb),
             lambda x: D.bild(small, large, x, fb, rb, max_new_tokens=max_new_tokens)[0]),
            ("α_FB = 0, no limit (small greedy)", dict(alpha_fb=0.0, alpha_rb=rb, limit=None),
             lambda x: D.vanilla(small, x, max_new_tokens=max_new_tokens)[0]),
            ("α_RB = 0 with verify_end (large greedy)", dict(alpha_fb=fb, alpha_rb=0.0, verify_end=True),
             lambda x: D.vanilla(large, x, max_new_tokens=max_new_tokens)[0]),
        ]  # fmt: skip
        for what, kw, ref in runs:
            bad, kw = [], {"limit": 10, "verify_end": False} | kw
            for i, x in enumerate(sources):
                got = list(fn(small, large, x, max_new_tokens=max_new_tokens, **kw))
                if got != list(ref(x)):
                    bad.append(i)
            if bad:
                raise Failed(f"on the shipped pair at {what}, {len(bad)} of {len(sources)} sentences differ "
                             f"from the reference (the first: sentence {bad[0]}); the fake cases pass, so "
                             "look at what they leave out (ties, max_new_tokens, the EOS test)")  # fmt: skip
        return (f"right on the {len(scenarios())} fake cases and on {len(sources)} sentences "
                f"at α_FB = {fb}, α_RB = {rb} and at both limits")  # fmt: skip

    return run("3 BiLD loop", body)
