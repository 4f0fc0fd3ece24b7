"""The statistical tests of a chain check, planned from the exact laws before any output is seen.

For every statistical template (not greedy, not boundary) and declared method:

- ``token`` / ``bonus``: the emitted token at position i among the requests that reached i
  (L >= i), against the processed target row p_i (i = n: the bonus row). Valid for every
  lossless method (:mod:`speceq.kernels.laws`). Positions are tested one at a time, never
  jointly: a kernel may share noise across positions (vLLM's one exponential vector per
  request), which a correct kernel's per-position conditional laws do not see;
- ``accepted`` / ``recovered`` (token-wise methods): the token at position i given that the
  draft there was accepted (L > i) or rejected (L == i), against the closed forms;
- ``length``: L against the declared method's law (block: by enumeration when it is small).

A test is planned when its expected number of observations under the exact law is at least
:data:`MIN_PLANNED`, so the family Holm corrects over is fixed by the scenarios, not by the
data. Every p-value is the exact-valid chain-binomial one (:func:`speceq.kernels.gof.chain_gof`).
Lossy kernels get the same tests as measurements: the plug-in TV with an upper bound
(McDiarmid) and a lower bound from a split sample (:func:`tv_lower_bound_split`).

Every test reads all of its template's requests. The only requests left out are those whose
output cannot be read (:mod:`speceq.kernels.outcomes`) or whose call raised; they are chosen by
the kernel's output, so what remains is not a random subset: such a test records them in
``unread`` and the check does not turn its rejection into a law finding (the invariant is the
evidence; :func:`speceq.kernels.diagnosis.diagnose`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from speceq.kernels import laws
from speceq.kernels.contract import TOKENWISE_METHODS, KernelSpec
from speceq.kernels.gof import chain_gof
from speceq.kernels.kernel_calls import ScenarioRecord
from speceq.kernels.scenarios import Template

#: Smallest expected number of observations for a test to be planned.
MIN_PLANNED = 20.0
COMPONENTS = ("token", "bonus", "accepted", "recovered", "length", "cell")


@dataclass(frozen=True, slots=True, kw_only=True)
class KernelTest:
    """One planned test of a check and its result.

    component: token / bonus / accepted / recovered / length; position: the draft position
    (None for length); n: observations; tv, tv_upper, tv_lower: plug-in TV to the exact law and
    its confidence bounds (lower only for lossy kernels; the plug-in is biased upward when n is
    not large against ``support``, the labels the law gives positive probability); features: the template's features
    plus ``position``; holm: the Holm-adjusted p-value over the whole check; rejected: holm <= alpha on a test
    that read every request. requests: the template's requests; unread: how many of them were left out
    (unreadable output or a call that raised: a subset chosen by the kernel, so a rejection is not a law finding).
    """

    scenario: str
    template: str
    component: str
    position: int | None
    n: int
    expected_n: float
    pvalue: float
    statistic: float
    tv: float
    tv_upper: float
    tv_lower: float | None
    support_violations: int
    support: int = 0  # labels of positive probability under the tested law (for the plug-in TV's bias)
    features: Mapping[str, str] = field(default_factory=dict)
    holm: float = 1.0
    rejected: bool = False
    requests: int = 0
    unread: int = 0

    @property
    def where(self) -> str:
        if self.component == "node":
            return f"{self.scenario} / {self.template}: node {self.position}"
        if self.component == "cell":
            return f"{self.scenario} / {self.template}: position {self.position}, row {self.features.get('row', '?')}"
        at = "" if self.position is None else f" position {self.position}"
        return f"{self.scenario} / {self.template}: {self.component}{at}"

    def summary(self) -> str:
        sv = f", {self.support_violations} outside the support" if self.support_violations else ""
        low = f"{self.tv_lower:.3f} <= " if self.tv_lower is not None else ""
        unread = (f" ({self.unread} of {self.requests} requests unreadable and left out: not a random subset)"
                  if self.unread else "")
        return (f"{self.where}: p={self.pvalue:.3g} (Holm {self.holm:.3g}), n={self.n}{sv}, "
                f"TV {low}{self.tv:.3f} <= {self.tv_upper:.3f}{unread}")


@dataclass(frozen=True, slots=True)
class PlannedTest:
    template: Template
    component: str
    position: int | None
    law: np.ndarray
    expected_n: float


_LENGTH_LAWS: dict[tuple[int, str], tuple[Template, np.ndarray | None]] = {}


def length_law(template: Template, method: str) -> np.ndarray | None:
    """The exact law of L for ``template`` under ``method`` (None when unknown); cached per template."""
    key = (id(template), method)
    hit = _LENGTH_LAWS.get(key)
    if hit is not None and hit[0] is template:
        return hit[1]
    law = _length_law(template, method)
    if len(_LENGTH_LAWS) > 4096:
        _LENGTH_LAWS.clear()
    _LENGTH_LAWS[key] = (template, law)
    return law


def _length_law(template: Template, method: str) -> np.ndarray | None:
    n = template.n_draft
    if n == 0:
        return None
    if method in TOKENWISE_METHODS:
        betas = np.array([laws.acceptance(template.law[i], template.draft[i], method) for i in range(n)])
        return laws.tokenwise_length_law(betas)
    if method == "block":
        return laws.block_length_law(template.law, template.draft)
    return None


def plan(template: Template, spec: KernelSpec, copies: int) -> list[PlannedTest]:
    """The tests of one template, from its laws and its number of requests only."""
    if not template.statistical:
        return []
    method = spec.method
    n = template.n_draft
    L = length_law(template, method)
    reach = None if L is None else np.cumsum(L[::-1])[::-1]  # P(L >= i)
    out: list[PlannedTest] = []
    for i in range(n + 1):
        exp = copies * (1.0 if reach is None else float(reach[i]))
        if exp >= MIN_PLANNED:
            out.append(PlannedTest(template, "bonus" if i == n else "token", i, template.law[i], exp))
    if method in TOKENWISE_METHODS and L is not None and reach is not None:
        for i in range(n):
            p, q = template.law[i], template.draft[i]
            acc = laws.accepted_law(p, q, method)
            exp_acc = copies * (float(reach[i + 1]))
            if acc is not None and exp_acc >= MIN_PLANNED:
                out.append(PlannedTest(template, "accepted", i, acc, exp_acc))
            rec = laws.recovered_law(p, q, method)
            exp_rec = copies * float(L[i])
            if rec is not None and exp_rec >= MIN_PLANNED:
                out.append(PlannedTest(template, "recovered", i, rec, exp_rec))
    if L is not None and L.size > 1:
        out.append(PlannedTest(template, "length", None, L, float(copies)))
    return out


def observations(test: PlannedTest, drafts: np.ndarray, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The observed labels of a planned test (token ids, or lengths for the length test)."""
    ok = lengths >= 0
    i = test.position
    if test.component == "length":
        return lengths[ok]
    if test.component in ("token", "bonus"):
        sel = ok & (lengths >= i)
    elif test.component == "accepted":
        sel = ok & (lengths > i)
    else:
        sel = ok & (lengths == i)
    return tokens[sel, i]


def tv_lower_bound_split(labels: np.ndarray, law: np.ndarray, alpha: float) -> float:
    """A (1 - alpha) lower confidence bound on TV(law of labels, law), from a split sample.

    The first half chooses A = {x : p_hat_1(x) > law(x)}; on the second half
    P_hat_2(A) - law(A) - sqrt(ln(1/alpha) / (2 n_2)) is below TV with probability >= 1 - alpha
    (Hoeffding; A does not depend on the second half). Clipped at 0.
    """
    n = labels.size
    if n < 4:
        return 0.0
    half = n // 2
    first = np.bincount(labels[:half], minlength=law.size) / half
    a = first > law
    second = labels[half:]
    est = float(a[second].mean() - law[a].sum())
    return max(0.0, est - math.sqrt(math.log(1.0 / alpha) / (2.0 * second.size)))


def run_tests(records: list[ScenarioRecord], spec: KernelSpec, *, tv_alpha: float) -> list[KernelTest]:
    """Every planned test of every scenario, with raw p-values (Holm is applied by the check)."""
    out: list[KernelTest] = []
    for sr in records:
        for rec in sr.records:
            tpl = rec.template
            d, t, L = rec.arrays()
            copies = sr.scenario.copies(tpl)
            unread = max(0, copies - int(np.count_nonzero(L >= 0)))  # unreadable rows, and requests of raised calls
            for test in plan(tpl, spec, copies):
                labels = observations(test, d, t, L)
                features = {**tpl.features, "position": "-" if test.position is None else str(test.position)}
                common = dict(scenario=sr.scenario.name, template=tpl.name, component=test.component,
                              position=test.position, expected_n=test.expected_n, features=features,
                              requests=copies, unread=unread)
                if labels.size == 0:
                    out.append(KernelTest(n=0, pvalue=1.0, statistic=0.0, tv=0.0, tv_upper=1.0,
                                          tv_lower=0.0 if spec.lossy else None, support_violations=0, **common))
                    continue
                counts = np.bincount(labels, minlength=test.law.size)[: test.law.size]
                res = chain_gof(counts, test.law, tv_alpha=tv_alpha)
                lower = tv_lower_bound_split(labels, test.law, tv_alpha) if spec.lossy else None
                out.append(KernelTest(n=res.n, pvalue=res.pvalue, statistic=res.statistic, tv=res.tv,
                                      tv_upper=res.tv_upper_bound, tv_lower=lower,
                                      support_violations=res.support_violations,
                                      support=int(np.count_nonzero(test.law)), **common))
    return out


def shrunk_alternative(counts: np.ndarray, law: np.ndarray) -> np.ndarray:
    """The observed law of ``counts`` shrunk toward ``law`` by the plug-in's upward bias (a probability vector).

    The plug-in p_hat overstates a shift: under any law, n * chi2(p_hat, law) exceeds its
    expectation n * chi2(p, law) by about (S - 1), S the labels of positive probability. So
    p_alt = law + lam (p_hat - law) with lam^2 = max(0, 1 - (S - 1) / (n chi2(p_hat, law))):
    its chi-square divergence is the debiased estimate (over the law's support; mass outside it
    is shrunk alike, which can only understate the shift).
    """
    c = np.asarray(counts, dtype=np.float64)
    p = np.asarray(law, dtype=np.float64)
    n = float(c.sum())
    if n <= 0:
        return p.copy()
    hat = c / n
    pos = p > 0
    chi2 = float(((hat[pos] - p[pos]) ** 2 / p[pos]).sum())
    support = int(np.count_nonzero(pos))
    lam = math.sqrt(max(0.0, 1.0 - (support - 1) / (n * chi2))) if chi2 > 0 else 0.0
    return p + lam * (hat - p)


def gof_power(alternative: np.ndarray, law: np.ndarray, n: int, level: float, *, draws: int,
              rng: np.random.Generator) -> float:
    """The probability that :func:`chain_gof` rejects ``law`` at ``level`` on n draws from ``alternative`` (simulated).

    ``draws`` multinomial samples from ``rng``; 0 when n is 0.
    """
    if n <= 0:
        return 0.0
    alt = np.clip(np.asarray(alternative, dtype=np.float64), 0.0, None)
    alt = alt / alt.sum()
    hits = 0
    for counts in rng.multinomial(n, alt, size=draws):
        hits += chain_gof(counts, law).pvalue <= level
    return hits / draws
