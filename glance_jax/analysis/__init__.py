"""Offline analysis of decode records and benchmark timings (numpy; scipy for the MLE; matplotlib
only for plots, imported inside the plotting functions so this package imports without it).

  Entropy law (per-round records: target entropy H at the root in nats, accepted length a in 0..L)
    fit_entropy_law(H, a, L, censored=None)        logit p = b0 - b1 H, survival model, horizon L
                                                   (censored: rounds that reached the answer's end)
    end_censoring(accepted, n_tokens)              one row's rounds -> (a, censored)
    expected_accepted(b0, b1, H, L)                E[a | H] = sum_{l=1..L} p^l
    decile_table(H, a, n_bins=10) -> DecileTable   mean a per entropy quantile bin
    survival_table(table, a, censored, L)          per bin: survival rate and E[a] at it
    isotonic_fit(x, y, weights, decreasing=True), weighted_r2(y, fitted, weights)
    isotonic_r2(H, a, censored, L), bootstrap_isotonic_r2(rows, L)   that R^2 alone; its interval over prompts
    copy_regime(fit, table, L) -> dict             cap e^{b0} (and the horizon-L cap) vs the floor
    analyze(records_by_task, L, pooled=False)      all of the above per task (pooled=True: also
                                                   over every task's rounds together, and the
                                                   common-slope fit), JSON-serialisable
    fit_common_slope(records_by_task, L)           shared b1, one intercept per task
  Reading it (law_report): law_checks(entry), slope_difference(e1, e2), summary_markdown(analysis),
    decile_markdown(entry)

  Benchmarks (per-prompt times, paired across methods)
    paired_bootstrap_ratio, paired_bootstrap_diff, paired_bootstrap_ratio_of_ratios,
    geometric_mean, bootstrap_geomean_ratio, compare_methods

  Plots (PNG): plot_deciles, plot_cap_vs_floor, plot_speedup_vs_budget, plot_paper_panels
"""

from glance_jax.analysis.bootstrap import (
    bootstrap_geomean_ratio, compare_methods, geometric_mean, paired_bootstrap_diff,
    paired_bootstrap_ratio, paired_bootstrap_ratio_of_ratios)
from glance_jax.analysis.entropy_law import (
    CommonSlopeFit, DecileTable, EntropyLawFit, analyze, bootstrap_isotonic_r2, copy_regime, decile_table,
    end_censoring, expected_accepted, fit_common_slope, fit_entropy_law, isotonic_r2, pool_records, survival_table,
    weighted_r2)
from glance_jax.analysis.isotonic import isotonic_fit
from glance_jax.analysis.law_report import (
    decile_markdown, law_checks, slope_difference, summary_markdown)
from glance_jax.analysis.plots import plot_cap_vs_floor, plot_deciles, plot_paper_panels, plot_speedup_vs_budget

__all__ = [
    "CommonSlopeFit", "DecileTable", "EntropyLawFit", "analyze", "bootstrap_isotonic_r2", "copy_regime", "decile_table",
    "isotonic_r2",
    "end_censoring", "survival_table", "expected_accepted", "fit_common_slope", "fit_entropy_law", "isotonic_fit", "pool_records",
    "weighted_r2", "decile_markdown", "law_checks", "slope_difference", "summary_markdown",
    "bootstrap_geomean_ratio", "compare_methods", "geometric_mean", "paired_bootstrap_diff",
    "paired_bootstrap_ratio", "paired_bootstrap_ratio_of_ratios",
    "plot_cap_vs_floor", "plot_deciles", "plot_paper_panels", "plot_speedup_vs_budget",
]
