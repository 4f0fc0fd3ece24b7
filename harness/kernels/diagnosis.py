"""From rejected tests and broken invariants to findings a kernel developer can act on.

For each component with rejected tests (token law at the draft positions, bonus law,
accepted-token law, recovered-token law, accepted-length law) and each kind of broken
invariant, a :class:`Finding` says what moved, on which requests, and by how much (the largest
plug-in TV among the well-sampled rejected tests -- at least 5 draws per label of positive
probability, where the plug-in's upward bias is small -- with its upper confidence bound).

"On which requests" is found by enrichment: every predicate ``feature == value`` or
``feature != value`` over the template features (vocabulary, target law, draft law, draft
count, ragged, temperature, top-k, top-p, min-p, position; the vocabulary only for invariants, since
for tests it mostly tracks a scenario's draws) splits the component's tests (or, for an
invariant, the check's templates) into a 2 x 2 table of predicate x failed. A predicate is kept
when it covers at least 80 % of the failures, holds for at most 70 % of all the items (it
selects), fails at least twice as often inside as outside,
and its one-sided Fisher exact p-value is below 0.01; the three best (smallest p, one per
feature) are named. With none, the failure is reported as general.

A law finding rests only on tests that read every request of their template, and says which
requests its n counts (those that reached the position, all of them for the length law) and
how many of its tokens lie outside the support (the zero-probability invariant's tokens are
part of the law they were emitted under). A test that had to leave out unreadable requests
ran on a subset the kernel chose: it is never a law finding; when such tests would reject, one
``subset`` finding says so with their n, and the invariant findings carry the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy import stats

from speceq.kernels.law_tests import KernelTest
from speceq.kernels.outcomes import KINDS, Violation

COMPONENT_TEXT = {
    "token": "token law at the draft positions",
    "bonus": "bonus law",
    "accepted": "accepted-token law",
    "recovered": "recovered-token (residual) law",
    "length": "accepted-length law",
    "node": "token law at the reached tree nodes",
    "cell": "token law after a prefix (model layout: position, row of the prefix)",
}
MIN_COVERAGE = 0.8
#: A test is well sampled when it has this many observations per label of positive probability.
WELL_SAMPLED = 5
MAX_SELECTIVITY = 0.7
MIN_LIFT = 2.0
MAX_ENRICHMENT_P = 0.01
#: The requests a component's test reads ({i}: its position or node); its n counts these.
READS = {"token": "those that reached position {i}", "bonus": "those that accepted every draft",
         "accepted": "those that accepted the draft at position {i}", "recovered": "those rejected at position {i}",
         "length": "every request", "node": "those that reached node {i}",
         "cell": "those that reached position {i} with a prefix of the cell's row"}
_NAMES = {"vocab": "V", "law": "target law", "draft": "draft law", "drafts": "draft count",
          "temperature": "temperature", "top_k": "top-k", "top_p": "top-p", "min_p": "min-p", "position": "position",
          "boundary": "boundary uniforms", "row": "prefix row", "first row": "prompt row"}


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosed problem: ``component`` (or ``invariant:<kind>``), a sentence, and its numbers."""

    component: str
    text: str
    failed: int
    tested: int
    tv: float | None
    tv_upper: float | None
    predicates: tuple[str, ...]
    where: tuple[str, ...]


def _predicate_text(name: str, value: str, equal: bool) -> str:
    if not value:  # the feature is absent (e.g. no boundary uniforms): "set" / "not set"
        return f"{_NAMES.get(name, name)} {'not set' if equal else 'set'}"
    if name == "ragged":
        return "ragged drafts" if (value == "yes") == equal else "full drafts"
    label = _NAMES.get(name, name)
    if name in ("top_k", "top_p", "min_p") and value == "off":
        return f"{label} {'off' if equal else 'on'}"
    return f"{label} {'=' if equal else '!='} {value}"


def enriched(items: Sequence[tuple[Mapping[str, str], bool]], *, skip: tuple[str, ...] = ()) -> list[str]:
    """Predicates that single out the failed items (see the module docstring), best first."""
    failed = [f for f, bad in items if bad]
    if not failed or len(failed) == len(items):
        return []
    names = sorted({k for f, _ in items for k in f} - set(skip))
    best: dict[str, tuple[float, str]] = {}
    for name in names:
        values = sorted({f.get(name, "") for f, _ in items})
        if len(values) < 2:
            continue
        for value in values:
            for equal in (True, False):
                inside = [bad for f, bad in items if (f.get(name, "") == value) == equal]
                outside = [bad for f, bad in items if (f.get(name, "") == value) != equal]
                a, b = sum(inside), len(inside) - sum(inside)
                c, d = sum(outside), len(outside) - sum(outside)
                if a < MIN_COVERAGE * len(failed) or len(inside) > MAX_SELECTIVITY * len(items):
                    continue
                rate_in = a / max(a + b, 1)
                rate_out = c / max(c + d, 1)
                if rate_out > 0 and rate_in < MIN_LIFT * rate_out:
                    continue
                p = float(stats.fisher_exact([[a, b], [c, d]], alternative="greater").pvalue)
                if p < MAX_ENRICHMENT_P and (name not in best or p < best[name][0]):
                    best[name] = (p, _predicate_text(name, value, equal))
    ranked = sorted(best.values())
    return [text for _, text in ranked[:3]]


def _sample_text(t: KernelTest) -> str:
    """Which requests a test's n counts, and its tokens outside the support."""
    reads = READS.get(t.component, "the requests it reads").format(i=t.position)
    sv = f", {t.support_violations} outside the support" if t.support_violations else ""
    return f"n {t.n} of the template's {t.requests} requests: {reads}{sv}"


def diagnose(tests: Sequence[KernelTest], violations: Sequence[Violation],
             templates: Mapping[str, Mapping[str, str]], *, alpha: float | None = None) -> list[Finding]:
    """Findings for the broken invariants and the rejected tests (empty when nothing failed).

    ``templates``: "scenario/template" -> features, for every template of the check. alpha: the
    check's Holm level, to say which tests on a kernel-chosen subset would have rejected.
    """
    findings: list[Finding] = []
    for kind, text in KINDS.items():
        mine = [v for v in violations if v.kind == kind]
        if not mine:
            continue
        bad_names = {v.template for v in mine}
        items = [(f, key.split("/", 1)[1] in bad_names or key in bad_names) for key, f in templates.items()]
        preds = enriched(items)
        count = sum(v.count for v in mine)
        on = f" on requests with {' and '.join(preds)}" if preds else ""
        first = mine[0]
        sentence = (f"{text}{on}: {count} request(s) of {len(bad_names)} template(s) (e.g. {first.template}: "
                    f"{first.example})")
        findings.append(Finding(component=f"invariant:{kind}", text=sentence, failed=count, tested=len(templates),
                                tv=None, tv_upper=None, predicates=tuple(preds), where=tuple(sorted(bad_names))))
    for component, text in COMPONENT_TEXT.items():
        mine = [t for t in tests if t.component == component and t.n > 0 and not t.unread]
        rejected = [t for t in mine if t.rejected]
        if not rejected:
            continue
        # the vocabulary goes with a scenario's size (and so its power), not with a kind of request
        preds = enriched([(t.features, t.rejected) for t in mine], skip=("vocab",))
        # the size of the shift: the largest TV among well-sampled rejected tests (n >= 5 x support,
        # where the plug-in's upward bias is small), else the test with the strongest evidence
        well = [t for t in rejected if t.n >= WELL_SAMPLED * max(t.support, 1)]
        worst = max(well, key=lambda t: t.tv) if well else min(rejected, key=lambda t: t.pvalue)
        scenarios = sorted({t.scenario for t in rejected})
        on = f" on requests with {' and '.join(preds)}" if preds else ""
        sentence = (f"{text} wrong{on}: TV {worst.tv:.2f} (<= {worst.tv_upper:.2f}) at {worst.where} "
                    f"({_sample_text(worst)}); {len(rejected)} of {len(mine)} tests rejected, in "
                    f"{', '.join(scenarios)}")
        findings.append(Finding(component=component, text=sentence, failed=len(rejected), tested=len(mine),
                                tv=worst.tv, tv_upper=worst.tv_upper, predicates=tuple(preds),
                                where=tuple(sorted({f"{t.scenario}/{t.template}" for t in rejected}))))
    held = [t for t in tests if t.unread and alpha is not None and t.n > 0 and t.holm <= alpha]
    if held:
        findings.append(_subset_finding(held, violations, len([t for t in tests if t.unread])))
    return findings


def _subset_finding(held: Sequence[KernelTest], violations: Sequence[Violation], subset_tests: int) -> Finding:
    """The tests that would reject on the readable requests of templates with unreadable ones: not a law finding."""
    names = sorted({f"{t.scenario}/{t.template}" for t in held})
    kinds = sorted({v.kind for v in violations if v.template in names})
    e = max(held, key=lambda t: (t.unread / max(t.requests, 1), -t.pvalue))
    text = (f"not a law finding: {len(held)} of the {subset_tests} tests that could not read every request would "
            f"reject on the requests that were read (e.g. {e.where}: n {e.n}; {e.requests - e.unread} of "
            f"{e.requests} requests read, {e.unread} left out by the {', '.join(kinds) or 'unreadable-output'} "
            f"invariant); the kernel's output chose which requests those are, so they are not a random sample of its "
            f"law: the invariant findings are the evidence")
    return Finding(component="subset", text=text, failed=len(held), tested=subset_tests, tv=None, tv_upper=None,
                   predicates=(), where=tuple(names))
