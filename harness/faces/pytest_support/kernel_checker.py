"""The ``speceq_kernel`` fixture's object: check a verification kernel inside a test.

``speceq_kernel.check(fn, spec=None, **overrides)`` runs :func:`speceq.kernels.kernel_check` on ``fn``
(a :class:`~speceq.kernels.Kernel`, a decorated function, or a function plus ``spec``) with the
session's settings: ``--speceq-alpha``, ``--speceq-seed``, ``--speceq-kernel-scale``,
``--speceq-kernel-device`` (keywords override them: ``scale``, ``seed``, ``device``, ``alpha``,
``tolerance``, ``scenarios``, ``solo``). It records the result for the session report and the
test's report section, then applies the verdict: ``shifted`` raises
:class:`~speceq.errors.DistributionMismatch` with the diagnosis; ``inconclusive`` (only with a
``tolerance``) fails, skips or passes as ``--speceq-inconclusive`` says; ``equivalent`` and
``lossy`` (a declared-lossy kernel: its TV is measured, and the test asserts on it) return the
result. ``speceq_kernel.check_drafter(fn)`` checks a drafter's conformance the same way.
"""

from __future__ import annotations

from typing import Any

import pytest

from speceq.errors import DistributionMismatch
from speceq.faces.pytest_support.session import ITEM_NOTES_KEY, EquivalenceSession
from speceq.verdicts.verdict import Verdict


class KernelChecker:
    """What the ``speceq_kernel`` fixture gives a test (see the module docstring)."""

    def __init__(self, session: EquivalenceSession, item: pytest.Item) -> None:
        self._session = session
        self._item = item
        self.settings = session.settings
        item.stash.setdefault(ITEM_NOTES_KEY, [])

    def check(self, fn: Any, spec: Any = None, **overrides: Any) -> Any:
        """Check ``fn``; see the module docstring. Returns the KernelCheckResult."""
        __tracebackhide__ = True
        from speceq.kernels import check
        from speceq.kernels.contract import as_kernel
        from speceq.kernels.resolve import resolve_kernel
        from speceq.models.torch_utils import configure_threads

        configure_threads(self.settings.threads)

        kern = resolve_kernel(fn, spec) if isinstance(fn, str) else as_kernel(fn, spec)
        options: dict[str, Any] = {"scale": self.settings.kernel_scale, "seed": self.settings.seed,
                                   "device": self.settings.kernel_device, "alpha": self.settings.alpha}
        unknown = sorted(set(overrides) - {"scale", "seed", "device", "alpha", "tolerance", "scenarios", "solo"})
        if unknown:
            raise TypeError(f"speceq_kernel.check() got unknown options {unknown}")
        options.update(overrides)
        result = check(kern, **options)
        index = sum(1 for n in self._item.stash[ITEM_NOTES_KEY] if n.startswith("kernel check"))
        self._session.record_kernel(self._item.nodeid, index, result.to_dict())
        self._item.stash[ITEM_NOTES_KEY].append(f"kernel check {index + 1}: {result.summary()}")
        if result.verdict == Verdict.SHIFTED:
            raise DistributionMismatch(result.summary(), verdict=result)
        if result.verdict == Verdict.INCONCLUSIVE:
            outcome = self.settings.inconclusive
            if outcome == "fail":
                pytest.fail(result.summary(), pytrace=False)
            if outcome == "skip":
                pytest.skip(result.summary())
        return result

    def check_drafter(self, fn: Any, **overrides: Any) -> Any:
        """Check that the drafter ``fn`` samples from the q it returns; raises DistributionMismatch if not."""
        __tracebackhide__ = True
        from speceq.kernels.drafts import check_drafter
        from speceq.models.torch_utils import configure_threads

        configure_threads(self.settings.threads)

        options: dict[str, Any] = {"seed": self.settings.seed, "device": self.settings.kernel_device,
                                   "alpha": self.settings.alpha}
        options.update(overrides)
        result = check_drafter(fn, **options)
        self._item.stash[ITEM_NOTES_KEY].append(f"drafter check: {result.summary()}")
        if result.verdict != Verdict.EQUIVALENT:
            raise DistributionMismatch(result.summary(), verdict=result)
        return result
