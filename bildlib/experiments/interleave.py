"""Computing planned jobs interleaved: example by example, every unfinished configuration in
turn (round robin), so that drift of the machine's speed (thermal state, other tenants, memory
layout) hits every configuration alike instead of whichever ran during it.

Each job keeps its finished examples in <key>.partial.parquet (flushed every `flush_every`
examples) and holds its file lock while it runs; an interrupted sweep resumes each job from its
own partial file, and a job whose result file is whole is not run at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack

import pandas as pd
import torch

from bildlib.analysis import metrics
from bildlib.analysis.evaluate import machine, worker
from bildlib.experiments import busy, cache, measure
from bildlib.experiments.progress import bar as progress_bar


class _Run:
    """One job's rows so far, its partial file and its load record."""

    def __init__(self, job, where: dict):
        self.job, self.partial = job, job.path.with_suffix(".partial.parquet")
        done = cache.read(self.partial, job.key) if self.partial.exists() else None
        self.rows = done.to_dict("records") if done is not None else []
        self.segments = done.attrs["load"]["segments"] if done is not None else []
        self.meta = {"key": job.key, "label": job.config.label, "spec": job.spec, "machine": machine()}
        self.load = {"threads": job.spec["threads"], "cpus": busy.cpus()}
        self.tok = job.models.get(job.config.model, job.config.runs_on)
        self.where = where  # each row says which process and device made it (evaluate.worker)

    def encode(self, i: int) -> list[int]:
        return self.job.preset.source_ids(self.tok, self.job.examples.pairs[i][0])

    @property
    def batch(self) -> int:
        return self.job.spec.get("batch_size", 1)

    def warm(self) -> None:
        """Untimed decodes of the first `warmup` examples (batched: one chunk of them)."""
        j, w = self.job, self.job.spec["warmup"]
        if self.batch == 1:
            for i in range(w):
                measure.decode(j.config, j.models, self.encode(i), j.preset.max_new_tokens)
        elif w:
            srcs = [self.encode(i) for i in range(min(self.batch, len(j.examples)))]
            measure.decode_batch(j.config, j.models, srcs, j.preset.max_new_tokens)
        self.meter = busy.Meter(len(self.rows))

    def step(self, i: int) -> None:
        """Decode example i (batched: examples i to i + batch - 1, in one call; each row's
        latency_s, small_s and large_s are the call's times over its rows, batch_s the call's
        time, so that analysis.summarize reads every batch size alike)."""
        j = self.job
        ids = range(i, min(i + self.batch, len(j.examples)))
        if self.batch == 1:
            out, tr, dt = measure.timed(j.config, j.models, self.encode(i), j.preset.max_new_tokens)
            done, extra = [(out, tr)], {}
        else:
            outs, bt, dt = measure.timed_batch(j.config, j.models, [self.encode(k) for k in ids],
                                               j.preset.max_new_tokens)  # fmt: skip
            done, extra = list(zip(outs, bt.rows, strict=True)), {"batch_s": dt, "batch_size": self.batch}
            # per row, as latency_s: the batch's call time split evenly over its rows (a row's own
            # Trace holds the whole time of every batched call it took part in)
            c = bt.counters()
            extra |= {"small_s": c["small_s"] / len(done), "large_s": c["large_s"] / len(done)}
        for k, (out_ids, tr) in zip(ids, done, strict=True):
            src, ref = j.examples.pairs[k]
            row = {"id": k, "source": src, "reference": ref, "output": self.tok.decode(out_ids)}
            row |= {"latency_s": dt / len(done), "output_ids": out_ids} | tr.counters() | extra
            self.rows.append(row | {"trace": "".join(tr.source)} | self.where)

    def _load(self) -> dict:
        """The load record: earlier segments and this one, up to the rows so far."""
        return self.load | {"segments": self.segments + [self.meter.segment(len(self.rows))]}

    def flush(self) -> None:
        cache.write(pd.DataFrame(self.rows), self.partial, self.meta | {"load": self._load()})

    def finish(self) -> pd.DataFrame:
        p = self.job.preset
        meta = self.meta | {"load": self._load()}
        df = pd.DataFrame(self.rows)
        sc = metrics.score(p.metric, list(df["output"]), list(df["reference"]))
        meta |= {"metric": p.metric, "score": sc.value, "signature": sc.signature}
        cache.write(df, self.job.path, meta)
        self.partial.unlink(missing_ok=True)
        df.attrs.update(meta)
        return df


# report("total", examples to decode) once, then ("done", 1) per example; ("finished", k): k more
# configurations are whole (cached ones at the start, the others as they finish)
Report = Callable[[str, int], None]


def estimate(took: list[float], rounds: int, n: int) -> str:
    """The time a run will take, from its first rounds (a round: one example of every
    configuration). The first round pays each configuration's first-call costs, so the rest are
    projected from the rounds after it."""
    each = sum(took[1:]) / len(took[1:])
    total = sum(took) + each * (rounds - len(took))
    return (f"a round takes about {each:.1f} s, so the run takes about {total / 60:.1f} min on this "
            f"machine; for a quick trial, decode fewer examples (n_examples, {n} here: papermill -p "
            "n_examples 10)")  # fmt: skip


def compute(
    jobs: list, flush_every: int = 20, progress: bool = True, report: Report | None = None
) -> list[pd.DataFrame]:
    """The results of jobs (planned on the same examples and Models), in order: cached ones read
    back, the others computed interleaved while holding every one's lock. report: told how many
    examples are left to decode, then of each one decoded (a sweep on Ray feeds its driver's
    progress bar with it)."""
    report = report or (lambda what, k: None)
    out: dict[int, pd.DataFrame] = {i: df for i, j in enumerate(jobs) if (df := j.cached()) is not None}
    todo = [i for i in range(len(jobs)) if i not in out]
    if not todo:
        report("finished", len(out))
        return [out[i] for i in range(len(jobs))]
    cache.check_writable(jobs[todo[0]].path.parent)
    with ExitStack() as locks:
        # in one global order (by file name): two sweeps that share configurations listed in
        # different orders would otherwise each hold one lock and wait for the other's forever
        for i in sorted(todo, key=lambda i: jobs[i].path):
            locks.enter_context(cache.exclusive(jobs[i].path, jobs[i].config.label))
        for i in list(todo):  # another process may have finished some while we waited
            if (df := jobs[i].cached()) is not None:
                out[i] = df
                todo.remove(i)
        where = worker(jobs[todo[0]].models.device) if todo else {}  # one Models, one process
        runs = {i: _Run(jobs[i], where) for i in todo}
        if len({len(jobs[i].examples) for i in todo}) > 1:
            raise ValueError("jobs interleaved together must run the same examples")
        sizes = {runs[i].batch for i in todo}
        if len(sizes) > 1:
            raise ValueError(f"jobs interleaved together must use one batch_size, got {sorted(sizes)}")
        B = sizes.pop() if sizes else 1
        threads = {jobs[i].spec["threads"] for i in todo}
        if len(threads) > 1:
            raise ValueError(f"jobs interleaved together must use one thread count, got {sorted(threads)}")
        if runs:
            torch.set_num_threads(threads.pop())
        for r in runs.values():
            r.warm()
        n = len(jobs[todo[0]].examples) if todo else 0
        left = sum(n - len(r.rows) for r in runs.values())
        what = f"{len(runs)} configurations interleaved"
        bar = progress_bar(left, what, disable=not progress)
        report("total", left)
        report("finished", len(out))
        first = min((len(r.rows) for r in runs.values()), default=n)
        if progress and left:
            print(f"to decode: {len(runs)} configurations x {n} examples, {left} decodes "
                  f"({len(out)} configurations read back from the cache)")  # fmt: skip
        rounds, took = -(-(n - first) // B), []  # took: each round's seconds
        try:
            for e in range(first, n, B):
                t0 = time.perf_counter()
                for r in runs.values():
                    if len(r.rows) == e:  # resumed runs skip the examples they already hold
                        r.step(e)
                        k = min(B, n - e)
                        bar.update(k)
                        report("done", k)
                        if (e + k) // flush_every > e // flush_every and e + k < n:
                            r.flush()
                took.append(time.perf_counter() - t0)
                if progress and len(took) == 3 and rounds > 10:  # a long run: say how long, once
                    print(estimate(took, rounds, n))
        except BaseException:  # an error or an interrupt: keep every finished row for the resume
            for r in runs.values():
                if r.rows:
                    r.flush()
            raise
        finally:
            bar.close()
        for i, r in runs.items():
            out[i] = r.finish()
            report("finished", 1)
    return [out[i] for i in range(len(jobs))]
