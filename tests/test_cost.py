"""Fig. 8's cost model against real forwards (FlopCounterMode, parameter storage), the calls it
is fed (recorded behind a sweep's rows), the roofline projection, and Table 5's seed tables."""

import pandas as pd
import pytest
import torch

from bildlib import experiments as X
from bildlib.analysis import cost, roofline
from bildlib.analysis import sampled as S
from bildlib.models import LM
from conftest import PRESET, REPO, tiny_model, tiny_tokenizer

SHIPPED = {m: REPO / "data" / "checkpoints" / f"multi30k-{m}" for m in ("small", "large")}


def gated_untied():
    """A tiny mT5-shaped model: gated-GELU FFN, untied head (the paper presets' shape)."""
    import transformers as tf

    torch.manual_seed(0)
    cfg = tf.MT5Config(d_model=32, d_ff=48, d_kv=8, num_heads=3, num_layers=2, num_decoder_layers=3,
                       vocab_size=40, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                       decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)  # fmt: skip
    return LM(tf.MT5ForConditionalGeneration(cfg), tiny_tokenizer(), "mt5-tiny")


@pytest.fixture(scope="module")
def models():
    """Both shipped models and two tiny ones (T5 relu, mT5 gated with an untied head)."""
    out = {
        "t5-tiny": LM(tiny_model("t5", seed=1, d=48), tiny_tokenizer(), "t5-tiny"),
        "mt5-tiny": gated_untied(),
    }
    for m, path in SHIPPED.items():
        if not (path / "model.safetensors").is_file():
            pytest.skip(f"multi30k-{m} is not trained yet (make models)")
        out[f"shipped-{m}"] = LM.from_pretrained(path, dtype="float32")
    return out


def eager(lm: LM) -> LM:
    """The model's own forward (engine "hf"), attention as explicit matmuls: FlopCounterMode counts
    those, not a CPU's scaled_dot_product_attention. The formula counts the model's arithmetic as
    the paper does; the lean engine folds cross-attention per source (docs/engines.md), which
    moves work from every call into the first."""
    lm.model.set_attn_implementation("eager")
    return LM(lm.model, lm.tok, lm.name, engine="hf")


def counted(lm: LM, tokens: list[int]) -> float:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        lm.forward(tokens)
    return fc.get_total_flops()


def test_flops_match_flop_counter_on_real_forwards(models):
    """Three calls per model: the first (encoder, cross K/V, 1 token), a 4-token call after 1
    cached token, a 1-token call after 5: every formula's term is exercised."""
    for name, lm in models.items():
        a, lm = cost.Arch.of(lm.model.config), eager(lm)
        source = [5, 9, 13, 17, 21, 25, 29, 33, 37, 4, 1][: 11 if "tiny" not in name else 7]
        bos = lm.start(source)
        for tokens, past, first in (([bos], 0, True), ([6, 7, 8, 9], 1, False), ([10], 5, False)):
            got = counted(lm, tokens)
            want = cost.call(a, len(tokens), past, len(source), first)["flops"]
            assert abs(want - got) <= 0.05 * got, (
                f"{name}, call after {past}: formula {want:.4g}, counted {got:.4g}"
            )


def test_weight_bytes_are_the_parameters_storage(models):
    for name, lm in models.items():
        m, a = lm.model, cost.Arch.of(lm.model.config)
        p = a.params()
        assert sum(p.values()) == m.num_parameters(), name
        named = dict(m.named_parameters())  # a tied tensor once, under its first name (shared.weight)
        part = lambda prefix, named=named: sum(t.numel() for n, t in named.items() if n.startswith(prefix))  # noqa: E731
        assert p["embedding"] == m.shared.weight.numel()
        assert p["encoder"] == part("encoder."), name  # the tied input embedding is counted once, as shared
        assert p["decoder"] == part("decoder."), name
        storage = sum(t.numel() * t.element_size() for t in m.parameters())
        first, later = (cost.call(a, 1, past, 9, past == 0) for past in (0, 1))
        cross_kv = a.dec_layers * 2 * a.d * a.inner * 4
        if a.tied:  # the first call multiplies every matrix; a later one skips the encoder and cross K/V
            assert first["weight_bytes"] == storage, name
            assert later["weight_bytes"] == storage - 4 * p["encoder"] - cross_kv, name
        else:  # untied: the embedding is read only at the rows looked up (9 source + 1 decoder)
            assert first["weight_bytes"] == storage - 4 * (a.vocab - 10) * a.d, name


def test_cost_model_errors_and_the_paper_shapes():
    with pytest.raises(ValueError, match="covers T5 and mT5"):
        cost.Arch.of(tiny_model("gpt2", seed=0).config)
    with pytest.raises(ValueError, match="k >= 1"):
        cost.call(cost.MT5["mt5-small"], 0, 0, 5, True)
    # mT5-large has about 1.2 B parameters and mT5-small about 300 M (their model cards)
    assert 1.1e9 < sum(cost.MT5["mt5-large"].params().values()) < 1.3e9
    assert 2.8e8 < sum(cost.MT5["mt5-small"].params().values()) < 3.2e8
    a = cost.MT5["mt5-large"]
    one, ten = cost.call(a, 1, 20, 30, False, 2), cost.call(a, 10, 20, 30, False, 2)
    assert ten["weight_bytes"] == one["weight_bytes"] + 9 * a.d * 2  # weights read once per call
    assert 9 < ten["flops"] / one["flops"] < 10.5 and ten["intensity"] > 8 * one["intensity"]
    assert one["layers"] == 25 and cost.call(a, 1, 0, 30, True)["layers"] == 50  # + the encoder's


def test_calls_behind_a_sweeps_rows(env):
    grid = [X.bild("aligned", 0.5, 1.0)]
    df = X.sweep(
        PRESET, grid, n_examples=6, baseline_repeats=1, progress=False, settings=X.RunSettings(results=env)
    )
    models = X.Models(X.with_checkpoints(X.presets.get(PRESET), None))
    forward = LM.forward
    for c in (X.vanilla("large"), grid[0]):
        rows = df[df["label"] == c.label]
        calls = X.calls_of(PRESET, c, models, rows)
        assert LM.forward is forward and "forward" not in vars(models["large"])  # unwrapped again
        for _, g in calls.groupby(["id", "model"]):
            assert g["first"].tolist() == [True] + [False] * (len(g) - 1)  # the encoder runs once
            assert (g["source"] == g["source"].iloc[0]).all() and (g["k"] >= 1).all()
        per = calls.groupby("id").size()
        assert (per.values == (rows["small_calls"] + rows["large_calls"]).values).all()
        if c.method == "vanilla":  # one token per call over a cache that grows by one
            assert (calls["k"] == 1).all()
            assert (
                calls.groupby("id")["past"].apply(list) == rows.set_index("id")["tokens"].map(range).map(list)
            ).all()
        else:
            big = calls[calls["model"] == "large"]
            assert (
                big.groupby("id")["k"].sum().reindex(rows["id"], fill_value=0).tolist()
                == rows["large_call_tokens"].tolist()
            )
    wrong = rows.copy()
    wrong.loc[wrong.index[0], "output_ids"] = [3]
    with pytest.raises(ValueError, match="example 0: decoding again gave"):
        X.calls_of(PRESET, grid[0], models, wrong)
    with pytest.raises(ValueError, match="greedy decoding only"):
        X.calls_of(
            PRESET, X.bild("aligned", 0.5, 1.0, sampling=X.sampling_of("sampled", 1.0, 0.8, 0)), models, rows
        )
    with pytest.raises(ValueError, match="rows must be the sweep rows"):
        X.calls_of(PRESET, X.vanilla("large"), models, rows)


def test_roofline_projection():
    g = roofline.GPU("toy", tflops=1.0, bandwidth=1.0, source="test")  # 1e12 FLOP/s, 1e9 B/s
    c = pd.DataFrame(
        {"flops": [1e12, 1e9], "bytes": [1e6, 1e9], "layers": [1, 3]}
    )  # compute-bound 1 s, memory-bound 1 s
    assert roofline.predict(c, g, 0.0) == pytest.approx(2.0)
    assert roofline.predict(c, g, 0.5) == pytest.approx(4.0)  # plus 0.5 s per layer run
    runs = {"base": pd.concat([c] * 3), "fast": c}
    p = roofline.projection(runs, "base", [0.0, 1e6], {"toy": g})
    assert p["speedup"].tolist() == pytest.approx([3.0, 3.0]) and set(p["run"]) == {"fast"}
    with pytest.raises(ValueError, match="baseline 'nope'"):
        roofline.projection(runs, "nope", [0.0])
    for gpu in roofline.GPUS.values():  # each peak names where it comes from
        assert "datasheet" in gpu.source and f"{gpu.tflops:,.0f}" in gpu.source.replace(",", "")


def test_table5_over_seeds_and_rows():
    def summary(seed, shift):
        return pd.DataFrame(
            {"label": [f"vanilla-large-T1-p0.8-s{seed}", f"vanilla-large-T1-p0.8-s{seed}#1"]
             + [f"bild-aligned-fb{f}-rb1.0-T1-p0.8-s{seed}" for f in (0.2, 0.4, 0.6)],
             "method": ["vanilla"] * 2 + ["bild"] * 3, "model": ["large"] * 2 + ["aligned"] * 3,
             "fallback": [None, None, 0.2, 0.4, 0.6], "rollback": [None, None, 1.0, 1.0, 1.0],
             "window": [None] * 5, "repeat": [0, 1, 0, 0, 0],
             "score": [30.0 + shift, 30.0 + shift, 28.5, 29.9, 30.4 + shift],
             "speedup": [0.98, 1.02, 2.0 + shift, 1.6, 1.2], "fallback_pct": [0, 0, 10, 20, 30],
             "rollback_pct": [0, 0, 5, 3, 1]}
        )  # fmt: skip

    agg = S.over_seeds({0: summary(0, 0.0), 1: summary(1, 0.2)})
    v = agg[agg["method"] == "vanilla"].iloc[0]
    assert (
        v["config"] == "vanilla-large-T1-p0.8" and v["score_mean"] == pytest.approx(30.1) and v["seeds"] == 2
    )
    assert v["score_std"] == pytest.approx(0.1414, abs=1e-3)  # sample standard deviation
    t = S.nucleus_table(agg).set_index("row")
    assert t.loc["BiLD (better score)", "config"] == "bild-aligned-fb0.6-rb1.0-T1-p0.8"  # 30.5 > 30.1
    assert t.loc["BiLD (about the same)", "config"] == "bild-aligned-fb0.4-rb1.0-T1-p0.8"  # 0.2 below
    assert t.loc["BiLD (≈ 1 point lower)", "speedup_mean"] == pytest.approx(1.6)  # 28.5 is 1.6 below
    assert t.loc["Vanilla (large)", "speedup_mean"] == 1.0
    with pytest.raises(ValueError, match="at least 2 seeds"):
        S.over_seeds({0: summary(0, 0.0)})
    with pytest.raises(ValueError, match="missing from some seeds"):
        S.over_seeds({0: summary(0, 0.0), 1: summary(1, 0.0).iloc[:-1]})
