"""The paper's figures from experiment summaries (bildlib.analysis.summarize). `common` (matplotlib's
file-only backend, saving a figure with its table, the frontier, bars, legends, captions),
`figures` (Figs. 2, 4, 5 and 10, the latency scatter, Tables 3 and 5, the peers), and one module
per other figure family: cost (Fig. 8), ee (Figs. 6-7), examples (Fig. 9), lm (Table 2's), quant
(the quantized larges), small (the small models')."""

from bildlib.plots.common import (
    BASELINE_NAME,
    FIGURES,
    METRIC_NAME,
    caption,
    frontier,
    legend,
    plt,
    reference_lines,
    save,
    save_table,
    smalls,
)  # fmt: skip
from bildlib.plots.figures import fig2, fig4, fig5, fig10, latency_scatter, peers, table3, table5

__all__ = [
    "BASELINE_NAME", "FIGURES", "METRIC_NAME", "caption", "fig2", "fig4", "fig5", "fig10", "frontier",
    "latency_scatter", "legend", "peers", "plt", "reference_lines", "save", "save_table", "smalls", "table3",
    "table5",
]  # fmt: skip
