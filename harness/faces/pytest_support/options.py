"""The ``--speceq-*`` options, their ``speceq_*`` ini mirrors, and the resolved :class:`Settings`.

Every option lives in one group ``speceq``. Precedence, from strongest to weakest:

1. a keyword argument of ``speceq.check(...)`` (the test's author asked for it);
2. the command line (``--speceq-samples=300``);
3. a marker on the test: ``@pytest.mark.speceq_budget(samples=...)`` (samples only);
4. the ini option (``speceq_samples = 300`` in ``[tool.pytest.ini_options]``);
5. the built-in default shown in ``--help``.

Engine options (``K=V``) follow their engine: the ini's options apply only while the engine
spec is the ini's (or the default) one, and command-line options are merged over them.
Only stdlib and pytest are imported at module level: pytest imports the plugin at start-up.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from speceq.core.defaults import CONTROL_RATIO, DEFAULT_ALPHA, DEFAULT_WORKERS, NUMERICS_TOLERANCE, PYTEST_TOLERANCE

#: What ``--speceq-inconclusive`` may say: fail the test, skip it, or let it pass. The default
#: is skip: an inconclusive check found no shift (a shift fails the test) but could not
#: certify TV < tolerance, which on a CPU is the usual state of a correct engine at feasible
#: budgets (a multi-token case needs ~10^4 samples per engine); failing would fail every
#: correct engine, passing would call it certified. A skip is neither, and says the sample
#: size that would decide. Certification gates use ``fail`` (as the CLI's exit code 3).
INCONCLUSIVE_OUTCOMES: tuple[str, ...] = ("fail", "skip", "pass")
GROUP = "speceq"
_ON = frozenset({"on", "true", "yes", "1"})
_OFF = frozenset({"off", "false", "no", "0", "none"})


def default_samples() -> int:
    """Samples per case and engine when nothing else says: the same as ``speceq run``.

    Read from :data:`speceq.core.defaults.DEFAULT_SAMPLES` when needed (``--help``, configure), so
    that loading the plugin imports nothing but pytest.
    """
    from speceq.core.defaults import DEFAULT_SAMPLES

    return DEFAULT_SAMPLES


class BuiltinDefault:
    """An option's built-in default; tells "not given" apart from "given the default value".

    ``repr`` is the value's, so ``Default: %(default)r`` in a help text shows the value.
    argparse never converts it (it converts string defaults only). A ``factory`` computes
    the value on first use.
    """

    __slots__ = ("_value", "_factory")

    def __init__(self, value: Any = None, *, factory: Callable[[], Any] | None = None) -> None:
        self._value = value
        self._factory = factory

    @property
    def value(self) -> Any:
        return self._factory() if self._factory is not None else self._value

    def __repr__(self) -> str:
        return repr(self.value)


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    convert.__name__ = f"integer >= {minimum}"
    return convert


def _probability(*, upper_inclusive: bool, what: str) -> Callable[[str], float]:
    def convert(text: str) -> float:
        try:
            value = float(str(text).strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if not (math.isfinite(value) and 0.0 < value and (value <= 1.0 if upper_inclusive else value < 1.0)):
            raise argparse.ArgumentTypeError(f"expected {what}, got {value!r}")
        return value

    convert.__name__ = what
    return convert


def _tv_or_off(text: str) -> float:
    """A total-variation distance in [0, 1]; 0 turns the outcome it sets off."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a total-variation distance in [0, 1] (0: off), got {text!r}") from None
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise argparse.ArgumentTypeError(f"expected a total-variation distance in [0, 1] (0: off), got {value!r}")
    return value


def _oracle(text: str) -> str:
    """``on``, ``off`` or a target model folder (checked when the settings are resolved)."""
    value = str(text).strip()
    if not value:
        raise argparse.ArgumentTypeError("expected 'on', 'off' or a model folder, got an empty string")
    low = value.lower()
    return "on" if low in _ON else "off" if low in _OFF else value


def _on_off(text: str) -> bool:
    """``on``/``off`` (and yes/no, true/false, 1/0) as a bool."""
    low = str(text).strip().lower()
    if low in _ON:
        return True
    if low in _OFF:
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")


def _choice(choices: tuple[str, ...]) -> Callable[[str], str]:
    def convert(text: str) -> str:
        value = str(text).strip().lower()
        if value not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return value

    convert.__name__ = "one of " + "|".join(choices)
    return convert


def _nats(text: str) -> float:
    """A finite number of nats >= 0."""
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of nats >= 0, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0.0):
        raise argparse.ArgumentTypeError(f"expected a finite number of nats >= 0, got {value!r}")
    return value


def _nats_or_inf(text: str) -> float:
    """A number of nats >= 0, or inf."""
    if str(text).strip().lower() in ("inf", "off"):
        return float("inf")
    return _nats(text)


def default_near_tie_nats() -> float:
    """The greedy near-tie threshold of ``speceq run`` (:data:`speceq.pipeline.greedy.NEAR_TIE_NATS`), read on use."""
    from speceq.core.defaults import NEAR_TIE_NATS

    return NEAR_TIE_NATS


def default_support_margin_nats() -> float:
    """The support hard failure's default numerics margin for users' models: off (:data:`speceq.core.defaults.SUPPORT_MARGIN_OFF`)."""
    from speceq.core.defaults import SUPPORT_MARGIN_OFF

    return SUPPORT_MARGIN_OFF


def _numerics_control(text: str) -> str | None:
    """``off`` (None), ``auto`` (also on/yes/true/1) or the http(s) URL of a second plain server endpoint."""
    value = str(text).strip()
    low = value.lower()
    if low in _OFF:
        return None
    if low == "auto" or low in _ON:
        return "auto"
    if value.startswith(("http://", "https://")):
        return value
    raise argparse.ArgumentTypeError(f"expected off, auto or an http(s) URL, got {text!r}")


def _control_ratio(text: str) -> float:
    """Control rows per candidate row: a number from 1 to :data:`speceq.pipeline.config.MAX_CONTROL_RATIO`."""
    from speceq.pipeline.config import MAX_CONTROL_RATIO

    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 1 to {MAX_CONTROL_RATIO}, got {text!r}") from None
    if not (math.isfinite(value) and 1 <= value <= MAX_CONTROL_RATIO):
        raise argparse.ArgumentTypeError(f"expected a number from 1 to {MAX_CONTROL_RATIO}, got {value!r}")
    return value


def _positive_number(text: str) -> float:
    try:
        value = float(str(text).strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}")
    return value


def _workers(text: str) -> int | None:
    """``auto`` (None) or a count of worker processes >= 1."""
    value = str(text).strip().lower()
    if value == "auto":
        return None
    try:
        return _int_at_least(1)(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected 'auto' or an integer >= 1, got {text!r}") from None


def _text(text: str) -> str:
    value = str(text).strip()
    if not value:
        raise argparse.ArgumentTypeError("expected a non-empty value")
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class OptionSpec:
    """One option: ``--speceq-<name>`` (dest and ini ``speceq_<name>``), its default and parser."""

    name: str
    default: Any
    convert: Callable[[str], Any]
    metavar: str
    help: str
    repeatable: bool = False
    default_factory: Callable[[], Any] | None = None
    default_text: str | None = None  # how the ini help names a computed default

    def builtin(self) -> BuiltinDefault:
        return BuiltinDefault(self.default, factory=self.default_factory)

    @property
    def flag(self) -> str:
        return "--speceq-" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        return "speceq_" + self.name

    @property
    def ini(self) -> str:
        return "speceq_" + (self.name + "s" if self.repeatable else self.name)


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(name="baseline", default="baseline", convert=_text, metavar="SPEC",
               help="baseline engine: a registry name (see `speceq engines`), mutant:<name>, "
                    "package.module:attr or path/to/file.py:attr."),
    OptionSpec(name="candidate", default="reference", convert=_text, metavar="SPEC",
               help="candidate engine under test (same forms as --speceq-baseline)."),
    OptionSpec(name="baseline_option", default=None, convert=_text, metavar="K=V", repeatable=True,
               help="baseline engine option, repeatable; values are JSON when they parse "
                    "(ini: speceq_baseline_options, one K=V per line)."),
    OptionSpec(name="candidate_option", default=None, convert=_text, metavar="K=V", repeatable=True,
               help="candidate engine option, repeatable (ini: speceq_candidate_options)."),
    OptionSpec(name="oracle", default="on", convert=_oracle, metavar="on|off|DIR",
               help="score the candidate's tokens with the target: on (the baseline's loaded target, "
                    "else the bundled one), off (two-sample tests only), or a target model folder."),
    OptionSpec(name="samples", default=None, default_factory=default_samples,
               default_text="as `speceq run` (speceq.core.defaults.DEFAULT_SAMPLES)", convert=_int_at_least(1), metavar="N",
               help="samples of each case's prompt per engine; on the command line it overrides "
                    "every speceq_budget marker (the suites' budgets)."),
    OptionSpec(name="alpha", default=DEFAULT_ALPHA, convert=_probability(upper_inclusive=False, what="a level in (0, 1)"),
               metavar="A", help="family-wise false-alarm level of each check (Holm over its tests)."),
    OptionSpec(name="tolerance", default=PYTEST_TOLERANCE,
               convert=_probability(upper_inclusive=True, what="a total-variation distance in (0, 1]"),
               metavar="EPS", help="TV distance below which a case may be called equivalent."),
    OptionSpec(name="numerics_tolerance", default=NUMERICS_TOLERANCE, convert=_tv_or_off, metavar="TV",
               help="a detected difference whose certified size (upper bound of the largest TV of a position's or the first two tokens' law) is "
                    "below TV is within-tolerance: the test is marked xfailed with the size, not failed; 0: off "
                    "(every detected difference fails)."),
    OptionSpec(name="seed", default=0, convert=_int_at_least(0), metavar="N",
               help="run seed of every check; chunk seeds derive from it and the case ids."),
    OptionSpec(name="threads", default=None, convert=_int_at_least(1), metavar="N",
               help="torch threads (None: $SPECEQ_TORCH_THREADS, else 1)."),
    OptionSpec(name="workers", default=DEFAULT_WORKERS, convert=_workers, metavar="N|auto",
               default_text="auto, as `speceq run --workers` (speceq.core.defaults.DEFAULT_WORKERS)",
               help="local worker processes sampling each check's chunks, started once and kept for the "
                    "session (None or auto: as `speceq run`, one per CPU that other processes leave at least "
                    "a quarter idle, measured per check; under pytest-xdist auto is capped at the CPUs "
                    "divided by the number of xdist processes; 1: every check samples in the pytest process). "
                    "Same samples and verdicts whatever the count."),
    OptionSpec(name="store", default=None, convert=_text, metavar="DIR",
               help="keep every check's samples under DIR and reuse them on reruns "
                    "(None: a temporary folder of the session)."),
    OptionSpec(name="report", default=None, convert=_text, metavar="PATH",
               help="write one HTML equivalence report of every check of the session to PATH "
                    "(and the merged result as PATH with suffix .json)."),
    OptionSpec(name="inconclusive", default="skip", convert=_choice(INCONCLUSIVE_OUTCOMES),
               metavar="|".join(INCONCLUSIVE_OUTCOMES),
               help="outcome of a test whose check is inconclusive (no shift detected, but "
                    "equivalence within the tolerance not shown at this budget): skip (undecided, "
                    "with the sample size that would decide), fail (certification gates) or pass."),
    OptionSpec(name="near_tie_nats", default=None, default_factory=default_near_tie_nats,
               default_text="as `speceq run --near-tie-nats` (speceq.core.defaults.NEAR_TIE_NATS)", convert=_nats,
               metavar="NATS",
               help="greedy cases: the target's top-2 margin (nats) up to which a divergence is a numerical "
                    "near-tie, not a mismatch; raise it for bf16/fp16 engines (~1e-2, docs/explanation/numerics.md)."),
    OptionSpec(name="support_margin_nats", default=None, default_factory=default_support_margin_nats,
               default_text="inf: off (speceq.core.defaults.SUPPORT_MARGIN_OFF)",
               convert=_nats_or_inf, metavar="NATS",
               help="numerics margin of the support hard failure: a candidate token fails only when every law whose "
                    "logits are within NATS of the oracle's excludes it; 0: an exact oracle; inf or off: no hard "
                    "failure (the default: a safe margin depends on your model's numerics; "
                    "docs/explanation/numerics.md)."),
    OptionSpec(name="sequential", default=False, convert=_on_off, metavar="on|off",
               help="anytime-valid sequential checks: look after every step of a doubling schedule up to the "
                    "budget and stop each case once decided (docs/how-to/sequential.md)."),
    OptionSpec(name="numerics_control", default=None, convert=_numerics_control, metavar="off|auto|URL",
               help="add a numerics control to every check: the baseline engine with the candidate's dtype and device "
                    "options (auto), or the baseline server at a second plain endpoint (URL); the candidate is "
                    "compared with it, the control with the baseline is reported as numerics drift "
                    "(docs/how-to/numerics-control.md)."),
    OptionSpec(name="control_ratio", default=CONTROL_RATIO, convert=_control_ratio, metavar="R",
               help="with a numerics control: the control's samples per candidate sample (1 to 64); more control "
                    "rows make the candidate-against-control comparison stronger at little cost, since the control "
                    "is a plain sampler (as `speceq run --control-ratio`)."),
    OptionSpec(name="kernel_scale", default=1.0, convert=_positive_number, metavar="S",
               help="speceq_kernel.check(): multiplies the default draws of every kernel check."),
    OptionSpec(name="kernel_device", default="cpu", convert=_text, metavar="DEVICE",
               help="speceq_kernel.check(): torch device of the kernel's inputs (cpu, cuda, cuda:1, ...)."),
)
OPTION_BY_NAME: dict[str, OptionSpec] = {o.name: o for o in OPTIONS}


def add_options(parser: pytest.Parser) -> None:
    """Register every option in the ``speceq`` group and its ini mirror."""
    group = parser.getgroup(GROUP, "speceq: distribution-equivalence checks of speculative decoding")
    for o in OPTIONS:
        if o.repeatable:
            group.addoption(o.flag, dest=o.dest, action="append", default=None, metavar=o.metavar,
                            help=f"{o.help} Default: none")
            parser.addini(o.ini, f"{o.help} Default: none", type="linelist", default=[])
        else:
            group.addoption(o.flag, dest=o.dest, default=o.builtin(), type=o.convert,
                            metavar=o.metavar, help=f"{o.help} Default: %(default)r")
            default_text = o.default_text if o.default_text is not None else repr(o.default)
            parser.addini(o.ini, f"{o.help} Default: {default_text}", type="string", default="")


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """The session's resolved options (validated). ``sources`` says where each came from:
    ``"command line"``, ``"ini"`` or ``"default"``."""

    baseline: str
    candidate: str
    baseline_options: Mapping[str, Any]
    candidate_options: Mapping[str, Any]
    oracle: str
    samples: int | None  # None: the built-in default, see budget()
    alpha: float
    tolerance: float
    seed: int
    threads: int | None
    store: Path | None
    report: Path | None
    inconclusive: str
    sequential: bool = False
    numerics_tolerance: float = NUMERICS_TOLERANCE
    near_tie_nats: float | None = None  # None: the built-in default, see near_tie()
    support_margin_nats: float | None = None  # None: the built-in default, see support_margin()
    numerics_control: str | None = None  # None: no control; "auto" or a URL (RunConfig.numerics_control)
    control_ratio: float = CONTROL_RATIO  # the control's samples per candidate sample (RunConfig.control_ratio)
    kernel_scale: float = 1.0
    kernel_device: str = "cpu"
    workers: int | None = DEFAULT_WORKERS  # None: auto (see WorkerPool)
    sources: Mapping[str, str] = field(default_factory=dict)

    def budget(self) -> int:
        """Samples per case and engine: the option's value, else the built-in default."""
        return self.samples if self.samples is not None else default_samples()

    def near_tie(self) -> float:
        """Greedy near-tie threshold (nats): the option's value, else the built-in default."""
        return self.near_tie_nats if self.near_tie_nats is not None else default_near_tie_nats()

    def support_margin(self) -> float:
        """Numerics margin of the support hard failure (nats): the option's value, else the built-in default."""
        return self.support_margin_nats if self.support_margin_nats is not None else default_support_margin_nats()

    def engine_options(self, role: str, spec: str) -> dict[str, Any]:
        """The session's options of ``role`` when ``spec`` is the session's engine, else none."""
        return dict(getattr(self, f"{role}_options")) if spec == getattr(self, role) else {}

    def header(self) -> str:
        """One line for pytest's report header."""
        oracle = self.oracle if self.oracle in ("on", "off") else f"model {self.oracle}"
        return (f"speceq: baseline={self.baseline} candidate={self.candidate} oracle={oracle} "
                f"samples={self.budget()} ({self.sources.get('samples', 'default')}) alpha={self.alpha:g} "
                f"tolerance={self.tolerance:g} seed={self.seed} inconclusive={self.inconclusive} "
                f"workers={'auto' if self.workers is None else self.workers}"
                + (" sequential=on (anytime-valid: cases stop once decided)" if self.sequential else "")
                + (f" numerics_control={self.numerics_control} control_ratio={self.control_ratio:g}"
                   if self.numerics_control else ""))


def _ini_path_base(config: pytest.Config) -> Path:
    return config.inipath.parent if config.inipath is not None else config.rootpath


def _scalar(config: pytest.Config, o: OptionSpec) -> tuple[Any, str]:
    value = config.getoption(o.dest)
    if not isinstance(value, BuiltinDefault):
        return value, "command line"
    raw = config.getini(o.ini)
    if isinstance(raw, str) and raw.strip():
        try:
            return o.convert(raw), "ini"
        except argparse.ArgumentTypeError as e:
            raise pytest.UsageError(f"ini option {o.ini} = {raw!r}: {e}") from None
    # computed defaults (samples) stay None here and resolve on use: see Settings.budget()
    return (None if o.default_factory is not None else o.default), "default"


def _engine_options(config: pytest.Config, role: str, spec: str) -> dict[str, Any]:
    o = OPTION_BY_NAME[f"{role}_option"]
    ini_lines = [line for line in config.getini(o.ini) if line.strip()]
    cli_lines = config.getoption(o.dest) or []
    if not ini_lines and not cli_lines:
        return {}
    from speceq.engines.registry import parse_engine_options  # imported only when options are given
    from speceq.errors import ConfigError

    ini_spec_raw = config.getini(OPTION_BY_NAME[role].ini)
    has_ini_spec = isinstance(ini_spec_raw, str) and bool(ini_spec_raw.strip())
    ini_spec = ini_spec_raw.strip() if has_ini_spec else OPTION_BY_NAME[role].default
    try:
        ini_opts = parse_engine_options(ini_lines) if spec == ini_spec else {}
    except ConfigError as e:
        raise pytest.UsageError(f"ini option {o.ini}: {e}") from None
    try:
        cli_opts = parse_engine_options(cli_lines)
    except ConfigError as e:
        raise pytest.UsageError(f"{o.flag}: {e}") from None
    return {**ini_opts, **cli_opts}


def resolve_settings(config: pytest.Config) -> Settings:
    """The session's :class:`Settings` from the command line, the ini file and the defaults.

    Raises pytest.UsageError naming the option when a value is invalid.
    """
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for o in OPTIONS:
        if not o.repeatable:
            values[o.name], sources[o.name] = _scalar(config, o)
    for role in ("baseline", "candidate"):
        values[f"{role}_options"] = _engine_options(config, role, values[role])
    for name in ("store", "report"):
        if values[name] is not None:
            base = config.invocation_params.dir if sources[name] == "command line" else _ini_path_base(config)
            values[name] = (base / Path(values[name]).expanduser()).resolve()
    if values["report"] is not None and values["report"].suffix.lower() == ".json":
        raise pytest.UsageError(f"speceq report {values['report']}: give an HTML path; the JSON result is written "
                                "beside it with suffix .json")
    oracle = values["oracle"]
    if oracle not in ("on", "off"):
        base = config.invocation_params.dir if sources["oracle"] == "command line" else _ini_path_base(config)
        folder = (base / Path(oracle).expanduser()).resolve()
        if not (folder / "config.json").is_file():
            where = OPTION_BY_NAME["oracle"].flag if sources["oracle"] == "command line" else "ini option speceq_oracle"
            raise pytest.UsageError(f"{where}: {oracle!r} is neither on, off nor a model folder with a config.json")
        values["oracle"] = str(folder)
    return Settings(**values, sources=sources)
