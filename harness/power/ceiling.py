"""One-sample ceilings: the highest detection rate any test can reach from one row of output.

For any level-alpha test and any two laws of the data, P1(reject) <= P0(reject) + TV(P0, P1)
<= alpha + TV. From a single row of output the data is that row, so no method, however
clever, detects a mutant from one row with probability above alpha + TV_row, where TV_row
is the total variation between the mutant's and the correct engine's laws of one row. The
power comparison uses this when the "1/10 of the best engine method" goal asks for
detection from a single row: if the ceiling is below the target power, the goal cannot be
met by any method.

Three one-row TVs that can be computed or bounded on the bundled models:

- greedy rows: the correct law is a point mass on the target's greedy row, so TV_row is
  exactly P(mutant's greedy row != that row);
- support bugs (top-k or top-p applied to the draft only): the mutant emits every token from
  the untruncated target law, the correct engine from the truncated one. On rows inside the
  truncated support the mutant's probability is the smaller, so TV_row is exactly
  P(the mutant's row has a token outside the target's support);
- the mixture mutant: given its prefix, each token follows p or (1 - mix) p + mix q, whose TV
  to p is at most mix TV(p, q). The hybrid argument (swap one position's law at a time) bounds
  TV_row by mix E[sum_t TV(p_t, q_t)] over the mutant's rows.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

#: One-sided confidence of the upper bounds.
CONFIDENCE = 0.95
#: Kinds of one-row TV (see the module docstring).
KINDS = ("greedy", "support", "mixture")


@dataclass(frozen=True, slots=True, kw_only=True)
class RowTV:
    """TV between one-row laws: an estimate from ``rows`` rows and its one-sided 95 % upper bound.

    kind: ``greedy``, ``support`` (both exact TVs, estimated as proportions) or ``mixture``
    (an upper bound on the TV, estimated as a mean).
    """

    kind: str
    estimate: float
    upper: float
    rows: int

    def summary(self) -> str:
        what = "bound on TV" if self.kind == "mixture" else "TV"
        return (f"one-row {what} ({self.kind} rows): {self.estimate:.3f} "
                f"(95% upper {self.upper:.3f}, {self.rows} rows)")

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _proportion(kind: str, hits: np.ndarray) -> RowTV:
    from scipy import stats

    arr = np.asarray(hits, dtype=bool)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"`{kind}` rows must be a non-empty 1-D boolean array")
    k, n = int(arr.sum()), int(arr.size)
    upper = stats.binomtest(k, n).proportion_ci(2 * CONFIDENCE - 1, method="exact").high
    return RowTV(kind=kind, estimate=k / n, upper=float(upper), rows=n)


def greedy_row_tv(row_differs: np.ndarray) -> RowTV:
    """Exact one-row TV of a greedy mutant: the fraction of its rows unequal to the target's greedy row."""
    return _proportion("greedy", row_differs)


def support_row_tv(row_leaves_support: np.ndarray) -> RowTV:
    """Exact one-row TV of a support bug: the fraction of mutant rows with a zero-probability token."""
    return _proportion("support", row_leaves_support)


def mixture_row_tv(mix: float, row_draft_tv_sum: np.ndarray) -> RowTV:
    """Upper bound mix * E[sum_t TV(p_t, q_t)] on the one-row TV of the mixture mutant.

    ``row_draft_tv_sum``: per mutant row, the sum over its tokens of TV(p_t, q_t) (oracle
    field ``draft_tv``). The upper value adds 1.645 standard errors (each row's term is at
    most its length, so the mean is well behaved); both are capped at 1.
    """
    if isinstance(mix, bool) or not isinstance(mix, (int, float)) or not 0 <= mix <= 1:
        raise ValueError(f"`mix` must be a weight in [0, 1], got {mix!r}")
    arr = np.asarray(row_draft_tv_sum, dtype=np.float64)
    if arr.ndim != 1 or arr.size < 2 or not np.all(np.isfinite(arr)) or arr.min() < 0:
        raise ValueError("`row_draft_tv_sum` must be a 1-D array of >= 2 finite non-negative sums")
    mean = float(arr.mean())
    se = float(arr.std(ddof=1)) / math.sqrt(arr.size)
    z = 1.6448536269514722  # one-sided 95 %
    return RowTV(kind="mixture", estimate=min(1.0, mix * mean), upper=min(1.0, mix * (mean + z * se)), rows=int(arr.size))


def one_sample_ceiling(alpha: float, row_tvs: list[RowTV] | tuple[RowTV, ...]) -> float | None:
    """alpha + the largest upper one-row TV over the row kinds a method may use; None when none is known.

    Only meaningful when ``row_tvs`` covers every kind of row a method could take (greedy
    and sampled): the caller decides that.
    """
    if not row_tvs:
        return None
    return min(1.0, alpha + max(r.upper for r in row_tvs))
