"""The per-sentence anatomy block (docs/engines-cpu.md): where a decoded sentence's time goes, per
decoder, from `python -m bildlib.bench.anatomy`'s CSVs (figures/engines/anatomy-<dtype>.csv, one
table per dtype measured) and their checks files."""

from __future__ import annotations

from pathlib import Path

from bildlib.analysis.tables import md_table, read_csv, read_json, valid

COLS = ["decoder", "ms", "small_ms", "large_ms", "encoders_ms", "policy_ms", "rest_ms", "small_calls",
        "large_calls", "large_call_tokens", "outside_pct"]  # fmt: skip


def block(root: Path) -> str:
    files = sorted((root / "figures" / "engines").glob("anatomy-*.csv"))
    if not files:
        raise FileNotFoundError("figures/engines/anatomy-<dtype>.csv: python -m bildlib.bench.anatomy "
                                "writes it")
    return "\n\n".join(table(root, f.relative_to(root).as_posix()) for f in files)


def table(root: Path, path: str) -> str:
    t = valid(read_csv(root, path), COLS)
    c = read_json(root, path.removesuffix(".csv") + "_checks.json")
    rows = []
    for r in t.itertuples():
        small = f"{r.small_calls:.1f} × {1e3 * r.small_ms / r.small_calls:.0f} µs" if r.small_calls else "–"
        per = r.large_call_tokens / r.large_calls if r.large_calls else 0
        large = f"{r.large_calls:.1f} × {per:.1f} tokens" if r.large_calls else "–"
        ms = [f"{x:.2f}" for x in (r.ms, r.small_ms, r.large_ms, r.encoders_ms, r.policy_ms, r.rest_ms)]
        rows.append([r.decoder, *ms, small, large, f"{r.outside_pct:.1f} %"])
    head = ["decoder", "ms / sentence", "small", "large", "encoders", "policy", "rest", "small calls",
            "large calls", "outside the models"]  # fmt: skip
    where = f"{c['device']} ({c.get('isa', 'ISA not recorded')}; {c['machine']})"
    return (md_table(head, rows) + f"\n\n`{path}`: {where}, {c['threads']} threads, "
            f"{c['dtype']}, {c['engine']} engines; n = {c['n']} sentences of Multi30k {c['split']} after "
            f"{c['warmup']} of warm-up, the decoders interleaved per sentence; code {c['code']}.")
