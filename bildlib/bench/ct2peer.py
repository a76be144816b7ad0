"""CTranslate2 as a measured peer: its greedy decoding of the same checkpoint, the engine a CPU
user would otherwise pick, against bildlib's decoders on the same sentences.

Each engine runs in its own process: CTranslate2 in bildlib.bench.ct2worker (which never imports
torch; the two OpenMP runtimes in one process made CTranslate2 3.5x slower), bildlib's decoders
in this one. They alternate in blocks of `block` sentences, A B A B, each side warmed on the
first `warmup` sentences untimed; every sentence is timed once by each, so the ratios are paired
and their 95 % intervals come from the same bootstrap as the sweeps' (bildlib.analysis.intervals).
Needs the optional extra `peers` (pip install -e '.[peers]'); docs/engines-cpu.md.

    python -m bildlib.bench.ct2peer convert data/checkpoints/multi30k-large    # make ct2
    python -m bildlib.bench.ct2peer steps      # its decoder step on the shipped pair, as callbench's
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from bildlib import REPO_ROOT, data, repo_relative
from bildlib.analysis import intervals, metrics
from bildlib.data import artifacts

CONVERTED = REPO_ROOT / "build" / "ct2"  # converted checkpoints (git-ignored; make ct2)
NAME = "CTranslate2 greedy (large)"  # the peer where one setting runs (compare's default)
BLOCK, WARMUP = 10, 5  # sentences per alternation block; untimed sentences each side warms on
# CTranslate2's compute types on a CPU, as its docs name them: float32 (the lossless conversion) and
# its int8 ("int8" there means int8_float32: int8 weights and products, float32 elsewhere)
COMPUTE = {"float32": "float32", "int8": "int8_float32"}
TOL = 0.5  # BLEU: a CTranslate2 setting counts as the peer within this of its float32


def peer_name(compute: str, threads: int) -> str:
    """A CTranslate2 setting's row: "CTranslate2 int8 (1 thread)"."""
    return f"CTranslate2 {compute} ({threads} thread{'' if threads == 1 else 's'})"


def thread_options(threads: int) -> tuple[int, ...]:
    """The thread counts tried with up to `threads` CPU threads: 1, 2, 4, ... and threads."""
    return tuple(sorted({t for t in (1, 2, 4, 8, 16) if t <= threads} | {max(1, threads)}))


def peers(threads: int) -> dict[str, tuple[str, int]]:
    """Every setting make bench-ct2 times: each compute type at 1, 2, ... `threads` threads."""
    return {peer_name(c, t): (COMPUTE[c], t) for c in COMPUTE for t in thread_options(threads)}


def reference(scores: dict[str, float], ms: dict[str, float], tol: float = TOL) -> str:
    """The peer the comparison is against: of the CTranslate2 rows (name -> BLEU, name -> ms per
    sentence), the fastest whose BLEU is within `tol` of the best float32 row's."""
    f32 = [s for d, s in scores.items() if "float32" in d or d == NAME]
    if not f32:
        raise ValueError(f"no CTranslate2 float32 row among {sorted(scores)}")
    ok = [d for d, s in scores.items() if s >= max(f32) - tol]
    return min(ok, key=ms.get)


class PeerUnavailableError(RuntimeError):
    """CTranslate2 is not installed, or a checkpoint it cannot convert."""


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError as e:
        raise PeerUnavailableError(
            "the CTranslate2 peer needs the optional extra `peers`: pip install -e '.[peers]' "
            "(make setup EXTRAS=dev,peers)"
        ) from e
    return ctranslate2


def converted(path: str | Path) -> Path:
    """Where the conversion of a local checkpoint lives: build/ct2/<name>-<hash of its files>,
    so a retrained or edited checkpoint is converted again."""
    from bildlib.experiments.cache import model_hash

    p = Path(path)
    if not (p / "config.json").is_file():
        raise FileNotFoundError(f"checkpoint {path!r}: no config.json (the peer converts local folders)")
    return CONVERTED / f"{p.resolve().name}-{model_hash(p)[:12]}"


def convert(path: str | Path) -> Path:
    """The checkpoint converted for CTranslate2, lossless float32 (TransformersConverter); an
    existing conversion is reused while its files are as they were written (bildlib.data.artifacts),
    else converted again. Written to a temporary folder first, sealed, then renamed."""
    out = converted(path)
    if artifacts.reusable(out, "the CTranslate2 conversion"):
        return out
    ct2 = _ctranslate2()
    tmp = out.with_name(out.name + ".part")
    try:
        ct2.converters.TransformersConverter(str(path)).convert(str(tmp), quantization="float32", force=True)
    except Exception as e:
        raise PeerUnavailableError(f"CTranslate2 cannot convert {path!r}: {type(e).__name__}: {e}") from e
    artifacts.seal(tmp)
    tmp.rename(out)
    return out


class Worker:
    """bildlib.bench.ct2worker in its own process: decode(tokens, max) -> (output tokens, seconds)."""

    def __init__(self, model_dir: Path, threads: int, compute_type: str = "float32"):
        _ctranslate2()
        cmd = [sys.executable, "-m", "bildlib.bench.ct2worker", str(model_dir), str(threads), compute_type]
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                  cwd=REPO_ROOT, bufsize=1)  # fmt: skip
        self.info = self._read()
        if self.info.get("torch"):
            raise RuntimeError("bildlib.bench.ct2worker imported torch: the engines would share one process")

    def _read(self) -> dict:
        line = self.p.stdout.readline()
        if not line:
            status = self.p.wait()
            raise RuntimeError(f"bildlib.bench.ct2worker exited with status {status} (its stderr above)")
        return json.loads(line)

    def decode(self, tokens: list[str], max_len: int, min_len: int = 0) -> tuple[list[str], float]:
        self.p.stdin.write(json.dumps({"tokens": tokens, "max": max_len, "min": min_len}) + "\n")
        r = self._read()
        return r["tokens"], r["s"]

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def compare(models, configs, examples: data.Split, threads: int = 2, block: int = BLOCK, warmup: int = WARMUP,
            partial: Path | None = None, progress: bool = True, ct2_threads: int | None = None,
            settings: dict[str, tuple[str, int]] | None = None) -> pd.DataFrame:  # fmt: skip
    """Rows (id, decoder, latency_s, output) of CTranslate2 greedy on the large checkpoint and
    of each experiments.Config in `configs` on `models` (an experiments.Models), on the same
    examples, alternating in blocks of `block`; bildlib at `threads` torch threads. CTranslate2
    runs each of `settings` (row name -> (compute type, intra threads), each its own process; in
    each block after bildlib's decoders, their order turning by one a block), by default float32 at
    `ct2_threads` (None: `threads`) as decoder NAME. `partial`: a parquet the finished blocks are
    kept in, so an interrupted run resumes there."""
    import torch

    from bildlib.experiments import measure

    if block < 1 or warmup < 0:
        raise ValueError(f"block must be >= 1 and warmup >= 0; got block={block}, warmup={warmup}")
    torch.set_num_threads(threads)
    lm, p = models.get("large"), models.preset
    tok = lm.tok  # the tokenizer both engines share: CTranslate2 takes and gives its token strings
    src = [lm.encode(p.prompt(s)) for s in examples.sources]
    rows = pd.read_parquet(partial).to_dict("records") if partial and partial.is_file() else []
    done = len({r["id"] for r in rows})
    settings = settings or {NAME: ("float32", ct2_threads or threads)}
    path = convert(p.model("large"))
    with contextlib.ExitStack() as stack:
        ws = {d: stack.enter_context(Worker(path, t, ct)) for d, (ct, t) in settings.items()}

        def ct2(w: Worker, i: int) -> tuple[str, float]:
            out, s = w.decode(tok.convert_ids_to_tokens(src[i]), p.max_new_tokens)
            return lm.decode(tok.convert_tokens_to_ids(out)), s

        for i in range(min(warmup, len(src))):  # every side warm, untimed
            for w in ws.values():
                ct2(w, i)
            for c in configs:
                measure.decode(c, models, src[i], p.max_new_tokens)
        bar = tqdm(total=len(src) - done, desc="CTranslate2 and bildlib, alternated", disable=not progress)
        for b0 in range(done, len(src), block):
            ids = range(b0, min(b0 + block, len(src)))
            for i in ids:  # bildlib's decoders, interleaved per sentence
                for c in configs:
                    out, _, s = measure.timed(c, models, src[i], p.max_new_tokens)
                    rows.append({"id": i, "decoder": c.label, "latency_s": s, "output": lm.decode(out)})
            order = list(ws)[b0 // block % len(ws):] + list(ws)[: b0 // block % len(ws)]
            for d in order:  # then each CTranslate2 setting in its process on the same sentences
                for i in ids:
                    text, s = ct2(ws[d], i)
                    rows.append({"id": i, "decoder": d, "latency_s": s, "output": text})
            if partial:
                with data.atomic_path(partial) as tmp:
                    pd.DataFrame(rows).to_parquet(tmp)
            bar.update(len(ids))
        bar.close()
        version = next(iter(ws.values())).info["version"]
    df = pd.DataFrame(rows)
    df.attrs["ctranslate2"] = version
    return df


def summary(rows: pd.DataFrame, examples: data.Split, metric: str = "bleu", base: str | None = None
            ) -> pd.DataFrame:  # fmt: skip
    """One row per decoder: score, ms per sentence, time relative to the peer (`reference`: the
    fastest CTranslate2 setting within TOL BLEU of its float32, named in column "peer") with its
    95 % interval (the paired bootstrap of bildlib.analysis.intervals over sentences), and speedup
    against `base` (a decoder label: bildlib's vanilla large) with its interval."""
    refs = examples.references
    piv = rows.pivot(index="id", columns="decoder", values="latency_s").sort_index()
    W = intervals.draws(len(piv))  # (B, n) resample counts, shared by every decoder (paired)
    mean = W @ piv.to_numpy() / len(piv)  # (B, decoders)
    col = {d: j for j, d in enumerate(piv.columns)}
    scores = {}
    for d in piv.columns:
        hyp = rows[rows["decoder"] == d].sort_values("id")["output"].tolist()
        scores[d] = metrics.score(metric, hyp, [refs[i] for i in piv.index])
    ct = [d for d in piv.columns if d.startswith("CTranslate2")]
    peer = reference({d: scores[d].value for d in ct}, {d: piv[d].mean() for d in ct})
    out = []
    for d in piv.columns:
        sc = scores[d]
        r = {"decoder": d, "score": sc.value, "signature": sc.signature, "ms": 1e3 * piv[d].mean()}
        rel = mean[:, col[d]] / mean[:, col[peer]]
        r |= {"vs_ct2": piv[d].mean() / piv[peer].mean(), **_iv("vs_ct2", rel), "peer": peer}
        if base is not None:
            sp = mean[:, col[base]] / mean[:, col[d]]
            r |= {"speedup": piv[base].mean() / piv[d].mean(), **_iv("speedup", sp)}
        out.append(r)
    return pd.DataFrame(out)


def _iv(name: str, x: np.ndarray) -> dict:
    lo, hi = intervals._tails(x)
    return {f"{name}_lo": lo, f"{name}_hi": hi}


def steps(path: str | Path, source: list[str], threads: int = 2, n: int = 20, rounds: int = 50) -> dict:
    """CTranslate2's cost of a sentence's parts on one source (its tokens): the median time of a
    forced 1-token output (encoding and one step) and of a forced (n + 1)-token one, alternated;
    a decoder step is their difference over n (docs/engines-cpu.md compares it with the lean step)."""
    import statistics

    with Worker(convert(path), threads) as w:
        one, many = [], []
        for r in range(rounds + 5):
            a, b = w.decode(source, 1, 1)[1], w.decode(source, n + 1, n + 1)[1]
            if r >= 5:  # the first rounds warm up
                one.append(a)
                many.append(b)
    m1, mn = statistics.median(one), statistics.median(many)
    return {"model": Path(path).name, "encode_and_step_ms": 1e3 * m1, "step_ms": 1e3 * (mn - m1) / n}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="convert checkpoints for CTranslate2 into build/ct2/")
    c.add_argument("paths", nargs="+")
    s = sub.add_parser("steps", help="CTranslate2's decoder step on the shipped pair (first val sentence)")
    s.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    if a.cmd == "convert":
        for path in a.paths:
            print(repo_relative(convert(path)))
        return
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(REPO_ROOT / "data" / "checkpoints" / "multi30k-tokenizer")
    src = tok.convert_ids_to_tokens(tok(data.load("multi30k", "val", 1).sources[0])["input_ids"])
    ckpt = REPO_ROOT / "data" / "checkpoints"
    rows = [steps(ckpt / m, src, a.threads) for m in ("multi30k-small-aligned", "multi30k-large")]
    print(pd.DataFrame(rows).round(3).to_string(index=False))


if __name__ == "__main__":
    main()
