"""What every figure shares: matplotlib's file-only backend (set here, before pyplot loads),
saving a figure with its table, the frontier and bars of a sweep's summary, legends, captions and
the reference lines."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; notebooks display the saved PNG
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from bildlib import REPO_ROOT, data  # noqa: E402
from bildlib.analysis import pareto, run_tag  # noqa: E402

FIGURES = REPO_ROOT / "figures"
METRIC_NAME = {"bleu": "BLEU", "rougeL": "ROUGE-L"}


def save(fig, table: pd.DataFrame | None, name: str, out_dir: Path | str | None = None) -> Path:
    """figures/<name>.png (palette PNG), .pdf and (the plotted numbers) .csv, each written atomically."""
    out = Path(out_dir) if out_dir else FIGURES
    for ext in ("png", "pdf"):
        with data.atomic_path(out / f"{name}.{ext}") as tmp:
            fig.savefig(tmp, format=ext, dpi=150, bbox_inches="tight")
            if ext == "png":  # a 256-colour palette: a third of the bytes, the same plot (the tree's 60 MB)
                from PIL import Image

                with Image.open(tmp) as im:
                    small = im.convert("RGB").quantize(256)
                small.save(tmp, format="PNG", optimize=True)
    if table is not None:
        with data.atomic_path(out / f"{name}.csv") as tmp:
            table.to_csv(tmp, index=False, float_format="%.4f")
    plt.close(fig)
    return out / f"{name}.png"


def save_table(table: pd.DataFrame, name: str, out_dir: Path | str | None = None) -> Path:
    """figures/<name>.csv, written atomically."""
    path = (Path(out_dir) if out_dir else FIGURES) / f"{name}.csv"
    with data.atomic_path(path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.4f")
    return path


def _vanilla(s: pd.DataFrame, model: str) -> pd.DataFrame:
    return s[(s["method"] == "vanilla") & (s["model"] == model)]


def frontier(ax, g: pd.DataFrame, color: str, name: str) -> None:
    """All configurations faint, their Pareto frontier as a line, with its 95 % intervals."""
    if g.empty:
        return
    ax.scatter(g["norm_latency"], g["score"], s=10, color=color, alpha=0.25)
    f = pareto(g)
    ax.plot(f["norm_latency"], f["score"], "o-", color=color, ms=4, label=name)
    _bars(ax, f, color)


def _bars(ax, g: pd.DataFrame, color: str, x: str = "norm_latency") -> None:
    """95 % intervals (analysis.summarize) as error bars; nothing where the rows have none.
    x: the normalized latency's (1 / the speedup's) or the speedup's. y: the paired interval of
    the score's difference to the baseline, drawn around the score (what a comparison with the
    ✕ needs; the score's own, wider interval is in the CSV as score_lo / score_hi)."""
    if "delta_lo" not in g or g.empty:
        return
    lo, hi = (
        (1 / g["speedup_hi"], 1 / g["speedup_lo"])
        if x == "norm_latency"
        else (g["speedup_lo"], g["speedup_hi"])
    )
    xerr = [(g[x] - lo).clip(lower=0), (hi - g[x]).clip(lower=0)]
    yerr = [(g["delta"] - g["delta_lo"]).clip(lower=0), (g["delta_hi"] - g["delta"]).clip(lower=0)]
    ax.errorbar(
        g[x], g["score"], xerr=xerr, yerr=yerr, fmt="none", ecolor=color, alpha=0.5, lw=0.7, capsize=1.5
    )


def legend(ax, **kw) -> None:
    """The legend beside the axes, never over the data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, **kw)


def caption(fig, s: pd.DataFrame, note: str = "", bars: bool = True) -> None:
    """A line under the figure naming what it was measured with (analysis.run_tag), the
    intervals (bars: the figure draws them) and any note."""
    bars = bars and "delta_lo" in s
    bars = (
        "; bars: 95 % paired bootstrap over sentences (score: its difference to the baseline)" if bars else ""
    )
    fig.text(0.01, -0.02, f"{run_tag(s)}{bars}{'; ' + note if note else ''}", fontsize=6.5, va="top",
             color="dimgray", wrap=True)  # fmt: skip


def smalls(ax, s: pd.DataFrame) -> None:
    """Vanilla decoding with each small model of the sweep, as a marker (its normalized latency
    and score)."""
    for model, marker in (("small", "v"), ("aligned", "^"), ("student", "D")):
        v = s[(s["method"] == "vanilla") & (s["model"] == model)]
        if not v.empty:
            ax.scatter(v["norm_latency"], v["score"], marker=marker, s=40, color="dimgray", zorder=5,
                       label=f"vanilla {model} ({float(v['score'].iloc[0]):.2f})")  # fmt: skip


BASELINE_NAME = {"large": ("vanilla large", "vanilla large"), "ee": ("full model", "full early-exit model")}


def reference_lines(ax, s: pd.DataFrame, metric: str):
    """The baseline's score (the sweep's baseline model, s.attrs["baseline"]; vanilla large by
    default) as a line and a ✕ at latency 1, and a line one point below."""
    model = s.attrs.get("baseline", "large")
    short, long = BASELINE_NAME[model]
    v = float(_vanilla(s, model)["score"].mean())
    ax.axhline(v, color="gray", lw=0.8, ls="--", label=f"{short} ({v:.2f})")
    ax.axhline(v - 1, color="gray", lw=0.8, ls=":", label="1 point below")
    ax.scatter([1.0], [v], marker="x", s=80, color="black", zorder=5)
    ax.set_xlabel(f"normalized latency ({long} = 1)")
    ax.set_ylabel(METRIC_NAME.get(metric, metric))
    return v
