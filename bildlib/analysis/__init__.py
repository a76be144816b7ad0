"""Results read and scored. `summary` (a sweep's per-configuration summaries with their 95 %
intervals, the run they came from, the Pareto frontier), `table1` (Table 1 under both rules,
Fig. 5's picks), `intervals`, `metrics`, `evaluate`, `perplexity`, `cost` and `roofline`, the
paper's numbers beside ours (`reported`), the committed tables and verdicts (`tables`, `claims`,
`targets`, `verdicts`), sampled runs (`sampled`). Pure pandas over what experiments.sweep returns;
the plots draw from these."""

from bildlib.analysis.summary import (
    best_row,
    pareto,
    per_example,
    run_info,
    run_tag,
    same_outputs_pct,
    summarize,
    vanilla_large,
)  # fmt: skip
from bildlib.analysis.table1 import (
    ABLATIONS,
    REGIMES,
    RULES,
    SPREAD,
    TABLE1_MODELS,
    ablation_best,
    best_quality,
    rules_of,
    spread_of,
    summary_table,
    thresholds_of,
    within,
)  # fmt: skip

__all__ = [
    "ABLATIONS", "REGIMES", "RULES", "SPREAD", "TABLE1_MODELS", "ablation_best", "best_quality", "best_row",
    "pareto", "per_example", "rules_of", "run_info", "run_tag", "same_outputs_pct", "spread_of", "summarize",
    "summary_table", "thresholds_of", "vanilla_large", "within",
]  # fmt: skip
