"""The settings of one run (:class:`RunConfig`), validated where they are made."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from speceq.core.defaults import (
    CERTIFICATES,
    CONTROL_RATIO,
    DEFAULT_ALPHA,
    DEFAULT_CHUNK_SIZE,
    DEFAULT_CHUNK_TIMEOUT_S,
    DEFAULT_SAMPLES,
    DEFAULT_TOLERANCE,
    NEAR_TIE_NATS,
    NUMERICS_TOLERANCE,
    ORACLE_DTYPES,
    SUPPORT_MARGIN_OFF,
)
from speceq.errors import ConfigError
from speceq.oracles.build import OracleSpec
from speceq.pipeline.collect import EXECUTORS

#: The largest ``control_ratio`` accepted (the blocked comparison's gain 2r / (r + 1) is within 2 % of its limit 2).
MAX_CONTROL_RATIO = 64
#: ``numerics_control`` value: the baseline engine with the candidate's dtype and device options.
CONTROL_AUTO = "auto"

#: The engine options that set an engine's numerics, copied from the candidate onto the control.
NUMERICS_OPTIONS = ("dtype", "device")

#: Files a run writes into its output folder, next to the store's ``chunks/``.
RESULT_FILE = "result.json"
PROVENANCE_FILE = "provenance.json"


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    """Settings of one run (all validated; errors name the field).

    baseline / candidate: engine specs (registry names or ``module:attr``); *_options:
    keyword options for each. oracle: score the candidate's tokens with the target
    (``oracle_model``: a model folder; None = the baseline engine's loaded target model when
    it exposes one as ``.model`` or ``.target``, else the bundled target). oracle_draft: the draft the
    oracle scores for the draft ratio comparison: ``"auto"`` (the candidate engine's loaded
    ``.draft``, if any), ``"bundled"``, a model folder, or None (no draft). oracle_share_prefix:
    the oracle runs each prompt once and scores only the generated tokens against its cache
    (~6x less oracle work; log-probabilities equal to 1e-5, not bit for bit, see
    docs/explanation/fast-forward.md; default on; False scores whole rows, bit-identical to transformers). samples: samples of each
    case's prompt per engine; chunk_size: samples per stored chunk. alpha: family-wise
    false-alarm level; tolerance: TV below which a case may be called equivalent.
    out_dir: store, result and provenance folder. resume: reuse stored chunks (False
    discards them first). threads: torch threads, per worker process too (None:
    ``$SPECEQ_TORCH_THREADS`` or 1). progress: a progress bar on a terminal, plain lines
    elsewhere. executor: ``"local"`` (this machine) or ``"ray"``; workers: local worker
    processes (1: sample in this process; None: one per usable CPU, see
    :func:`speceq.pipeline.collect.auto_workers`), or the Ray tasks in flight (None: one per cluster
    CPU); ray_address: the Ray cluster to use (None: start a local one for the run).
    near_tie_nats: greedy cases' near-tie threshold, the target's top-2 margin (nats) up to
    which a divergence is numerical, not a bug
    (default 1e-3, measured on float32 CPU; bf16 engines need ~1e-2).
    support_margin_nats: the numerics margin of the support hard failure, nats of raw-logit
    error: a candidate token is a hard failure only when every law whose logits are within it of
    the oracle's excludes the token; 0: an exact oracle (any token of oracle probability 0);
    default inf (:data:`speceq.core.defaults.SUPPORT_MARGIN_OFF`): no support hard failure, since
    a safe margin depends on the model's numerics (0.5 is measured safe for the bundled byte
    models, :data:`speceq.core.defaults.SUPPORT_MARGIN_NATS_BY_WORLD`).
    oracle_dtype: precision of the transformers oracle (default float32); a loaded engine model
    of another dtype is copied, never cast in place. oracle_server: score with an
    OpenAI-compatible server's prompt log-probabilities instead of transformers
    (:class:`speceq.oracles.server.ServerOracle`; no draft); oracle_top_logprobs: raw
    log-probabilities it asks per position (None: the whole vocabulary). sequential: grow every
    case look by look and stop it once its anytime-valid evidence decides
    (:mod:`speceq.pipeline.sequential`); False: a fixed-size run of ``samples`` per engine.
    certificate: what an ``equivalent`` verdict certifies: ``"tv"`` (the per-position TV bound,
    the default) or ``"pit-law"`` (the coarser bound on the law of the oracle PIT per position,
    :mod:`speceq.stats.pit_law`, which a large vocabulary affords at a few hundred samples;
    needs the oracle and a fixed-size run).
    chunk_timeout: seconds one chunk may take to sample (None, the default: no limit); past it
    the run stops with an engine error naming the engine, case and slice, keeping the chunks
    stored before (serial or local worker-process collection; not with Ray).
    numerics_tolerance: TV below which a detected difference is ``within-tolerance`` instead of
    ``shifted`` (its certified upper bound must be below it; 0: off; default
    :data:`speceq.core.defaults.NUMERICS_TOLERANCE`, from the measured bf16 floor).
    numerics_control: add a third engine, the control, sampled and stored like the others
    (:mod:`speceq.pipeline.control_arm`): ``"auto"``, the baseline engine with the candidate's
    ``dtype`` and ``device`` options; an http(s) URL, the baseline engine (a server, ``base_url``)
    at that second plain endpoint; None (default): no control. The candidate is then compared with
    the control (the verdict) and the control with the baseline (numerics drift, a finding);
    fixed-size runs only. control_options: options set on the control engine over those.
    control_ratio: the control's samples per candidate sample (a number >= 1; each case's control
    draws ceil(ratio x samples); default :data:`speceq.core.defaults.CONTROL_RATIO`): the comparisons
    put each candidate row against its share of the control's rows (:mod:`speceq.stats.blocked`).
    """

    baseline: str = "baseline"
    candidate: str = "reference"
    baseline_options: Mapping[str, Any] = field(default_factory=dict)
    candidate_options: Mapping[str, Any] = field(default_factory=dict)
    oracle: bool = True
    oracle_model: str | None = None
    oracle_draft: str | None = "auto"
    oracle_share_prefix: bool = True
    samples: int = DEFAULT_SAMPLES
    chunk_size: int = DEFAULT_CHUNK_SIZE
    seed: int = 0
    alpha: float = DEFAULT_ALPHA
    tolerance: float = DEFAULT_TOLERANCE
    out_dir: Path = Path("speceq-out")
    resume: bool = True
    threads: int | None = None
    progress: bool = True
    executor: str = "local"
    workers: int | None = 1
    ray_address: str | None = None
    near_tie_nats: float = NEAR_TIE_NATS
    support_margin_nats: float = SUPPORT_MARGIN_OFF
    oracle_dtype: str = "float32"
    oracle_server: str | None = None
    oracle_top_logprobs: int | None = None
    sequential: bool = False
    certificate: str = "tv"
    chunk_timeout: float | None = DEFAULT_CHUNK_TIMEOUT_S
    numerics_tolerance: float = NUMERICS_TOLERANCE
    numerics_control: str | None = None
    control_options: Mapping[str, Any] = field(default_factory=dict)
    control_ratio: float = CONTROL_RATIO

    def __post_init__(self) -> None:
        def bad(name: str, expected: str) -> ConfigError:
            return ConfigError(f"expected {expected}, got {getattr(self, name)!r}", where=f"run.{name}")

        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        for name in ("baseline", "candidate"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise bad(name, "a non-empty engine spec")
            if not isinstance(getattr(self, f"{name}_options"), Mapping):
                raise bad(f"{name}_options", "a mapping of option names to values")
        if not is_int(self.samples) or self.samples < 1:
            raise bad("samples", "an integer >= 1")
        if not is_int(self.chunk_size) or self.chunk_size < 1:
            raise bad("chunk_size", "an integer >= 1")
        if not is_int(self.seed) or self.seed < 0:
            raise bad("seed", "an integer >= 0")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not 0 < self.alpha < 1:
            raise bad("alpha", "a number in (0, 1)")
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, float)) or not 0 < self.tolerance <= 1:
            raise bad("tolerance", "a total-variation distance in (0, 1]")
        if isinstance(self.numerics_tolerance, bool) or not isinstance(self.numerics_tolerance, (int, float)) \
                or not 0 <= self.numerics_tolerance <= 1:
            raise bad("numerics_tolerance", "a total-variation distance in [0, 1] (0: off)")
        if isinstance(self.near_tie_nats, bool) or not isinstance(self.near_tie_nats, (int, float)) \
                or not 0 <= self.near_tie_nats < float("inf"):
            raise bad("near_tie_nats", "a finite number of nats >= 0")
        if isinstance(self.support_margin_nats, bool) or not isinstance(self.support_margin_nats, (int, float)) \
                or not 0 <= self.support_margin_nats <= float("inf"):
            raise bad("support_margin_nats", "a number of nats >= 0, or inf (no support hard failure)")
        if self.threads is not None and (not is_int(self.threads) or self.threads < 1):
            raise bad("threads", "an integer >= 1 or None")
        if self.executor not in EXECUTORS:
            raise bad("executor", f"one of {', '.join(EXECUTORS)}")
        if self.workers is not None and (not is_int(self.workers) or self.workers < 1):
            raise bad("workers", "an integer >= 1 or None (one per usable CPU)")
        if self.ray_address is not None and (not isinstance(self.ray_address, str) or not self.ray_address):
            raise bad("ray_address", "a Ray cluster address ('auto', 'HOST:PORT', 'ray://HOST:PORT') or None")
        if self.ray_address is not None and self.executor != "ray":
            raise bad("ray_address", "no address unless executor='ray'")
        for name in ("oracle", "oracle_share_prefix", "resume", "progress", "sequential"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, "True or False")
        if self.oracle_model is not None and not isinstance(self.oracle_model, str):
            raise bad("oracle_model", "a model folder path or None")
        if self.oracle_draft is not None and (not isinstance(self.oracle_draft, str) or not self.oracle_draft):
            raise bad("oracle_draft", "'auto', 'bundled', a model folder path or None")
        if self.oracle_dtype not in ORACLE_DTYPES:
            raise bad("oracle_dtype", f"one of {', '.join(ORACLE_DTYPES)}")
        if self.oracle_server is not None:
            if not isinstance(self.oracle_server, str) or not self.oracle_server.startswith(("http://", "https://")):
                raise bad("oracle_server", "an http(s) URL of an OpenAI-compatible server, or None")
            if self.oracle_model is not None:
                raise bad("oracle_model", "no model folder with oracle_server (the server's model is the oracle's)")
        if self.oracle_top_logprobs is not None:
            if not is_int(self.oracle_top_logprobs) or self.oracle_top_logprobs < 2:
                raise bad("oracle_top_logprobs", "an integer >= 2, or None (the whole vocabulary)")
            if self.oracle_server is None:
                raise bad("oracle_top_logprobs", "no value without oracle_server")
        if self.chunk_timeout is not None:
            if isinstance(self.chunk_timeout, bool) or not isinstance(self.chunk_timeout, (int, float)) \
                    or not 0 < self.chunk_timeout < float("inf"):
                raise bad("chunk_timeout", "a number of seconds > 0, or None (no limit)")
            if self.executor == "ray":
                raise bad("chunk_timeout", "None with executor='ray' (Ray tasks have no chunk timeout)")
        if self.certificate not in CERTIFICATES:
            raise bad("certificate", f"one of {', '.join(CERTIFICATES)}")
        if self.certificate == "pit-law" and not self.oracle:
            raise bad("certificate", "'tv' without the oracle (the PIT-law bound is computed from its scores)")
        if self.certificate == "pit-law" and self.sequential:
            raise bad("certificate", "'tv' in a sequential run (the PIT-law bound holds for a fixed sample size)")
        if self.numerics_control is not None:
            if not isinstance(self.numerics_control, str) or not (
                    self.numerics_control == CONTROL_AUTO or self.numerics_control.startswith(("http://", "https://"))):
                raise bad("numerics_control", f"None, {CONTROL_AUTO!r} (the baseline engine at the candidate's dtype "
                          "and device) or the http(s) URL of a second plain server endpoint")
            if self.sequential:
                raise bad("numerics_control", "None in a sequential run (the control arm runs in fixed-size runs)")
        if not isinstance(self.control_options, Mapping):
            raise bad("control_options", "a mapping of option names to values")
        if self.control_options and self.numerics_control is None:
            raise bad("control_options", "no options without numerics_control")
        if isinstance(self.control_ratio, bool) or not isinstance(self.control_ratio, (int, float)) \
                or not 1 <= self.control_ratio <= MAX_CONTROL_RATIO:
            raise bad("control_ratio", f"a number of control samples per candidate sample, from 1 to "
                      f"{MAX_CONTROL_RATIO:g} (the control never has fewer rows than the candidate)")
        object.__setattr__(self, "out_dir", Path(self.out_dir))

    def settings(self) -> dict[str, Any]:
        """JSON-able settings for provenance."""
        return {
            "baseline": self.baseline, "candidate": self.candidate,
            "baseline_options": dict(self.baseline_options), "candidate_options": dict(self.candidate_options),
            "oracle": self.oracle, "oracle_model": self.oracle_model, "oracle_draft": self.oracle_draft,
            "oracle_share_prefix": self.oracle_share_prefix,
            "samples": self.samples,
            "chunk_size": self.chunk_size, "seed": self.seed, "alpha": self.alpha, "tolerance": self.tolerance,
            "out_dir": str(self.out_dir), "resume": self.resume, "threads": self.threads,
            "executor": self.executor, "workers": self.workers, "ray_address": self.ray_address,
            "near_tie_nats": self.near_tie_nats, "support_margin_nats": self.support_margin_nats,
            "oracle_dtype": self.oracle_dtype,
            "oracle_server": self.oracle_server, "oracle_top_logprobs": self.oracle_top_logprobs,
            "sequential": self.sequential, "certificate": self.certificate,
            "chunk_timeout": self.chunk_timeout, "numerics_tolerance": self.numerics_tolerance,
            "numerics_control": self.numerics_control, "control_options": dict(self.control_options),
            "control_ratio": self.control_ratio,
        }

    def control_samples(self, samples: int) -> int:
        """The control's samples of a case whose candidate draws ``samples``: ceil(control_ratio x samples)."""
        return math.ceil(round(self.control_ratio * samples, 9))

    def control_spec(self) -> tuple[str, dict[str, Any]]:
        """(spec, options) of the numerics control engine (ConfigError naming the field when it cannot be built).

        ``"auto"``: the baseline's spec and options with the candidate's ``dtype`` and ``device``
        options over them; a URL: the baseline's with ``base_url`` set to it (the baseline must be a
        server engine, one with a ``base_url`` option). ``control_options`` go over either.
        """
        if self.numerics_control is None:
            raise ConfigError("the run has no numerics control", where="run.numerics_control")
        options = dict(self.baseline_options)
        if self.numerics_control == CONTROL_AUTO:
            options.update({k: self.candidate_options[k] for k in NUMERICS_OPTIONS if k in self.candidate_options})
        else:
            if "base_url" not in options:
                raise ConfigError(
                    f"a control endpoint ({self.numerics_control!r}) replaces the baseline server's base_url, but the "
                    f"baseline {self.baseline!r} has no base_url option; a baseline that runs a model takes "
                    f"numerics_control={CONTROL_AUTO!r} (--numerics-control without a URL)", where="run.numerics_control")
            options["base_url"] = self.numerics_control
        options.update(self.control_options)
        return self.baseline, options

    def oracle_spec(self) -> OracleSpec | None:
        """The oracle settings of this run, None when the oracle is off."""
        if not self.oracle:
            return None
        return OracleSpec(model=self.oracle_model, draft=self.oracle_draft, share_prefix=self.oracle_share_prefix,
                          dtype=self.oracle_dtype, server=self.oracle_server, top_logprobs=self.oracle_top_logprobs)


__all__ = ["CONTROL_AUTO", "MAX_CONTROL_RATIO", "NUMERICS_OPTIONS", "PROVENANCE_FILE", "RESULT_FILE", "RunConfig"]
