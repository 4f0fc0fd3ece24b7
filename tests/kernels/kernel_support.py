"""Small, fast scenario sets for the kernel tests (the default check minus its largest vocabulary)."""

from __future__ import annotations

from speceq.kernels.contract import KernelSpec
from speceq.kernels.scenarios import Scenario, default_scenarios


def quick_scenarios(spec: KernelSpec, scale: float = 0.2, seed: int = 0) -> list[Scenario]:
    """The default scenarios at ``scale``, without the 256k-token one (it costs seconds per kernel)."""
    return [s for s in default_scenarios(spec, scale=scale, seed=seed) if not s.name.startswith("large")]
