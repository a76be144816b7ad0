"""CTranslate2 as the measured peer (bildlib.bench.ct2peer): its process never holds torch, its greedy
output is bildlib's vanilla greedy on the same checkpoint, the comparison alternates the two
processes on the same sentences and resumes, and a missing extra says which one."""

import sys
from pathlib import Path

import pytest

from bildlib import data
from bildlib import experiments as X
from bildlib.bench import ct2peer
from bildlib.bench import threads as TH
from bildlib.decoding import vanilla
from bildlib.experiments import presets
from conftest import REPO

LARGE = REPO / "data" / "checkpoints" / "multi30k-large"
pytest.importorskip("ctranslate2", reason="the extra `peers` (make setup installs it)")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:  # conversions of this module go to a temporary folder
        mp.setattr(ct2peer, "CONVERTED", tmp_path_factory.mktemp("ct2"))
        yield ct2peer.convert(LARGE)


@pytest.fixture(scope="module")
def models():
    return X.Models(presets.get("multi30k"), "cpu", "float32")


def test_ct2_greedy_is_bildlib_vanilla_greedy_on_the_shipped_large(multi30k_dir, converted, models):
    assert converted.parent == ct2peer.CONVERTED and (converted / "model.bin").is_file()
    assert ct2peer.convert(LARGE) == converted  # a second call reuses the conversion
    lm = models.get("large")
    src = data.load("multi30k", "val", 25).sources
    with ct2peer.Worker(converted, 2) as w:
        assert w.info["torch"] is False  # its own process, without torch's OpenMP runtime
        for s in src:
            ids = lm.encode(s)
            out, sec = w.decode(lm.tok.convert_ids_to_tokens(ids), 128)
            ours, _ = vanilla(lm, ids)
            assert sec > 0
            assert lm.tok.convert_tokens_to_ids(out) == [t for t in ours if t != lm.eos], s


def test_compare_alternates_the_processes_and_resumes(multi30k_dir, converted, models, tmp_path):
    configs = [X.vanilla("large"), X.bild("aligned", 0.5, 1.0)]
    six = data.load("multi30k", "val", 6)
    four = data.load("multi30k", "val", 4)
    part = tmp_path / "rows.partial.parquet"
    first = ct2peer.compare(models, configs, four, block=3, warmup=1, partial=part, progress=False)
    names = [c.label for c in configs] + [ct2peer.NAME]
    assert len(first) == 4 * 3 and set(first["decoder"]) == set(names)
    # blocks of 3: ours on sentences 0-2 (each configuration in turn), then CTranslate2 on 0-2
    head = first.iloc[:9]
    assert list(head["id"]) == [0, 0, 1, 1, 2, 2, 0, 1, 2]
    assert list(head["decoder"][6:]) == [ct2peer.NAME] * 3
    again = ct2peer.compare(models, configs, six, block=3, warmup=1, partial=part, progress=False)
    assert len(again) == 6 * 3
    kept = again.iloc[:12].reset_index(drop=True)  # the first run's rows, not decoded again
    assert kept["latency_s"].tolist() == first["latency_s"].tolist()
    t = ct2peer.summary(again, six, "bleu", configs[0].label).set_index("decoder")
    assert t.loc[ct2peer.NAME, "vs_ct2"] == pytest.approx(1.0)
    assert t.loc[configs[0].label, "speedup"] == pytest.approx(1.0)
    for d in names:
        r = t.loc[d]
        assert r["vs_ct2_lo"] <= r["vs_ct2"] + 1e-9 and r["vs_ct2"] <= r["vs_ct2_hi"] + 1e-9
        assert r["signature"].startswith("nrefs:1")
    ct2_bleu, ours = t.loc[ct2peer.NAME, "score"], t.loc[configs[0].label, "score"]
    assert ct2_bleu == pytest.approx(ours)  # the same greedy output, scored alike


def test_each_engine_is_timed_at_its_fastest_thread_count(multi30k_dir, converted, models, monkeypatch):
    """The thread probes: the options up to a count; bildlib's probe takes the fastest torch thread
    count (a clock that makes 1 thread the faster here) and leaves torch's count as it was;
    CTranslate2's starts a worker per option and returns one of them with its ms; compare runs
    CTranslate2's worker at the count it is given, bildlib at its own."""
    import torch

    assert TH.thread_options(1) == (1,) and TH.thread_options(2) == (1, 2)
    assert TH.thread_options(6) == (1, 2, 4, 6)
    now = [0.0]

    def clock():
        return now[0]

    def decode(src):  # one sentence costs 3 units at 2 threads, 1 at 1
        now[0] += 3.0 if torch.get_num_threads() == 2 else 1.0

    before = torch.get_num_threads()
    best, ms = TH.torch_threads(decode, [1, 2, 3], (1, 2), clock=clock)
    assert best == 1 and ms == {1: 1e3, 2: 3e3} and torch.get_num_threads() == before
    lm = models.get("large")
    toks = [lm.tok.convert_ids_to_tokens(lm.encode(s)) for s in data.load("multi30k", "val", 2).sources]
    best, ms = TH.ct2_threads(converted, toks, 64, (1, 2), rounds=1)
    assert best in (1, 2) and set(ms) == {1, 2} and min(ms.values()) > 0 and ms[best] == min(ms.values())
    started = []
    real = ct2peer.Worker

    class Spy(real):
        def __init__(self, model_dir, threads, compute_type="float32"):
            started.append(threads)
            super().__init__(model_dir, threads, compute_type)

    monkeypatch.setattr(ct2peer, "Worker", Spy)
    ct2peer.compare(models, [X.vanilla("large")], data.load("multi30k", "val", 2), threads=2, block=2,
                    warmup=0, progress=False, ct2_threads=1)  # fmt: skip
    assert started == [1]


def test_every_setting_in_its_process_and_the_peer_within_half_a_point(multi30k_dir, converted, models):
    """CTranslate2 at float32 and int8 (int8_float32), each a process, their order turning by block;
    the peer is the fastest setting within 0.5 BLEU of float32's, and every ratio is against it."""
    two = data.load("multi30k", "val", 4)
    settings = {ct2peer.peer_name(c, 1): (ct2peer.COMPUTE[c], 1) for c in ct2peer.COMPUTE}
    assert set(ct2peer.peers(2)) == {f"CTranslate2 {c} ({n})" for c in ("float32", "int8")
                                     for n in ("1 thread", "2 threads")}  # fmt: skip
    rows = ct2peer.compare(models, [X.vanilla("large")], two, block=2, warmup=0, progress=False,
                           settings=settings)  # fmt: skip
    f32, i8 = settings
    assert list(rows["decoder"][2:6]) == [f32, f32, i8, i8]  # block 0: ours on 0-1, then each setting
    assert list(rows["decoder"][8:12]) == [i8, i8, f32, f32]  # block 1: the order turned
    t = ct2peer.summary(rows, two, "bleu", "vanilla-large").set_index("decoder")
    peer = t["peer"].iloc[0]
    assert peer in settings and t.loc[peer, "vs_ct2"] == pytest.approx(1.0)
    assert t.loc[f32, "score"] == pytest.approx(t.loc["vanilla-large", "score"])  # float32: vanilla's output
    # the rule alone: the fastest within 0.5 of float32's best, never a faster one that lost more
    ms = {"a float32": 50, "b int8": 20}
    assert ct2peer.reference({"a float32": 30.0, "b int8": 29.6}, ms) == "b int8"
    assert ct2peer.reference({"a float32": 30.0, "b int8": 29.4}, ms) == "a float32"
    with pytest.raises(ValueError, match="no CTranslate2 float32 row"):
        ct2peer.reference({"b int8": 29.0}, {"b int8": 1.0})


def test_bad_arguments_and_a_missing_extra_are_named(monkeypatch, tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        ct2peer.converted(tmp_path)
    with pytest.raises(ValueError, match="block"):
        ct2peer.compare(None, [], data.Split.__new__(data.Split), block=0)
    monkeypatch.setattr(ct2peer, "CONVERTED", tmp_path / "ct2")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # as if the extra were not installed
    with pytest.raises(ct2peer.PeerUnavailableError, match=r"\.\[peers\]"):
        ct2peer.convert(LARGE)
    assert not (tmp_path / "ct2").exists()


def test_steps_times_a_forced_length_in_the_peer_process(multi30k_dir, converted, models):
    lm = models.get("large")
    src = lm.tok.convert_ids_to_tokens(lm.encode(data.load("multi30k", "val", 1).sources[0]))
    r = ct2peer.steps(LARGE, src, rounds=2, n=3)
    assert r["model"] == "multi30k-large" and r["encode_and_step_ms"] > 0
    with ct2peer.Worker(converted, 2) as w:  # min = max forces the output's length
        assert len(w.decode(src, 4, 4)[0]) == 4


def test_make_bench_ct2_finds_each_row_of_the_peers_table_by_its_label():
    """make bench-ct2 times CTranslate2 again against the committed peers tables' BiLD rows: each
    label names its configuration, and one that names none is refused, named."""
    import pandas as pd

    from bildlib.bench import peers

    for folder in ("figures/peers/val", "figures/peers/val-float32"):
        t = pd.read_csv(REPO / folder / "peers.csv")
        labels = [lb for lb in t["label"].dropna() if lb.startswith("bild-")]
        assert labels and all(peers.config_of(lb).label == lb for lb in labels)
    with pytest.raises(ValueError, match="'bild-x-fb0.5': not the label"):
        peers.config_of("bild-x-fb0.5")


def test_a_damaged_conversion_is_converted_again(tmp_path, monkeypatch, capsys):
    """make ct2 reuses a conversion only while its files are as the converter wrote them: over a
    truncated model.bin it says which file and converts again (it used to exit 0 and reuse it, and
    the worker then died naming no file). The converter here is a stand-in that writes a file."""
    import types

    from bildlib.bench import ct2peer

    calls = []

    class Converter:
        def __init__(self, path):
            self.path = path

        def convert(self, out, quantization, force):
            calls.append(out)
            Path(out).mkdir(parents=True)
            (Path(out) / "model.bin").write_bytes(b"weights" * 100)
            (Path(out) / "config.json").write_text("{}")

    fake = types.SimpleNamespace(converters=types.SimpleNamespace(TransformersConverter=Converter))
    monkeypatch.setattr(ct2peer, "_ctranslate2", lambda: fake)
    monkeypatch.setattr(ct2peer, "CONVERTED", tmp_path / "ct2")
    ckpt = tmp_path / "large"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors").write_bytes(b"the checkpoint's weights")  # hashed for the folder's name
    out = ct2peer.convert(ckpt)
    assert (out / "MANIFEST.json").is_file() and ct2peer.convert(ckpt) == out and len(calls) == 1
    (out / "model.bin").write_bytes(b"weights")  # cut short
    assert ct2peer.convert(ckpt) == out and len(calls) == 2
    said = capsys.readouterr().out
    assert f"the CTranslate2 conversion: {out / 'model.bin'} has 7 bytes, 700 when it was built" in said
    assert (out / "model.bin").read_bytes() == b"weights" * 100
