"""bildlib.train.agreement: agreement, the reliability diagram and ECE, by hand and on tiny models."""

import pandas as pd
import pytest

from bildlib import train as T
from bildlib.analysis.evaluate import greedy_ids
from bildlib.models import load_tokenizer
from bildlib.train import agreement as G
from test_train import tiny


def test_ece_and_the_reliability_diagram_by_hand():
    df = pd.DataFrame({"p_max": [0.95, 0.95, 0.55, 0.55, 0.5], "agree": [True, False, True, True, True]})
    r = G.reliability(df).set_index("bin")
    assert list(r.index) == [5, 9] and list(r["n"]) == [3, 2]  # 0.5 falls in [0.5, 0.6)
    assert r.loc[9, "confidence"] == pytest.approx(0.95) and r.loc[9, "agreement"] == 0.5
    assert r.loc[5, "confidence"] == pytest.approx((0.55 + 0.55 + 0.5) / 3) and r.loc[5, "agreement"] == 1
    expected = 3 / 5 * abs(1 - (0.55 + 0.55 + 0.5) / 3) + 2 / 5 * abs(0.5 - 0.95)
    assert G.ece(df) == pytest.approx(expected)
    one = pd.DataFrame({"p_max": [1.0], "agree": [True]})
    assert G.reliability(one)["bin"].tolist() == [9]  # 1.0 goes in the last bin
    assert G.summary(df)["agreement"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="bins must be >= 1"):
        G.reliability(df, 0)


def test_a_model_agrees_with_its_own_greedy_outputs(tmp_path, multi30k_dir):
    """Teacher-forced on its own greedy outputs, a model's argmax is the next token everywhere
    (an off-by-one between logits and targets would break this); another model agrees less."""
    tok = load_tokenizer(T.checkpoint_path(T.TrainConfig.tokenizer))
    a, b = (T.build_model(tiny(tmp_path, seed=s), tok).eval() for s in (0, 1))
    sources = T.data.load_multi30k("val").sources[:6]
    ids = greedy_ids(a, tok, sources, batch_size=4, max_new_tokens=12)
    assert all(0 < len(x) <= 12 for x in ids)
    df = G.positions(a, tok, sources, ids, batch_size=4)
    assert len(df) == sum(map(len, ids)) and df["agree"].all()
    assert ((df["p_max"] > 0) & (df["p_max"] <= 1)).all()
    assert G.positions(b, tok, sources, ids)["agree"].mean() < 1
    with pytest.raises(ValueError, match="6 sources but 5 targets"):
        G.positions(a, tok, sources, ids[:5])
