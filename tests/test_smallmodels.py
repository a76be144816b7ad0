"""bildlib.bench.smallmodels and the candidate small models ("student:<label>"): names, errors, the
configurations of the study, and its table's picks on a hand-made sweep."""

import pandas as pd
import pytest

from bildlib import experiments as X
from bildlib.bench import smallmodels as S
from bildlib.experiments import presets
from bildlib.experiments.runner import with_checkpoints


def test_candidates_are_small_models_named_at_run_time():
    assert presets.is_small("student:dec2") and presets.is_small("aligned") and not presets.is_small("large")
    assert not presets.is_candidate("student:") and not presets.is_candidate("studentdec2")
    with pytest.raises(ValueError, match=r"model must be one of .* or 'student:<label>', got 'student:'"):
        X.Config("bild", "student:", 0.5, 1.0)
    big = "data/checkpoints/multi30k-large"
    p = with_checkpoints(presets.get("multi30k"), {"student:a": "data/checkpoints/not-built", "large": big})
    assert dict(p.candidates) == {"student:a": "data/checkpoints/not-built"}
    missing = r"student:a: data/checkpoints/not-built does not exist; `make models-candidates`"
    with pytest.raises(FileNotFoundError, match=missing):
        p.model("student:a")
    with pytest.raises(ValueError, match=r"no checkpoint for model 'student:b': pass checkpoints="):
        p.model("student:b")
    with pytest.raises(ValueError, match=r"checkpoints: keys must be .* or 'student:<label>'"):
        with_checkpoints(p, {"teacher": "x"})
    with pytest.raises(FileNotFoundError, match=r"candidates: 'w9': data/checkpoints/nope does not exist"):
        S.check({"w9": "data/checkpoints/nope"})
    with pytest.raises(ValueError, match="candidates must be a non-empty dict"):
        S.check({})


def test_the_study_configurations():
    labels = [c.label for c in S.configs(["a", "b"], [0.4, 0.6], [0.5])]
    assert labels == [
        "bild-student:a-fb0.4-rb1.0", "bild-student:a-fb0.6-rb1.0", "bild-student:a-fb0.5-rb1.0-exact",
        "bild-student:b-fb0.4-rb1.0", "bild-student:b-fb0.6-rb1.0", "bild-student:b-fb0.5-rb1.0-exact",
    ]  # fmt: skip
    grid = S.configs(["b"], [0.4], [0.5], limits=(10, 16))
    assert [c.label for c in grid] == [
        "bild-student:b-fb0.4-rb1.0", "bild-student:b-fb0.5-rb1.0-exact",
        "bild-student:b-fb0.4-rb1.0-max16", "bild-student:b-fb0.5-rb1.0-max16-exact",
    ]  # fmt: skip


def test_the_table_picks_the_fastest_within_the_tolerance(monkeypatch):
    """A hand-made summary: the fastest configuration more than 0.5 below vanilla large is not the
    best; the fastest lossless one is, whatever its α_FB."""
    rows = [("vanilla-large", "vanilla", "large", None, 30.0, 1.0),
            ("vanilla-student:a", "vanilla", "student:a", None, 25.0, 6.0),
            ("bild-student:a-fb0.4-rb1.0", "bild", "student:a", 0.4, 29.0, 2.5),
            ("bild-student:a-fb0.6-rb1.0", "bild", "student:a", 0.6, 29.6, 1.9),
            ("bild-student:a-fb0.7-rb1.0", "bild", "student:a", 0.7, 29.8, 1.7),
            ("bild-student:a-fb0.4-rb1.0-exact", "bild", "student:a", 0.4, 30.0, 1.4),
            ("bild-student:a-fb0.6-rb1.0-exact", "bild", "student:a", 0.6, 30.0, 1.5)]  # fmt: skip
    s = pd.DataFrame(rows, columns=["label", "method", "model", "fallback", "score", "speedup"])
    s = s.assign(speedup_lo=s["speedup"] - 0.1, speedup_hi=s["speedup"] + 0.1)
    df = pd.DataFrame({"label": s["label"], "method": s["method"], "model": s["model"], "large_calls": 3.0,
                       "small_calls": 12.0, "max_small_steps": [None, None, 10, 10, 10, 10, 10]})  # fmt: skip
    monkeypatch.setattr(S, "summarize", lambda _: s.copy())
    every, head = S.table(df, 0.5)
    (r,) = head.to_dict("records")
    assert (r["best_fb"], r["best_speedup"], r["best_bleu"]) == (0.6, 1.9, 29.6)
    assert (r["lossless_fb"], r["lossless_speedup"]) == (0.6, 1.5)
    assert (r["bleu_alone"], r["large_bleu"]) == (25, 30)
    assert len(every) == 5 and every["lossless"].sum() == 2
    assert S.winner(head) == "a"
    two = pd.DataFrame({"candidate": ["a", "b", "b"], "max_small_steps": [10, 10, 16],
                        "best_speedup": [1.9, 1.8, 2.5], "lossless_speedup": [1.2, 1.6, 1.7]})  # fmt: skip
    assert S.winner(two) == "a"  # at the paper's limit of 10
    assert S.winner(two.assign(best_speedup=float("nan"))) == "b"  # none within: the best lossless


def test_pets_table_sets_its_reported_figures_beside_ours():
    from bildlib.reports import petstudy

    prof = pd.DataFrame({"label": ["kd", "full", "none", "pairs"], "params_m": [2.1, 1.2, 2.6, 1.6],
                         "bleu": [36.0, 33.0, 35.0, 34.5], "agreement": 0.8, "ece": 0.05})  # fmt: skip
    t = petstudy.table(prof)
    assert list(t["label"]) == ["none", "pairs", "full"]  # the ablations only, in PET's order
    assert list(t["bleu_vs_none"]) == [0.0, -0.5, -2.0]
    assert t["params_vs_none"].iloc[1] == pytest.approx(1.6 / 2.6)
    assert list(t["pet_reported_bleu"].fillna(0)) == [34.24, 34.57, 0]
    assert t["pet_reported_vs_none"].iloc[1] == pytest.approx(0.33)
    assert pd.isna(t["pet_reported_vs_none"].iloc[2])  # PET reports no row of its own there
    assert petstudy.checks(t) == {"runs": ["none", "pairs", "full"], "sharing_has_fewer_parameters": True,
                                  "matrix_pairs_remove_more": True}  # fmt: skip
    with pytest.raises(ValueError, match="the profile has none of PET's ablations"):
        petstudy.table(prof[prof["label"] == "kd"])
