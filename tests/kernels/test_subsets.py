"""#48: findings rest on every request, or say they do not; invariant breaks never become law findings.

Two planted kernels. bonus-from-draft emits zero-probability bonus tokens on many requests:
those requests stay in the tests (their output is readable), so only the bonus law and the
invariant are reported. ``unreadable-bonus`` emits an id out of range instead of the bonus:
the requests that accepted every draft cannot be read, the rest is a subset chosen by the
kernel (no L = k left), and the tests on it would reject the length and token laws; they must
not become law findings, and one finding must say so with its n.
"""

from __future__ import annotations

import torch
from kernel_support import quick_scenarios

from speceq.kernels import Kernel, Outcome, check
from speceq.kernels.kernel_mutants import make
from speceq.kernels.reference_kernels import reference_kernel

LAW_COMPONENTS = {"token", "bonus", "accepted", "recovered", "length"}


def test_bonus_from_draft_gets_no_spurious_token_or_length_finding() -> None:
    k = make("bonus-from-draft")
    r = check(k, scenarios=quick_scenarios(k.spec, 0.2), solo=False)
    broke = sum(v.count for v in r.violations if v.kind == "zero-probability")
    assert r.verdict == "shifted" and broke > 100, r.summary()
    components = {f.component for f in r.findings}
    assert components == {"invariant:zero-probability", "bonus"}, r.summary()
    assert {t.component for t in r.rejected} == {"bonus"}
    assert all(t.unread == 0 and t.requests > 0 for t in r.tests)  # every test read every request


def _unreadable_bonus() -> Kernel:
    ref = reference_kernel("ragged")

    def fn(req):  # noqa: ANN001, ANN202 - the ragged request of the contract
        out = ref(req)
        tokens = torch.as_tensor(out.tokens).clone()
        n = torch.tensor(req.num_draft_tokens, dtype=torch.int64, device=tokens.device)
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        bonus = tokens[rows, n] >= 0
        # the emitted count is n + 1 exactly when every draft was accepted: replace that bonus by the vocab size
        all_in = bonus & ((tokens >= 0).sum(dim=1) == n + 1)
        tokens[rows[all_in], n[all_in]] = req.vocab_size
        return Outcome(tokens=tokens)

    return Kernel(fn, ref.spec.with_name("unreadable-bonus"))


def test_tests_on_a_subset_the_kernel_chose_are_not_law_findings() -> None:
    k = _unreadable_bonus()
    r = check(k, scenarios=quick_scenarios(k.spec, 0.2), solo=False)
    assert r.verdict == "shifted" and any(v.kind == "id-range" for v in r.violations), r.summary()
    components = {f.component for f in r.findings}
    assert not components & LAW_COMPONENTS, r.summary()
    assert not r.rejected
    subset = [f for f in r.findings if f.component == "subset"]
    assert len(subset) == 1 and "not a law finding" in subset[0].text, r.summary()
    assert "requests read" in subset[0].text and "id-range" in subset[0].text
    partial = [t for t in r.tests if t.unread]
    assert partial and all(0 < t.unread <= t.requests for t in partial)
    # without the rule, the readable subset rejects the length law (no L = k is left in it)
    assert any(t.component == "length" and t.holm <= r.alpha for t in partial)
