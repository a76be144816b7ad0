"""Each engine at its fastest thread count: how CTranslate2's OpenMP runtime and torch's scale with
threads is a property of the CPU and of what else runs, so the CTranslate2 peer (bench.peers,
make bench) times each at 1, 2, ... threads on a few sentences first and runs each at its fastest
(docs/engines-cpu.md, *CTranslate2, the peer engine*).

    python -m bildlib.bench.threads [--threads 2] [--n 8]   # both engines' ms per sentence here
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bildlib import data
from bildlib.bench import ct2peer
from bildlib.bench.ct2peer import thread_options


def ct2_threads(model_dir: Path, sources: list[list[str]], max_len: int, options=(1, 2),
                rounds: int = 2) -> tuple[int, dict[int, float]]:  # fmt: skip
    """CTranslate2's fastest intra_threads on this machine: a worker process per option, one at a
    time, each warmed on the first source, then timed over all of them; `rounds` rounds, the
    options' order alternating. Returns (the fastest, {option: ms per sentence}); which count is
    fastest depends on the CPU and on what else runs (docs/engines-cpu.md)."""
    total = dict.fromkeys(options, 0.0)
    for r in range(rounds):
        for t in options[:: 1 if r % 2 == 0 else -1]:
            with ct2peer.Worker(model_dir, t) as w:
                w.decode(sources[0], max_len)
                total[t] += sum(w.decode(s, max_len)[1] for s in sources)
    ms = {t: 1e3 * s / (rounds * len(sources)) for t, s in total.items()}
    return min(ms, key=ms.get), ms


def torch_threads(decode, sources: list, options=(1, 2), rounds: int = 2, clock=None) -> tuple[int, dict]:
    """bildlib's fastest torch thread count here for decode(source) (vanilla large): in this
    process, each option warmed on the first source and timed over all, options alternating per
    round. Returns (the fastest, {option: ms per sentence}); torch's thread count is left as it was."""
    import time

    import torch

    clock = clock or time.perf_counter
    before, total = torch.get_num_threads(), dict.fromkeys(options, 0.0)
    try:
        for r in range(rounds):
            for t in options[:: 1 if r % 2 == 0 else -1]:
                torch.set_num_threads(t)
                decode(sources[0])
                for s in sources:
                    t0 = clock()
                    decode(s)
                    total[t] += clock() - t0
    finally:
        torch.set_num_threads(before)
    ms = {t: 1e3 * s / (rounds * len(sources)) for t, s in total.items()}
    return min(ms, key=ms.get), ms


PROBE = 8  # sentences each thread count of each engine is timed on before the comparison


def bildlib_threads(models, ex, threads: int, n: int = PROBE) -> tuple[int, dict]:
    """(bildlib's fastest torch threads, their ms) on the first `n` sentences of ex: its vanilla
    large in this process (torch_threads)."""
    from bildlib import experiments as X
    from bildlib.experiments import measure

    lm, p = models.get("large"), models.preset
    src = [lm.encode(p.prompt(s)) for s in ex.sources[:n]]
    decode = lambda x: measure.decode(X.vanilla("large"), models, x, p.max_new_tokens)  # noqa: E731
    return torch_threads(decode, src, thread_options(threads))


def probe_threads(models, ex, threads: int, n: int = PROBE) -> tuple[int, dict, int, dict]:
    """(bildlib's fastest torch threads, their ms, CTranslate2's fastest intra threads, their ms)
    on the first PROBE sentences of ex: bildlib's vanilla large in this process, CTranslate2 in a
    worker process per option (torch_threads, ct2_threads)."""
    from bildlib import experiments as X
    from bildlib.experiments import measure

    lm, p = models.get("large"), models.preset
    src = [lm.encode(p.prompt(s)) for s in ex.sources[:n]]
    opts = thread_options(threads)
    base = X.vanilla("large")
    decode = lambda x: measure.decode(base, models, x, p.max_new_tokens)  # noqa: E731
    bl_t, bl_ms = torch_threads(decode, src, opts)
    toks = [lm.tok.convert_ids_to_tokens(x) for x in src]
    ct_t, ct_ms = ct2_threads(ct2peer.convert(p.model("large")), toks, p.max_new_tokens, opts)
    return bl_t, bl_ms, ct_t, ct_ms


def main(argv: list[str] | None = None) -> None:
    import pandas as pd

    from bildlib import experiments as X
    from bildlib.experiments import presets

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2, help="the most threads tried")
    ap.add_argument("--n", type=int, default=PROBE, help="val sentences timed per thread count and round")
    a = ap.parse_args(argv)
    models = X.Models(presets.get("multi30k"), "cpu", "default")
    bl_t, bl_ms, ct_t, ct_ms = probe_threads(models, data.load("multi30k", "val", a.n), a.threads, a.n)
    engines = (("bildlib vanilla large", bl_t, bl_ms), (ct2peer.NAME, ct_t, ct_ms))
    rows = [{"engine": e, "threads": t, "ms": ms, "fastest": t == best}
            for e, best, d in engines for t, ms in d.items()]  # fmt: skip
    print(pd.DataFrame(rows).round(1).to_string(index=False))


if __name__ == "__main__":
    main()
