"""docs/row-invariance.md's `exactness` block: whether lossless BiLD equals vanilla greedy decoding on
the machines `make exactness` ran on, under each ISA cap, with the product paths the engine chose there
(models.rowinv), and what the row-invariant paths cost against the engine before the probe
(bildlib.bench.exactness writes both CSVs)."""

from __future__ import annotations

from pathlib import Path

from bildlib.analysis.tables import ReportError, ci, md_table, read_csv, valid

FOLDER = "figures/exactness"


def _cap(isa: str) -> str:
    """"AVX512, ONEDNN_MAX_CPU_ISA=AVX2" -> "ONEDNN_MAX_CPU_ISA=AVX2"; no cap -> "none"."""
    caps = [c.strip() for c in isa.split(",")[1:]]
    return ", ".join(f"`{c}`" for c in caps) or "none"


def _yes(v) -> str:
    return "yes" if v in (True, "True") else "**no**"


def _differ(r) -> str:
    """"0 of 1014", or the count in bold where lossless BiLD was not exact."""
    return f"{r['differ']} of {r['n']}" if r["differ"] == 0 else f"**{r['differ']} of {r['n']}**"


def _calls(r) -> str:
    """The run's whole-call verdicts, without the model folders' paths; runs made before the engine
    checked its whole call record none."""
    v = r.get("whole_call")
    if not isinstance(v, str) or not v:
        return "not run (before the check)"
    return "; ".join(c.strip().rsplit("/", 1)[-1] for c in v.split(";"))


def block(root: Path) -> str:
    if not (root / FOLDER / "exactness.csv").is_file():
        raise ReportError(f"no exactness.csv in {FOLDER}: make exactness writes it")
    t = read_csv(root, f"{FOLDER}/exactness.csv")
    valid(t, ["cpu", "isa", "dtype", "n", "code", "threads", "differ", "row_invariant", "products"])
    out = []
    head = ["dtype", "ISA cap", "product paths chosen here", "whole-call check (models.wholecall)",
            "all found invariant", "lossless BiLD ≠ vanilla greedy"]  # fmt: skip
    from bildlib.bench.exactness import with_engines  # it imports torch: only when asked

    t = with_engines(t)
    for (cpu, code, engine), g in t.groupby(["cpu", "code", "engine"], sort=False):
        n, threads = ", ".join(map(str, sorted(set(g["n"])))), ", ".join(map(str, sorted(set(g["threads"]))))
        rows = [[r["dtype"], _cap(r["isa"]), r["products"], _calls(r), _yes(r["row_invariant"]),
                 _differ(r)] for _, r in g.sort_values(["dtype", "isa"]).iterrows()]  # fmt: skip
        isa = g["isa"].iloc[0].split(",")[0]
        out.append(f"*`make exactness` on {cpu}, ISA {isa}, code state `{code}`, {engine} engine: n = {n} "
                   f"val sentences, {threads} threads; each cap in its own process.*\n\n"
                   + md_table(head, rows))
    if (root / FOLDER / "cost.csv").is_file():
        out.append(cost(root))
    return "\n\n".join(out)


def cost(root: Path) -> str:
    """What exactness costs: the probed engine's time over the engine before the probe, per dtype
    and decoder, in one process, interleaved per sentence."""
    t = read_csv(root, f"{FOLDER}/cost.csv")
    valid(t, ["cpu", "code", "dtype", "n", "decoder", "ms_probed", "ms_today", "time_ratio", "time_ratio_lo",
              "time_ratio_hi", "lossless_differ_today", "lossless_differ_probed"])  # fmt: skip
    rows = [[r["cpu"], f"`{r['code']}`", r["dtype"], r["decoder"], f"{r['ms_today']:.1f}",
             f"{r['ms_probed']:.1f}",
             ci(r, "time_ratio", ".3f", "×"),
             f"{r['lossless_differ_today']} → {r['lossless_differ_probed']} of {r['n']}"]
            for _, r in t.iterrows()]  # fmt: skip
    return ("*The cost (`make exactness`, `--cost`): the engine before the probe (each product's fastest "
            "path) and the probed one, both in one process on the same sentences, the four decoders "
            "interleaved per sentence; time ratio probed / before with its 95 % interval (paired bootstrap).*"
            "\n\n" + md_table(["CPU", "code state", "dtype", "decoder", "ms before", "ms probed",
                               "time probed / before [95 %]", "lossless ≠ vanilla, before → probed"], rows))
