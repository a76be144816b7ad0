"""Batch > 1 (docs/batching.md): every row of bild_batch / vanilla_batch / speculative_batch is what the
batch-1 decoder gives for that source alone, on fakes that force rollbacks in some rows and not
others, on tiny random T5s through the ragged lean engine, and on the shipped pair; bad input."""

import json

import pandas as pd
import pytest
import torch
from test_decoding import shipped, sources  # noqa: F401  (shipped: a fixture)

from bildlib import decoding as D
from bildlib import experiments as X
from bildlib.decoding.batch import bild_batch, speculative_batch, vanilla_batch
from bildlib.experiments import measure
from bildlib.models import LM, load_pair
from bildlib.models.batch import LeanT5Batch, Looped, batched
from bildlib.notebook.tutorial.fakes import EOS, FakeLM, peaked
from conftest import PRESET, REPO, perturbed, save_tiny, tiny_model

# bild settings covering every branch: Algorithm 1, lossless, the ablations, the authors' rules,
# the end checks, a limit of 1 and no limit
SETTINGS = [
    dict(fallback=0.5, rollback=3.0),
    dict(fallback=0.5, rollback=1.0, distance="exact"),
    dict(fallback=0.9, rollback=0.5, max_small_steps=3),
    dict(fallback=0.3, rollback=None),
    dict(fallback=None, rollback=2.0, window=3),
    dict(fallback=0.7, rollback=1.0, rules="authors"),
    dict(fallback=0.5, rollback=1.0, verify_end=True, max_small_steps=None),
    dict(fallback=0.2, rollback=2.0, verify_end_below=0.9, max_small_steps=1),
]


class BySource(FakeLM):
    """A fake whose script depends on the source: row `src[0]` writes scripts[src[0]] with
    confidence p[src[0]] per position, then EOS."""

    def __init__(self, scripts: dict, p: dict, name: str):
        self.scripts, self.p = scripts, p

        def next_logits(seq):
            s, i = self.source[0], len(seq) - 1
            return peaked(*((scripts[s][i], p[s][i]) if i < len(scripts[s]) else (EOS, 0.95)))

        super().__init__(next_logits, name)

    def clone(self):  # what models.batch.Looped makes a row of: its next_logits reads its own source
        return BySource(self.scripts, self.p, self.name)


def fake_pair():
    """Rows 2 and 3: the small model is wrong and unsure (fallback, then rollback of its earlier
    confident wrong token in row 3); rows 4 and 5: small and large agree throughout."""
    large = {2: [5, 6, 7, 8, 9], 3: [5, 6, 7, 8], 4: [9, 9, 9], 5: [4, 5, 6, 7, 8, 9, 10, 11, 12, 4, 5, 6]}
    small = {2: [5, 6, 3, 8, 9], 3: [5, 10, 11, 12], 4: [9, 9, 9], 5: large[5]}
    ps = {2: [0.9, 0.9, 0.4, 0.9, 0.9], 3: [0.9, 0.95, 0.3, 0.9], 4: [0.9] * 3, 5: [0.9] * 12}
    pl = {k: [0.8] * len(v) for k, v in large.items()}
    return BySource(small, ps, "small"), BySource(large, pl, "large")


@pytest.mark.parametrize("kw", SETTINGS, ids=str)
def test_fake_rows_equal_bild_alone(kw):
    small, large = fake_pair()
    srcs = [[2], [4], [3], [5], [2], [4, 7]]
    outs, bt = bild_batch(small, large, srcs, max_new_tokens=16, **kw)
    assert isinstance(small._batch, Looped)
    for src, out, tr in zip(srcs, outs, bt.rows, strict=True):
        ref, rtr = D.bild(small, large, src, max_new_tokens=16, **kw)
        assert out == ref and tr.source == rtr.source
        assert (tr.rollbacks, tr.fallbacks, tr.drafted) == (rtr.rollbacks, rtr.fallbacks, rtr.drafted)
    if kw.get("rollback") and kw.get("fallback") == 0.5:  # some rows roll back, others never do
        assert bt.rows[2].rollbacks > 0 and bt.rows[1].rollbacks == bt.rows[3].rollbacks == 0


@pytest.fixture(scope="module")
def t5_pair(tmp_path_factory):
    """Tiny random T5s, the small one the large one with noise: they agree often, not always."""
    d = tmp_path_factory.mktemp("t5batch")
    large = tiny_model("t5", seed=1, d=48, scale=0.3)
    small = perturbed(large, seed=2, noise=0.8)
    return load_pair(save_tiny(small, d / "small"), save_tiny(large, d / "large"), dtype="float32")


def test_ragged_engine_logits_equal_batch_1_at_every_call_and_crop(t5_pair):
    """Rows of different source lengths run different token counts from different positions,
    some rows sit out calls, and crops roll single rows back: every row's logits are the
    batch-1 lean engine's for the same calls."""
    _, large = t5_pair
    srcs = [[5, 6, 1], list(range(3, 40)) + [1], [7, 1], [9] * 12 + [1]]
    b = LeanT5Batch(large, 4)
    ones = [LM(large.model, large.tok, "one", "lean") for _ in srcs]
    assert b.start(srcs) == [m.start(s) for m, s in zip(ones, srcs, strict=True)]
    calls = [([0, 1, 2, 3], [[0]] * 4), ([1, 3], [[5, 6, 7], [8]]), (1, 2), ([0, 1], [[9, 9], [4]]),
             ([2], [list(range(3, 30)) * 5]), (2, 60), ([3, 2, 0], [[4] * 9, [5], [6, 7]])]  # fmt: skip
    for rows, tokens in calls:
        if isinstance(rows, int):  # (row, n): crop that row alone
            b.crop(rows, tokens)
            ones[rows].crop(tokens)
            continue
        got = b.forward(rows, tokens)
        for r, t, g in zip(rows, tokens, got, strict=True):
            torch.testing.assert_close(g, ones[r].forward(t)[:, : large.width], rtol=1e-4, atol=1e-4)
    assert b.ids == [m.ids for m in ones]


@pytest.mark.parametrize("kw", SETTINGS[:6], ids=str)
def test_t5_rows_equal_bild_alone(t5_pair, kw):
    small, large = t5_pair
    srcs = sources(12, seed=3)
    outs, bt = bild_batch(small, large, srcs, max_new_tokens=24, **kw)
    assert isinstance(small._batch, LeanT5Batch) and isinstance(large._batch, LeanT5Batch)
    refs = [D.bild(small, large, s, max_new_tokens=24, **kw) for s in srcs]
    assert outs == [o for o, _ in refs]
    assert [t.source for t in bt.rows] == [t.source for _, t in refs]
    assert sum(bt.large_rows) > len(bt.large_rows) or len(bt.large_rows) <= 1  # calls do share rows


def test_eager_schedule_gives_the_same_rows(t5_pair):
    small, large = t5_pair
    srcs = sources(10, seed=4)
    kw = dict(fallback=0.6, rollback=1.0, max_new_tokens=20)
    wait, bw = bild_batch(small, large, srcs, **kw)
    eager, be = bild_batch(small, large, srcs, schedule="eager", **kw)
    assert wait == eager and len(be.large_times) >= len(bw.large_times)


def test_t5_vanilla_and_speculative_rows(t5_pair):
    small, large = t5_pair
    srcs = sources(10, seed=5)
    ref = [D.vanilla(large, s, max_new_tokens=20)[0] for s in srcs]
    assert vanilla_batch(large, srcs, max_new_tokens=20)[0] == ref
    assert speculative_batch(small, large, srcs, window=3, max_new_tokens=20)[0] == ref
    spec = [D.speculative_sampling(small, large, s, window=3, max_new_tokens=20) for s in srcs]
    outs, bt = speculative_batch(small, large, srcs, window=3, max_new_tokens=20)
    assert [t.source for t in bt.rows] == [t.source for _, t in spec]


def test_decoder_only_runs_looped(tmp_path):
    """GPT-2 has no ragged lean engine: each row runs its own batch-1 LM, with the same outputs."""
    large = tiny_model("gpt2", seed=1, d=48, scale=12.0)
    s, lg = load_pair(save_tiny(perturbed(large, 2, 0.8), tmp_path / "s"), save_tiny(large, tmp_path / "l"))
    srcs = sources(5, seed=6)
    outs, _ = bild_batch(s, lg, srcs, fallback=0.5, rollback=1.0, max_new_tokens=12)
    assert isinstance(lg._batch, Looped)
    assert outs == [D.bild(s, lg, x, fallback=0.5, rollback=1.0, max_new_tokens=12)[0] for x in srcs]


def test_shipped_pair_rows_at_batch_8(shipped):  # noqa: F811
    """The shipped pair in fp32, batch 8 over 24 val sentences: lossless and Algorithm 1 rows
    equal bild alone (all of val: python -m bildlib.bench.batchbench --check)."""
    small, large, srcs = shipped
    srcs = srcs[:24]
    for kw in (dict(fallback=0.5, rollback=1.0, distance="exact"), dict(fallback=0.5, rollback=3.0)):
        outs = sum(
            (bild_batch(small, large, srcs[i : i + 8], max_new_tokens=64, **kw)[0] for i in (0, 8, 16)), []
        )
        assert outs == [D.bild(small, large, s, max_new_tokens=64, **kw)[0] for s in srcs]


# --- bad input ---------------------------------------------------------------------------------


def test_bad_batches_are_named(t5_pair):
    small, large = t5_pair
    with pytest.raises(ValueError, match="sources is empty"):
        bild_batch(small, large, [])
    with pytest.raises(ValueError, match=r"sources\[1\]: source_ids is empty"):
        bild_batch(small, large, [[5, 1], [], [6, 1]])
    with pytest.raises(ValueError, match=r"sources\[0\]: source_ids must lie in"):
        vanilla_batch(large, [[999]])
    with pytest.raises(TypeError, match="sources must be a list"):
        bild_batch(small, large, torch.tensor([[5, 1]]))
    with pytest.raises(ValueError, match="sampling: bild_batch is greedy only"):
        bild_batch(small, large, [[5, 1]], sampling=D.Sampling(1.0))
    with pytest.raises(ValueError, match="schedule must be one of"):
        bild_batch(small, large, [[5, 1]], schedule="later")
    with pytest.raises(ValueError, match="fallback must be"):
        bild_batch(small, large, [[5, 1]], fallback=2.0)
    with pytest.raises(ValueError, match="window must be"):
        speculative_batch(small, large, [[5, 1]], window=0)


def test_capacity_is_checked_and_decoders_resize(t5_pair):
    small, large = t5_pair
    b = batched(large, 2)
    with pytest.raises(ValueError, match="batch of 3 sources, but this batch model was made for 2 rows"):
        b.start([[5, 1]] * 3)
    bild_batch(small, large, sources(2, seed=7), max_new_tokens=8)
    n = large._batch.capacity + 1  # a bigger batch than any before: the batch model is remade
    outs, _ = bild_batch(small, large, sources(n, seed=8), max_new_tokens=8)
    assert large._batch.capacity == n and len(outs) == n
    with pytest.raises(TypeError, match="needs a T5 on the lean engine"):
        LeanT5Batch(LM(large.model, large.tok, "hf", "hf"), 2)


def test_mixed_lengths_and_batch_of_one(t5_pair):
    small, large = t5_pair
    srcs = [[1], list(range(3, 40)) * 2 + [1], [5, 1]]  # an EOS-only source (an empty sentence's ids)
    kw = dict(fallback=0.5, rollback=1.0, max_new_tokens=16)
    assert bild_batch(small, large, srcs, **kw)[0] == [D.bild(small, large, s, **kw)[0] for s in srcs]
    assert bild_batch(small, large, srcs[1:2], **kw)[0] == [D.bild(small, large, srcs[1], **kw)[0]]


# --- sweeps with a batch_size ------------------------------------------------------------------


def test_sweeps_take_a_batch_size(env, monkeypatch):
    """batch_size 1 keeps every key as it was; batch 4 gives the same outputs under new keys, its
    rows record it, share their chunk's time, and an interrupted batched sweep resumes."""
    grid = [X.bild("aligned", 0.5, 1.0), X.speculative("aligned", 3)]
    kw = dict(n_examples=10, baseline_repeats=1, progress=False)
    s = X.RunSettings(results=env)
    one = X.sweep(PRESET, grid, settings=s, **kw)
    alone = X.run(PRESET, grid[0], n_examples=10, progress=False, settings=X.RunSettings(results=env))
    assert "batch_size" not in alone.attrs["spec"]
    calls = {"n": 0}
    real = measure.decode_batch

    def dies(*a, **k):
        calls["n"] += 1
        if calls["n"] == 11:  # 4 configurations: 4 warm-ups, 4 first chunks, then 2 second chunks
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(measure, "decode_batch", dies)
    with pytest.raises(KeyboardInterrupt):
        X.sweep(PRESET, grid, flush_every=4, settings=s.replace(batch_size=4), **kw)
    kept = sorted(len(pd.read_parquet(f)) for f in (env / PRESET).glob("*.partial.parquet"))
    assert kept == [4, 4, 8, 8]  # flushed after each chunk
    calls["n"] = -100
    four = X.sweep(PRESET, grid, flush_every=4, settings=s.replace(batch_size=4), **kw)
    assert calls["n"] + 100 == 4 + 2 + 2 * 2  # warm-ups, then only the missing chunks (the last holds 2)
    assert not list((env / PRESET).glob("*.partial.parquet")) and not four.duplicated(["label", "id"]).any()
    assert (one["batch_size"] == 1).all() and (four["batch_size"] == 4).all()
    assert four.attrs["batch_size"] == 4
    m = one.merge(four, on=["label", "id"])
    assert len(m) == len(one) and (m["output_ids_x"].map(list) == m["output_ids_y"].map(list)).all()
    chunk = four[(four["label"] == "vanilla-large") & four["id"].between(0, 3)]
    assert chunk["latency_s"].nunique() == 1
    assert chunk["batch_s"].iloc[0] == pytest.approx(4 * chunk["latency_s"].iloc[0])
    with pytest.raises(ValueError, match="batch_size > 1 runs greedy vanilla, bild, speculative"):
        X.run(
            PRESET,
            X.Config("oracle", "aligned", threshold=0.5),
            n_examples=4,
            settings=X.RunSettings(results=env, batch_size=4),
        )
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        X.run(PRESET, grid[0], n_examples=4, settings=X.RunSettings(results=env, batch_size=0))


# --- make bench-batch ---------------------------------------------------------------------------


def test_batchbench_checks_times_and_renders(shipped, tmp_path):  # noqa: F811
    """The benchmark end to end on a few val sentences: its check, its table (every batched row
    equal to the batch-1 decoder's), its README and docs blocks from the files it wrote."""
    from bildlib.bench import batchbench

    out = tmp_path / "figures" / "batch"
    assert batchbench.main(["--check", "--n", "8", "--out", str(out)]) == 0
    assert batchbench.main(["--n", "6", "--batches", "1,4", "--out", str(out)]) == 0
    t = pd.read_csv(out / "throughput.csv")
    assert sorted(set(t["batch"])) == [1, 4] and (t["equal"] == 6).all() and len(t) == 2 * 7
    assert t["speedup_lo"].le(t["speedup"]).all() and t["speedup"].le(t["speedup_hi"]).all()
    cases = json.loads((out / "exact.json").read_text())["cases"]
    assert len(cases) == 5 and all(c["rows"] == 8 and c["differ"] == [] for c in cases.values())
    assert not list((out / ".partial").glob("*.json"))  # a finished run keeps no parts
    from bildlib.reports import batch  # the blocks, from the files the run wrote

    assert "| 4 |" in batch.block(tmp_path) and "8 of 8 rows equal" in batch.exact_block(tmp_path)
    assert "BiLD best, eager" in batch.detail_block(tmp_path)
    with pytest.raises(SystemExit):
        batchbench.main(["--batches", "0"])


def test_committed_batch_results_hold():
    """What figures/batch/ says: every row of all of val equal at batch 8, every timed row equal."""
    t = pd.read_csv(REPO / "figures" / "batch" / "throughput.csv")
    assert sorted(set(t["batch"])) == [1, 2, 4, 8, 16, 32] and (t["equal"] == t["n"]).all()
    cases = json.loads((REPO / "figures" / "batch" / "exact.json").read_text())["cases"]
    assert all(c["rows"] == 1014 and c["differ"] == [] for c in cases.values())
