"""The course tutorial: its checks pass the solutions, fail the blanks with a message, and catch
the classic wrong answers, each with its own reason; the recorder tells a decode as
decoding.bild's Trace counts it; the handout and the course's source notebook run with papermill."""

import inspect
import json

import pandas as pd
import pytest
import torch

from bildlib import decoding as D
from bildlib.notebook.tutorial import checks as C
from bildlib.notebook.tutorial import checks_loop as CL
from bildlib.notebook.tutorial import fakes, record
from conftest import CELL_TIMEOUT, REPO, course_solutions

S = course_solutions()

CHECKS = {
    "1 fallback": (C.check_fallback, S.should_fall_back),
    "2 rollback position": (C.check_rollback, S.rollback_position),
    "3 BiLD loop": (CL.check_loop, S.bild_loop),
    "4 predicted speedup": (C.check_predict, S.predict_speedup),
    "5 sweep row": (C.check_sweep_row, S.sweep_row),
}


def mutant(fn, old: str, new: str):
    """fn (a solution) with one piece of its source replaced: a student's wrong answer."""
    src = inspect.getsource(fn)
    assert old in src, old
    ns = dict(vars(S))
    exec(src.replace(old, new), ns)
    return ns[fn.__name__]


def test_solutions_pass_and_blanks_fail_with_a_message(capsys):
    def blank(*args, **kw):
        raise NotImplementedError("exercise: your code here")

    assert set(CHECKS) == set(C.EXERCISES)
    for name, (check, solution) in CHECKS.items():
        ok, no = check(solution), check(blank)
        assert ok.passed and ok.exercise == name, ok
        assert not no.passed and no.message == "not done yet (exercise: your code here)", no
    out = capsys.readouterr().out
    assert out.count("PASS  exercise") == 5 and out.count("FAIL  exercise") == 5
    assert "Traceback" not in out


# (check, wrong answer, what its message must say): the four, and the other classics
ROLLBACK = "            small.crop(min(len(small.ids), first + m))\n            large.crop(first + m)\n"
WRONG = {
    "off-by-one rollback position": (
        C.check_rollback, mutant(S.rollback_position, "return m\n", "return m + 1\n"), "Off by one: row i"),
    "rows shifted by one (logits[1:])": (
        C.check_rollback, mutant(S.rollback_position, "logits[:-1]", "logits[1:]"),
        "returned 0; the answer is None"),
    "rollback wherever d > α_RB": (
        C.check_rollback, mutant(S.rollback_position, "logp[m].argmax().item() != y and ", ""),
        "putting it back changes nothing"),
    "rollback keeps the tokens after m": (
        CL.check_loop, mutant(S.bild_loop, "            del seq[first + m :]\n",
                              "            seq[first + m] = int(logits[m].argmax())\n            continue\n"),
        "your output keeps [7 8] of the discarded 6 7 8"),
    "rollback drops only y_m": (
        CL.check_loop, mutant(S.bild_loop, "del seq[first + m :]", "del seq[first + m : first + m + 1]"),
        "your output keeps [7 8] of the discarded 6 7 8"),
    "rollback cuts one position late": (
        CL.check_loop, mutant(S.bild_loop, "del seq[first + m :]", "del seq[first + m + 1 :]"),
        "check the index you cut the sequence at"),
    "fallback keeps the small token": (
        CL.check_loop, mutant(S.bild_loop, "                continue\n",
                              "                continue\n            seq.append(int(logits.argmax()))\n"),
        "your output keeps the small model's 6 there"),
    "no cache crop after rollback": (
        CL.check_loop, mutant(S.bild_loop, ROLLBACK, ""),
        "never called crop() on the small model and the large"),
    "no crop of the small model": (
        CL.check_loop, mutant(S.bild_loop, "            small.crop(min(len(small.ids), first + m))\n", ""),
        "never called crop() on the small model after"),
    "no limit": (CL.check_loop, mutant(S.bild_loop, "run < limit", "True"), "never ran the large model"),
    "no check at the end": (
        CL.check_loop, mutant(S.bild_loop, "(run == 0 or not verify_end)", "True"), "With verify_end"),
    "limit counted from the start": (
        CL.check_loop, mutant(S.bild_loop, "        run = 0\n        m =", "        m ="),
        "the calls differ"),
    "fallback on the raw logit": (C.check_fallback, lambda x, a: x.max() < a, "answer is keep"),
    "every large call one step": (
        C.check_predict, lambda tr, n, s, c: n * c(1) / (tr.small_calls * s + tr.large_calls * c(1)),
        "every large call costs one step"),
    "latency in seconds": (
        C.check_sweep_row, lambda h, r, t, s: S.sweep_row(h, r, t, s) | {"ms": sum(s) / len(s)},
        "in milliseconds"),
}  # fmt: skip


@pytest.mark.parametrize("wrong", WRONG)
def test_checks_catch_wrong_answers_with_their_reason(wrong):
    check, fn, says = WRONG[wrong]
    r = check(fn)
    assert not r.passed and says in r.message, r.message


def test_fakes_drive_decoding_bild():
    small = fakes.Scripted([5, 6, 7, 1], p=[0.9, 0.9, 0.3, 0.9])  # unsure of its third token
    large = fakes.Scripted([5, 6, 8, 1])
    out, tr = D.bild(small, large, [3], fallback=0.5, rollback=1.0)
    assert out == [5, 6, 8, 1] and tr.source == ["S", "S", "L", "S"] and tr.fallbacks == 1
    assert D.vanilla(large, [3])[0] == [5, 6, 8, 1] and D.vanilla(small, [3])[0] == [5, 6, 7, 1]
    with pytest.raises(ValueError, match="one per script token"):
        fakes.Scripted([5, 6], p=[0.9])
    with pytest.raises(ValueError, match="cannot crop to 5 tokens, the cache holds 4"):
        small.crop(len(small.ids) + 1)


def _check_story(st, ids, tr):
    assert st.seq[1:] == list(ids) and st.writer == tr.source
    assert len(st.dropped) == tr.fallbacks and len(st.discarded) == tr.rollbacks
    assert sum(len(t) for _, t in st.discarded) == tr.rolled_back
    assert [k for w, *_, k in st.calls if w == "L"] == tr.large_call_tokens
    assert sum(w == "S" for w, *_ in st.calls) == tr.small_calls
    assert all(0 <= t0 <= t1 for _, t0, t1, _ in st.calls)


@pytest.mark.parametrize("case", [c[0] for c in CL.scenarios()])
def test_story_tells_what_the_trace_counts(case):
    name, small, large, (fb, rb, limit, ve), _ = next(c for c in CL.scenarios() if c[0] == case)
    log = []
    ids, tr = D.bild(record.Recorded(small, "S", log), record.Recorded(large, "L", log), [3], fb, rb,
                     max_small_steps=limit, verify_end=ve)  # fmt: skip
    st = record.story(log, ids)
    _check_story(st, ids, tr)
    if case == "rollback":
        assert st.discarded == [(1, [6, 7, 8])] and st.writer == ["S", "L", "S", "S", "S"]
    if case == "fallback":
        assert [(p, t) for p, t, _ in st.dropped] == [(1, 6)]


def test_story_on_the_shipped_pair_and_its_picture(shipped_pair, tmp_path):
    from bildlib import plots
    from bildlib.notebook.tutorial import lab as LAB
    from bildlib.notebook.tutorial import picture

    small, large = shipped_pair
    lab = LAB.Lab(small, large, [], [], [], 64)
    texts = ("Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.",
             "Eine Frau mit einem roten Hut kocht in einer kleinen Küche.")
    srcs = [small.encode(s) for s in texts]
    seen = {"fallbacks": 0, "rollbacks": 0}
    for src in srcs:
        for fb, rb in ((0.5, 1.0), (0.8, 0.5), (0.3, 3.0)):
            ids, tr, st = LAB.recorded(lab, src, fb, rb)
            ref, ref_tr = D.bild(small, large, src, fb, rb, max_new_tokens=64)
            assert (ids, tr.source) == (ref, ref_tr.source)  # recording changes nothing
            _check_story(st, ids, tr)
            seen["fallbacks"] += tr.fallbacks
            seen["rollbacks"] += tr.rollbacks
    assert seen["fallbacks"] and seen["rollbacks"]  # the picture's every element was exercised
    fig = picture.trace_figure(st, lambda t: small.tok.convert_ids_to_tokens(int(t)), "t")
    assert plots.save(fig, None, "trace", tmp_path).stat().st_size > 1000


def test_the_explorer_draws_the_decode_its_sliders_name(shipped_pair, monkeypatch):
    from bildlib.notebook.tutorial import explorer as EX
    from bildlib.notebook.tutorial import lab as LAB

    small, large = shipped_pair
    texts = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee."]
    lab = LAB.Lab(small, large, [small.encode(t) for t in texts], texts, texts, 64)
    step, call = 1e-3, lambda k: 5e-3 + 1e-4 * k
    for i, fb, rb in ((0, 0.5, 1.0), (1, 0.9, 0.5)):
        v = EX.view(lab, i, fb, rb, step, call)
        ids, tr = D.bild(small, large, lab.sources[i], fb, rb, max_new_tokens=64)
        n = len(D.vanilla(large, lab.sources[i], max_new_tokens=64)[0])
        assert (v.trace.source, v.trace.large_calls, v.n_large) == (tr.source, tr.large_calls, n)
        assert v.predicted == pytest.approx(LAB.stand_in_predict(tr, n, step, call))
        assert f"{tr.large_calls} large calls" in v.summary() and f"{v.predicted:.2f}x" in v.summary()
    with pytest.raises(ValueError, match="sentence must be in"):
        EX.view(lab, 2, 0.5, 1.0, step, call)
    with pytest.raises(ValueError, match="fallback"):
        EX.view(lab, 0, 1.5, 1.0, step, call)

    drawn, real = [], EX.view

    def spy(lab, i, fb, rb, *a):
        drawn.append((i, fb, rb))
        return real(lab, i, fb, rb, *a)

    monkeypatch.setattr(EX, "view", spy)
    shown = []  # what the cell displays and updates: the sliders, then the summary and picture handles
    monkeypatch.setattr("IPython.display.display", lambda *a, **kw: shown.append(a) or _Handle(shown))
    box = EX.explorer(lab, 0, 0.5, 1.0, step, call)
    sliders = box.children
    assert [s.description for s in sliders] == ["sentence", "α_FB", "α_RB"]
    sliders[1].value = 0.8  # each move redraws that setting
    sliders[0].value = 1
    assert drawn == [(0, 0.5, 1.0), (0, 0.8, 1.0), (1, 0.8, 1.0)]
    assert shown[0] == (box,) and "large calls" in shown[1][0].data
    updates = [a for a in shown if a and a[0] == "update"]
    assert len(updates) == 4 and "large calls" in updates[-2][1].data  # two moves, two handles each


class _Handle:
    """IPython's DisplayHandle as the explorer uses it, recording its updates."""

    def __init__(self, shown: list):
        self.shown = shown

    def update(self, obj) -> None:
        self.shown.append(("update", obj))


def test_loop_check_on_the_shipped_pair(shipped_pair):
    small, large = shipped_pair
    srcs = [small.encode(s) for s in ("Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.")]
    assert CL.check_loop(S.bild_loop, small, large, srcs, 0.5, 1.0).passed


@pytest.fixture(scope="module")
def shipped_pair():
    from bildlib.models import load_pair

    paths = [REPO / "data" / "checkpoints" / f"multi30k-{m}" for m in ("small-aligned", "large")]
    if not all((p / "model.safetensors").is_file() for p in paths):
        pytest.skip("the shipped pair is not trained (make models)")
    torch.set_num_threads(1)
    return load_pair(*map(str, paths), dtype="float32")  # the checks compare token by token


def test_the_blank_handout_runs_to_its_end(shipped_pair, multi30k_dir, tmp_path):
    """The handout's blanks fail every check with its message and the notebook still runs to its
    end, the sweep on the notebook's stand-in rows (the solved notebook runs in test_course)."""
    import papermill

    tiny = {"n_examples": 3, "n_sweep": 4, "alphas": [0.4, 0.8], "threads": 1, "rounds": 3}
    out = tmp_path / "out"
    papermill.execute_notebook(str(REPO / "notebooks" / "tutorial.ipynb"), str(tmp_path / "blank.ipynb"),
                               parameters=tiny | {"out_dir": str(out)}, cwd=str(REPO), progress_bar=False,
                               execution_timeout=CELL_TIMEOUT)  # a cell that hangs fails, named
    doc = json.loads((out / "tutorial_checks.json").read_text())
    assert set(doc["checks"]) == set(C.EXERCISES) and "solutions" not in doc
    assert doc["passed"] == 0, doc
    for c in doc["checks"].values():
        assert not c["passed"] and c["message"].startswith("not done yet")
    for f in ("tutorial_trace.png", "tutorial_sweep.png"):
        assert (out / f).stat().st_size > 1000
    sweep = pd.read_csv(out / "tutorial_sweep.csv")  # the stand-in's rows where the blank fails
    assert sweep["alpha_fb"].tolist() == [0.4, 0.8]
    assert sweep[["bleu", "norm_latency"]].notna().all().all()
