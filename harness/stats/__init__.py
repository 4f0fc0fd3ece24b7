"""Pure statistics: numpy/scipy only, no I/O, no torch, no globals.

Functions take arrays and return frozen result objects with ``statistic``, ``pvalue``,
an effect size where one applies, ``summary()`` and ``to_dict()``.

- counting (black-box): :func:`position_symbols`, :func:`joint_symbols`, :func:`paired_counts`
- two-sample: :func:`chisquare_homogeneity` (pooled-count binning), :func:`ks_2samp_jittered`,
  :func:`cramervonmises_2samp_permutation`
- oracle, one-sample (diagnostics: valid only for an exact oracle): :func:`randomized_pit` +
  :func:`pit_uniformity`, the martingale z-tests, :func:`support_violations`, :func:`chisquare_gof`
- oracle, candidate vs baseline (valid under any shared oracle error): :func:`paired_comparison`,
  :func:`support_comparison`, :func:`compare_oracle_scores`; over the cases of a run
  :func:`pooled_comparison` of each case's ``OracleComparisons.differences``; engines with unequal row
  counts (a numerics control sampled more): :func:`blocked_comparison`, :func:`pooled_blocked_comparison``
- effect sizes: :func:`tv_distance`, :func:`tv_to_oracle` and their upper bounds; the coarser
  certificate a large vocabulary affords, :func:`pit_law_bound` (and :func:`required_n_pit_law`)
- multiplicity: :func:`holm`, :func:`benjamini_hochberg`; sample sizes: ``required_n_*``, and the
  TV certificate's and the χ² tests' on a law estimated from counts: :func:`samples_for`,
  :func:`min_detectable_tv` (:func:`estimate_law`)
- row independence (each engine's rows of one call against rows of different calls, exact):
  :func:`row_independence`
- a proportion with its exact interval (a greedy case's share of row pairs diverging beyond a near-tie):
  :func:`clopper_pearson`
- Monte Carlo sized to a level: :func:`mc_draws_for_level`, :func:`sequential_mc_pvalue`
"""

from speceq.stats.blocked import (
    RowBlocks,
    block_rows_by_prompt,
    blocked_comparison,
    blocked_conditional_size,
    pair_blocks,
    pooled_blocked_comparison,
    row_blocks,
)
from speceq.stats.comparison import (
    conditional_size,
    pair_rows_by_prompt,
    paired_comparison,
    permutation_comparison,
    pooled_comparison,
    row_sums,
    support_comparison,
)
from speceq.stats.counts import END, decode_joint, joint_symbols, paired_counts, position_symbols
from speceq.stats.design import (
    HEAD_COUNT,
    DetectableTV,
    SampleSizePlan,
    estimate_law,
    expected_plugin_tv,
    min_detectable_tv,
    samples_for,
)
from speceq.stats.goodness import chisquare_gof, probability_bins
from speceq.stats.independence import independence_pairs, row_independence
from speceq.stats.martingale import (
    argmax_leak_z,
    draft_drift_z,
    draft_ratio_z,
    effective_jumps,
    martingale_z,
    skew_corrected_pvalue,
    support_violations,
    temperature_drift_z,
)
from speceq.stats.montecarlo import mc_draws_for_level, sequential_mc_pvalue
from speceq.stats.multitest import benjamini_hochberg, holm
from speceq.stats.oracle_rows import (
    COMPARISONS,
    OracleComparisons,
    SequentialComparisons,
    boundary_rows,
    compare_oracle_scores,
    impossible_rows,
    row_scores,
    sequential_oracle_comparisons,
)
from speceq.stats.pit import (
    anderson_darling_uniform_sf,
    anderson_darling_uniform_statistic,
    pit_uniformity,
    randomized_pit,
)
from speceq.stats.pit_law import PITLawBound, PITLawPosition, pit_law_bound, required_n_pit_law
from speceq.stats.proportion import ProportionInterval, clopper_pearson
from speceq.stats.results import (
    ComparisonResult,
    ConfidenceInterval,
    GoodnessOfFitResult,
    HomogeneityResult,
    IndependenceResult,
    PITResult,
    PooledComparisonResult,
    SupportComparisonResult,
    SupportResult,
    TwoSampleResult,
    UniformityResult,
    ZTestResult,
)
from speceq.stats.sample_size import (
    effective_support_upper,
    noncentrality_for_power,
    required_n_equivalence_oracle,
    required_n_equivalence_two_sample,
    required_n_oracle,
    required_n_two_sample,
)
from speceq.stats.scores import TokenScores
from speceq.stats.sequence import cramervonmises_2samp_permutation, ks_2samp_jittered
from speceq.stats.support_margin import TAIL_NATS, boundary_tokens, exclusion_margins, outside_margin
from speceq.stats.tv import (
    tv_distance,
    tv_to_oracle,
    tv_upper_bound_oracle,
    tv_upper_bound_row_mismatch,
    tv_upper_bound_two_sample,
)
from speceq.stats.tv_interval import TVInterval, draws_to_certify, max_tv_size, tv_size
from speceq.stats.twosample import DEFAULT_MC_SAMPLES, chisquare_homogeneity, pooled_bins

__all__ = [
    "END", "decode_joint", "joint_symbols", "paired_counts", "position_symbols",
    "chisquare_gof", "probability_bins",
    "RowBlocks", "block_rows_by_prompt", "blocked_comparison", "blocked_conditional_size", "pair_blocks", "pooled_blocked_comparison", "row_blocks",
    "conditional_size", "pair_rows_by_prompt", "paired_comparison", "permutation_comparison", "pooled_comparison", "row_sums", "support_comparison",
    "COMPARISONS", "OracleComparisons", "SequentialComparisons", "boundary_rows", "compare_oracle_scores", "impossible_rows", "row_scores",
    "sequential_oracle_comparisons",
    "argmax_leak_z", "draft_drift_z", "draft_ratio_z", "effective_jumps", "martingale_z", "skew_corrected_pvalue", "support_violations", "temperature_drift_z",
    "mc_draws_for_level", "sequential_mc_pvalue",
    "independence_pairs", "row_independence",
    "TAIL_NATS", "boundary_tokens", "exclusion_margins", "outside_margin",
    "benjamini_hochberg", "holm",
    "anderson_darling_uniform_sf", "anderson_darling_uniform_statistic", "pit_uniformity", "randomized_pit",
    "PITLawBound", "PITLawPosition", "pit_law_bound", "required_n_pit_law",
    "effective_support_upper", "noncentrality_for_power", "required_n_equivalence_oracle", "required_n_equivalence_two_sample",
    "required_n_oracle", "required_n_two_sample",
    "HEAD_COUNT", "DetectableTV", "SampleSizePlan", "estimate_law", "expected_plugin_tv", "min_detectable_tv", "samples_for",
    "ComparisonResult", "ConfidenceInterval", "GoodnessOfFitResult", "HomogeneityResult", "IndependenceResult", "PITResult", "PooledComparisonResult", "SupportComparisonResult", "SupportResult",
    "TwoSampleResult", "UniformityResult", "ZTestResult",
    "ProportionInterval", "clopper_pearson",
    "TokenScores",
    "cramervonmises_2samp_permutation", "ks_2samp_jittered",
    "tv_distance", "tv_to_oracle", "tv_upper_bound_oracle", "tv_upper_bound_row_mismatch", "tv_upper_bound_two_sample",
    "TVInterval", "draws_to_certify", "max_tv_size", "tv_size",
    "DEFAULT_MC_SAMPLES", "chisquare_homogeneity", "pooled_bins",
]
