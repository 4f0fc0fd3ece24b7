"""Building a run's oracle from its settings and engines, and saying where its models come from.

The oracle scores with the target model: by default the baseline engine's loaded model (so
the oracle sees exactly the weights the baseline samples from), else the bundled target; the
draft for the draft ratio comparison comes from the candidate engine when it exposes one. A server
oracle (``server``) scores with an OpenAI-compatible server's prompt log-probabilities instead.
Worker processes rebuild the same oracle from :class:`ModelSource` descriptions.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from speceq.engines.base import Engine
from speceq.errors import ConfigError
from speceq.oracles.protocol import Oracle


@dataclass(frozen=True, slots=True)
class ModelSource:
    """Where an oracle model comes from: ``engine`` (role, attribute) of the worker's engine, else ``path`` (None: bundled)."""

    path: str | None = None
    engine_role: str | None = None
    engine_attribute: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class OracleSpec:
    """The oracle settings of a run (validated by :class:`speceq.pipeline.runner.RunConfig`).

    model: a model folder (None: the baseline engine's loaded model, else the bundled target).
    draft: ``"auto"`` (the candidate engine's loaded ``.draft``), ``"bundled"``, a folder, or None.
    share_prefix: score generated tokens against each prompt's cache (docs/reference). dtype: the
    transformers oracle's precision. server: an OpenAI-compatible server URL instead of a model;
    top_logprobs: raw log-probabilities it asks per position (None: the whole vocabulary).
    """

    model: str | None = None
    draft: str | None = "auto"
    share_prefix: bool = True
    dtype: str = "float32"
    server: str | None = None
    top_logprobs: int | None = None


def loaded_model(engine: Engine, attribute: str) -> Any | None:
    """``engine.<attribute>`` when it is a loaded transformers model, else None."""
    model = getattr(engine, attribute, None)
    return model if model is not None and hasattr(model, "config") and hasattr(model, "forward") else None


#: Attributes under which engines keep their loaded target model: ``model`` (speceq's baseline and
#: reference engines), ``target`` (the ``hf-*`` engines).
TARGET_ATTRIBUTES = ("model", "target")


def target_attribute(engine: Engine) -> str | None:
    """The attribute of ``engine`` that holds its loaded target model (see :data:`TARGET_ATTRIBUTES`), or None."""
    return next((a for a in TARGET_ATTRIBUTES if loaded_model(engine, a) is not None), None)


def oracle_sources(spec: OracleSpec, engines: Mapping[str, Engine]) -> tuple[ModelSource, ModelSource | None]:
    """Where :func:`make_oracle`'s target and draft come from, for worker processes to build the same oracle."""
    attribute = target_attribute(engines["baseline"])
    if spec.model is not None:
        target = ModelSource(path=spec.model)
    elif attribute is not None:
        target = ModelSource(engine_role="baseline", engine_attribute=attribute)
    else:
        target = ModelSource()
    if spec.draft == "auto":
        has = loaded_model(engines["candidate"], "draft") is not None
        draft = ModelSource(engine_role="candidate", engine_attribute="draft") if has else None
    elif spec.draft == "bundled":
        from speceq.models import DRAFT_DIR

        draft = ModelSource(path=str(DRAFT_DIR))
    else:
        draft = None if spec.draft is None else ModelSource(path=spec.draft)
    return target, draft


def make_oracle(spec: OracleSpec, engines: Mapping[str, Engine]) -> Oracle:
    """The oracle of ``spec`` for these engines (see :class:`OracleSpec` for the defaults)."""
    base = engines["baseline"]
    if spec.server is not None:
        from speceq.oracles.server import ServerOracle

        return ServerOracle(spec.server, vocab_size=base.vocab_size, eos_token_id=base.eos_token_id,
                            top_logprobs=spec.top_logprobs)
    from speceq.models.hf_utils import model_in_dtype
    from speceq.oracles.hf import TargetOracle

    attribute = target_attribute(base)
    target = spec.model if spec.model is not None else None if attribute is None else loaded_model(base, attribute)
    target = model_in_dtype(target, spec.dtype)
    if spec.draft == "auto":
        draft = model_in_dtype(loaded_model(engines["candidate"], "draft"), spec.dtype)
    elif spec.draft == "bundled":
        from speceq.models import DRAFT_DIR

        draft = DRAFT_DIR
    else:
        draft = spec.draft
    # the oracle masks the EOS the baseline masks (ignore_eos): the baseline's, learnt from its model
    return TargetOracle(target, draft=draft, eos_token_id=base.eos_token_id, share_prefix=spec.share_prefix,
                        dtype=spec.dtype)


def check_oracle_matches(oracle: Oracle, engines: Mapping[str, Engine]) -> None:
    """The oracle's model must score the baseline's vocabulary."""
    base = engines["baseline"]
    if oracle.vocab_size != base.vocab_size:
        raise ConfigError(
            f"oracle model has a vocabulary of {oracle.vocab_size} but baseline {base.name!r} has {base.vocab_size}: "
            "it is not the baseline's target model (pass --oracle-model DIR, or --no-oracle)",
            where="oracle.model",
        )


__all__ = ["TARGET_ATTRIBUTES", "ModelSource", "OracleSpec", "check_oracle_matches", "loaded_model", "make_oracle",
           "oracle_sources", "target_attribute"]
