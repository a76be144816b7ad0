"""verify_end_below (docs/decoding.md): BiLD checks the small tokens left unchecked at the end only when
one of them had max probability below a threshold. On fake models with known logits
(bildlib.notebook.tutorial.fakes): a no-op when the small model ends where the large model would, and no
EOS the large model would roll back once the rule has the large model look."""

from __future__ import annotations

import random

import pytest
import torch

from bildlib import decoding as D
from bildlib import experiments as X
from bildlib.notebook.tutorial.fakes import EOS, Scripted

FB, RB = 0.5, 1.0


def decode(small, large, **kw):
    return D.bild(small, large, [3], fallback=FB, rollback=RB, max_new_tokens=24, **kw)


def large_rejects_eos(large: Scripted, out: list[int]) -> bool:
    """Whether the large model, shown the output up to its final EOS, would roll that EOS back
    under BiLD's greedy rule: its own token differs and -log p_L(EOS) > α_RB."""
    logp = torch.log_softmax(large.next_logits([0] + out[:-1]), -1)
    return int(logp.argmax()) != EOS and float(-logp[EOS]) > RB


def p_small(small: Scripted, i: int) -> float:
    """The small model's max probability at output position i (past its script: EOS at 0.95)."""
    return small.p[i] if i < len(small.p) else 0.95


def scenario(rng: random.Random, early_eos: bool) -> tuple[Scripted, Scripted]:
    """A large script of 4-9 tokens, and a small model that agrees with it except at a few
    positions, where it is unsure (p below α_FB, so a fallback lets the large model fix them).
    early_eos: the small model writes EOS, confident or not, where the large model goes on."""
    n = rng.randint(4, 9)
    big = [rng.randint(2, 15) for _ in range(n)]
    ps = [rng.choice([0.55, 0.7, 0.85, 0.95, 0.99]) for _ in range(n)]
    little = list(big)
    for i in rng.sample(range(n), rng.randint(0, 2)):  # unsure and wrong: falls back there
        little[i], ps[i] = (big[i] % 14) + 2, 0.3
    if early_eos:
        cut = rng.randint(2, n - 1)
        little, ps = little[:cut] + [EOS], ps[:cut] + [rng.choice([0.6, 0.8, 0.95])]
    else:
        little, ps = little + [EOS], ps + [rng.choice([0.6, 0.8, 0.95])]
    return Scripted(little, ps, "small"), Scripted(big, 0.9, "large")


@pytest.mark.parametrize("below", [FB, 0.9, 1.0])
def test_no_op_when_the_small_model_ends_where_the_large_model_does(below):
    """The small model's EOS comes where the large model's does, and the large model agrees with
    every kept small token: the output equals Algorithm 1's, whatever the threshold (the check,
    when it runs, accepts the tail)."""
    rng = random.Random(0)
    checked = 0
    for _ in range(200):
        small, large = scenario(rng, early_eos=False)
        ref, tr_ref = decode(small, large)
        out, tr = decode(small, large, verify_end_below=below)
        assert out == ref == large.script + [EOS]
        assert tr.rollbacks == tr_ref.rollbacks and tr.large_calls - tr_ref.large_calls in (0, 1)
        checked += tr.large_calls - tr_ref.large_calls
    assert checked > 0 if below > FB else checked == 0  # every kept p is >= α_FB: never checks


def test_never_an_eos_the_large_model_rejects_once_it_looks():
    """The small model ends early. Whenever a final small token was below the threshold, the large
    model checks the tail, and no output ends in an EOS the large model would roll back; a tail
    whose every token is at or above the threshold stands, as in Algorithm 1 (the rule's own
    definition)."""
    rng = random.Random(1)
    seen = {"checked": 0, "trusted": 0}
    for _ in range(300):
        small, large = scenario(rng, early_eos=True)
        for below in (0.7, 0.9, 1.0):
            out, tr = decode(small, large, verify_end_below=below)
            assert out[-1] == EOS  # every script ends
            ran = len(large.ids) - 1  # output tokens the large model has run, in its final cache
            if tr.source[-1] == "L" or ran == len(out):  # the large model wrote or checked the EOS
                seen["checked"] += 1
                assert not large_rejects_eos(large, out)
            else:  # the small tokens after the large model's last look: each at or above the threshold
                seen["trusted"] += 1
                k = ran + (tr.source[ran] == "L")  # the large model's own last token is not in its cache
                assert set(tr.source[k:]) == {"S"}
                assert min(p_small(small, i) for i in range(k, len(out))) >= below
    assert seen["checked"] > 0 and seen["trusted"] > 0
    # Algorithm 1 itself does end early on these: the rule is what removes it
    rejected = 0
    for _ in range(100):
        small, large = scenario(rng, early_eos=True)
        out, _ = decode(small, large)
        rejected += large_rejects_eos(large, out)
    assert rejected > 0


def test_threshold_one_is_verify_end_and_alpha_fb_is_algorithm_1():
    rng = random.Random(2)
    for _ in range(100):
        small, large = scenario(rng, early_eos=rng.random() < 0.5)
        for a, b in [({"verify_end_below": 1.0}, {"verify_end": True}), ({"verify_end_below": FB}, {})]:
            (x, tx), (y, ty) = decode(small, large, **a), decode(small, large, **b)
            timing = ("small_s", "large_s")
            assert x == y and tx.source == ty.source
            assert {k: v for k, v in tx.counters().items() if k not in timing} == {
                k: v for k, v in ty.counters().items() if k not in timing
            }


def test_bad_settings_name_the_parameter():
    small, large = Scripted([5, EOS]), Scripted([5, EOS])
    for kw, match in [
        ({"verify_end_below": 1.5}, "verify_end_below must be a number in"),
        ({"verify_end_below": float("nan")}, "verify_end_below must be a number in"),
        ({"verify_end_below": 0.9, "rollback": None}, "verify_end_below needs rollback"),
        ({"verify_end_below": 0.9, "verify_end": True}, "verify_end_below: the end is already"),
        ({"verify_end_below": 0.9, "distance": "exact"}, "verify_end_below: the end is already"),
        ({"verify_end_below": 0.9, "rules": "authors"}, "has no verify_end_below"),
    ]:
        with pytest.raises(ValueError, match=match):
            D.bild(small, large, [3], **({"fallback": FB, "rollback": RB} | kw))
    c = X.Config("bild", "aligned", 0.4, 1.0, verify_end_below=0.9)
    assert c.label == "bild-aligned-fb0.4-rb1.0-verify-below0.9"
    with pytest.raises(ValueError, match="verify_end_below"):
        X.Config("bild", "aligned", 0.4, 1.0, verify_end_below=0.9, verify_end=True)


def test_bench_targets_pick_rows_by_rule_and_quality():
    """bildlib.reports.bench reads the three benchmarks off a peers table: the fastest row within 0.5 BLEU
    (lossless rows aside), lossless against tuned assisted generation, and the new end rule
    against verify_end, each within 0.5 BLEU and at equal BLEU."""
    import pandas as pd

    from bildlib.analysis import targets
    from bildlib.reports import bench

    def row(label, method, score, ms, verify=False, below=None, ran_on="lean", model="aligned"):
        return {"label": label, "method": method, "model": model, "score": score, "ms": ms,
                "ran_on": ran_on, "verify_end": verify, "verify_end_below": below,
                "speedup_same_engine": 100 / ms, "speedup_lo": 90 / ms, "speedup_hi": 110 / ms,
                "fallback": 0.4, "rollback": 1.0, "large_calls_per_sentence": 3.0,
                "small_calls_per_sentence": 15.0, "loop_pct": 6.0, "fallback_pct": 10.0,
                "rollback_pct": 5.0}  # fmt: skip

    every = pd.DataFrame([
        row("vanilla-large", "vanilla", 38.0, 100, model="large"),
        row("hf-assisted-aligned-n8-c0.4", "assisted", 38.0, 80, ran_on="hf"),
        row("hf-assisted-aligned-ndefault-cdefault", "assisted", 38.0, 70, ran_on="hf"),  # not tuned
        row("bild-aligned-fb0.4-rb1.0-exact", "bild", 38.0, 60),
        row("bild-aligned-fb0.4-rb1.0", "bild", 36.0, 40),  # fastest, but 2 BLEU down
        row("bild-aligned-fb0.4-rb1.0-verify", "bild", 38.1, 58, verify=True),
        row("bild-aligned-fb0.5-rb1.0-verify", "bild", 37.7, 62, verify=True),
        row("bild-aligned-fb0.4-rb1.0-verify-below0.9", "bild", 37.6, 55, below=0.9),
    ])  # fmt: skip
    t = bench.targets(every)
    assert t["speedup"]["row"] == "bild-aligned-fb0.4-rb1.0-verify-below0.9" and not t["speedup"]["met"]
    assert t["lossless_vs_assisted"]["value"] == pytest.approx(60 / 80) and t["lossless_vs_assisted"]["met"]
    assert t["end_rule_gain"]["value"] == pytest.approx(58 / 55) and not t["end_rule_gain"]["met"]
    assert t["end_rule_gain_equal_bleu"]["against"] == "bild-aligned-fb0.4-rb1.0-verify"
    rules = set(bench.breakdown(every)["rule"])
    assert rules == {"exact", "Algorithm 1", "verify_end", "verify_end_below 0.9"}
    c = targets.dtype_choice(every, every.assign(score=every["score"] + 0.2), 50.0, 60.0)
    assert c["delta"] == pytest.approx(-0.2) and not c["auto_is_default"]  # 0.2 BLEU down: stays fp32
    assert "student_speedup" not in t  # no student in the run: no student bars
    # the student's rows in the same run: its own bars, the aligned model's untouched
    with_student = pd.concat([every, pd.DataFrame([
        row("bild-student-fb0.5-rb1.0", "bild", 37.8, 55, model="student"),  # 1.82x
        row("bild-student-fb0.3-rb1.0", "bild", 36.9, 30, model="student"),  # 1.1 BLEU down
        row("bild-student-fb0.4-rb1.0-exact", "bild", 38.0, 52, model="student"),
    ])], ignore_index=True)  # fmt: skip
    s = bench.targets(with_student)
    assert s["speedup"] == t["speedup"] and s["lossless_vs_assisted"] == t["lossless_vs_assisted"]
    assert s["student_speedup"]["row"] == "bild-student-fb0.5-rb1.0" and not s["student_speedup"]["met"]
    assert s["student_lossless"]["value"] == pytest.approx(100 / 52) and s["student_lossless"]["met"]
