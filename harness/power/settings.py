"""Settings of a power study (``speceq power``): sizes, repetitions, grids, cases.

Two presets: ``quick`` (minutes on two busy cores) and ``full`` (an hour or more). Every
field can be overridden; validation raises ConfigError naming the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from speceq.core.defaults import DEFAULT_ALPHA, DEFAULT_SAMPLES
from speceq.errors import ConfigError

#: Sample sizes of the simulated first-token methods (per engine).
METHOD_GRID: tuple[int, ...] = (10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 50_000,
                                100_000, 200_000, 500_000, 1_000_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class PowerSettings:
    """What one calibration run measures.

    reps: repetitions of every engine-sampled measurement (speceq, greedy, engine-sampled
    first-token methods). grid: samples per engine tried for speceq, in increasing order
    until the detection rate reaches ``power``. method_grid / sim_reps: sizes and
    repetitions of the first-token methods simulated from an exact law. null_reps:
    simulations under H0 that set each calibrated threshold. greedy_grid: greedy rows tried.
    false_alarm_n / false_alarm_reps: size and repetitions on the lossless variants.
    budget_reps: repetitions at the default budget when the grid did not reach it.
    curve_mix / curve_n / curve_reps: the mixture power curve. alpha / power: detection is
    a rejection at level alpha in at least ``power`` of the repetitions. budget /
    budget_alpha: the default budget of ``speceq run`` (samples, family-wise alpha), also
    measured for every mutant. prompt_index: which ``DEFAULT_PROMPTS`` entry the cases use;
    batch_size, max_new_tokens: the calibration cases' layout and length. mutants: names to
    run (empty: the whole gallery). ceiling_rows: mutant rows used to compute the one-row TV
    of the one-sample ceiling (:mod:`speceq.power.ceiling`).
    """

    mode: str = "quick"
    reps: int = 5
    grid: tuple[int, ...] = (1, 3, 10, 50, 250, 1_000, 4_000)
    method_grid: tuple[int, ...] = METHOD_GRID
    sim_reps: int = 200
    null_reps: int = 1000
    greedy_grid: tuple[int, ...] = (1, 4, 16)
    false_alarm_n: int = 1_000
    false_alarm_reps: int = 5
    curve_mix: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    curve_n: int = 1_000
    curve_reps: int = 5
    alpha: float = 0.01
    power: float = 0.9
    budget: int = DEFAULT_SAMPLES
    budget_alpha: float = DEFAULT_ALPHA
    budget_reps: int = 2
    prompt_index: int = 0
    batch_size: int = 128
    max_new_tokens: int = 8
    seed: int = 0
    mutants: tuple[str, ...] = ()
    ceiling_rows: int = 1_000

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"expected {expected}, got {getattr(self, name)!r}", where=f"power.{name}")

        def is_int(v: Any, minimum: int) -> bool:
            return isinstance(v, int) and not isinstance(v, bool) and v >= minimum

        for name in ("reps", "sim_reps", "null_reps", "false_alarm_n", "false_alarm_reps", "curve_n", "curve_reps",
                     "budget", "budget_reps", "batch_size", "max_new_tokens", "ceiling_rows"):
            if not is_int(getattr(self, name), 1):
                raise bad(name, "an integer >= 1")
        for name in ("seed", "prompt_index"):
            if not is_int(getattr(self, name), 0):
                raise bad(name, "an integer >= 0")
        for name in ("grid", "method_grid", "greedy_grid"):
            values = getattr(self, name)
            if not values or not all(is_int(v, 1) for v in values) or list(values) != sorted(set(values)):
                raise bad(name, "a non-empty increasing list of positive integers")
        if not self.curve_mix or not all(isinstance(m, (int, float)) and 0 <= m <= 1 for m in self.curve_mix):
            raise bad("curve_mix", "a non-empty list of mixture weights in [0, 1]")
        for name in ("alpha", "budget_alpha", "power"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1:
                raise bad(name, "a number in (0, 1)")
        if self.null_reps * self.alpha < 5:
            raise bad("null_reps", f"at least {int(5 / self.alpha)} simulations to set a level-{self.alpha:g} threshold")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


QUICK = PowerSettings()
FULL = PowerSettings(
    mode="full", reps=20, grid=(1, 2, 3, 5, 10, 15, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000), sim_reps=400,
    null_reps=2000, greedy_grid=(1, 2, 4, 8, 16, 32, 64), false_alarm_n=1_000, false_alarm_reps=100, budget_reps=5,
    ceiling_rows=4_000,
    curve_mix=(0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5), curve_n=1_000, curve_reps=20,
)
PRESETS: dict[str, PowerSettings] = {"quick": QUICK, "full": FULL}


def settings_for(mode: str, **overrides: Any) -> PowerSettings:
    """The preset ``mode`` (``quick`` or ``full``) with ``overrides`` (None values ignored)."""
    if mode not in PRESETS:
        raise ConfigError(f"unknown mode {mode!r}; expected one of {sorted(PRESETS)}", where="power.mode")
    known = set(PowerSettings.__dataclass_fields__)
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"unknown setting(s) {unknown}", where="power")
    return dataclasses.replace(PRESETS[mode], **{k: v for k, v in overrides.items() if v is not None})
