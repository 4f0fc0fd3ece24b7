"""Resolve an engine from a name, a ``module:attr`` / ``file.py:attr`` string, an entry point,
an Engine instance or a plain function.

Built-in names are lazy ``"module:attr"`` strings: importing this module imports no torch.
Third-party engines register in the entry-point group ``speceq.engines``::

    [project.entry-points."speceq.engines"]
    my-engine = "my_package.engines:MyEngine"

The resolved attribute may be an Engine instance, a class or factory (called with
``**options``), or a plain sampling function ``fn(prompt_ids, n, params, seed)`` (wrapped
by :class:`~speceq.engines.function.FunctionEngine` with ``options``).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import inspect
import json
from collections.abc import Callable, Mapping
from typing import Any

from speceq.core.user_code import load_attribute
from speceq.engines._options import unknown_options_message
from speceq.engines.base import Engine
from speceq.engines.function import FunctionEngine
from speceq.errors import ConfigError, EngineNotFound

#: Entry-point group of third-party engines.
ENTRY_POINT_GROUP = "speceq.engines"

#: Built-in engines, loaded on first use.
BUILTIN_ENGINES: dict[str, str] = {
    "baseline": "speceq.engines.baseline:BaselineEngine",
    "reference": "speceq.engines.reference:ReferenceSpeculativeEngine",
    "hf-sample": "speceq.engines.hf:HFSampleEngine",
    "hf-assisted": "speceq.engines.hf:HFAssistedEngine",
    "hf-prompt-lookup": "speceq.engines.hf:HFPromptLookupEngine",
    "hf-early-exit": "speceq.engines.hf_paths:HFEarlyExitEngine",
    "hf-universal": "speceq.engines.hf_paths:HFUniversalEngine",
    "hf-mtp": "speceq.engines.hf_paths:HFMTPEngine",
    "hf-dflash": "speceq.engines.hf_paths:HFDFlashEngine",
    "hf-multi-token": "speceq.engines.hf_paths:HFMultiTokenEngine",
    "hf-ensemble": "speceq.engines.hf_paths:HFEnsembleEngine",
    "openai": "speceq.engines.openai:OpenAICompletionsEngine",
}

#: ``mutant:<name>`` resolves to ``make_mutant(name, **options)`` of this module.
MUTANT_PREFIX = "mutant:"
MUTANT_FACTORY = "speceq.engines.mutants:make_mutant"

#: Number of required positional parameters of a plain sampling function.
_SAMPLE_FN_ARITY = 4


def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def list_engines() -> list[str]:
    """Names ``resolve_engine`` knows: built-ins, ``mutant:<name>``, then entry points (sorted)."""
    plugins = sorted(n for n in _entry_points() if n not in BUILTIN_ENGINES)
    return [*BUILTIN_ENGINES, f"{MUTANT_PREFIX}<name>", *plugins]


def resolve_engine(
    spec: str | Engine | Callable[..., Any], *, options: Mapping[str, Any] | None = None
) -> Engine:
    """Return the engine ``spec`` names, built with ``options``.

    ``spec``: a built-in name (see :func:`list_engines`), ``"mutant:<name>"``,
    ``"package.module:attr"``, ``"path/to/file.py:attr"``, an entry-point name of group
    ``speceq.engines``, an Engine instance, or a callable (class, factory or plain function).
    Raises EngineNotFound (unknown name, with "did you mean"; import failure, naming what
    failed) or ConfigError (options that do not fit).
    """
    opts = dict(options or {})
    if isinstance(spec, str):
        label = spec
        if spec.startswith(MUTANT_PREFIX):
            factory = _load_target(MUTANT_FACTORY, label)
            return _check_engine(factory(spec[len(MUTANT_PREFIX) :], **opts), label)
        if spec in BUILTIN_ENGINES:
            obj = _load_target(BUILTIN_ENGINES[spec], label)
        elif ":" in spec:
            obj = _load_target(spec, label)
        else:
            plugins = _entry_points()
            if spec not in plugins:
                raise _unknown(spec, list(BUILTIN_ENGINES) + sorted(plugins))
            try:
                obj = plugins[spec].load()
            except Exception as exc:  # any import-time failure of third-party code
                raise EngineNotFound(
                    f"engine {spec!r}: entry point {plugins[spec].value!r} failed to load: {type(exc).__name__}: {exc}"
                ) from exc
    else:
        label = getattr(spec, "name", None) or getattr(spec, "__qualname__", type(spec).__name__)
        obj = spec
    return _instantiate(obj, opts, str(label))


def _unknown(name: str, known: list[str]) -> EngineNotFound:
    close = difflib.get_close_matches(name, known + [f"{MUTANT_PREFIX}<name>"], n=3, cutoff=0.5)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return EngineNotFound(
        f"unknown engine {name!r}.{hint} Known engines: {', '.join(known)}, {MUTANT_PREFIX}<name>; "
        "or give 'package.module:attr' or 'path/to/file.py:attr'."
    )


def _load_target(target: str, label: str) -> Any:
    """Import ``module:attr`` or ``file.py:attr`` and return the attribute."""
    return load_attribute(target, kind="engine", label=label)


def _is_engine(obj: Any) -> bool:
    return not inspect.isclass(obj) and isinstance(obj, Engine)


def _positional_required(obj: Any) -> list[str]:
    """Names of the required positional parameters of a callable ([] when it has no signature)."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    return [p.name for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]


def check_engine_spec(spec: str) -> None:
    """Fail fast on a spec that cannot resolve, without building the engine (no model is loaded).

    Checks that a built-in name, ``mutant:<name>``, entry-point name or ``module:attr`` /
    ``file.py:attr`` exists and imports; raises EngineNotFound as :func:`resolve_engine` would.
    Options are checked when the engine is built.
    """
    if not isinstance(spec, str) or not spec:
        raise EngineNotFound(f"engine spec must be a non-empty string, got {spec!r}")
    if spec.startswith(MUTANT_PREFIX):
        from speceq.engines.mutants import MUTANTS

        name = spec[len(MUTANT_PREFIX):]
        if name not in MUTANTS:
            close = difflib.get_close_matches(name, list(MUTANTS), n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            raise EngineNotFound(f"unknown mutant {name!r}.{hint} Known mutants: {', '.join(MUTANTS)}")
        return
    if spec in BUILTIN_ENGINES:
        return
    if ":" in spec:
        _load_target(spec, spec)
        return
    plugins = _entry_points()
    if spec not in plugins:
        raise _unknown(spec, list(BUILTIN_ENGINES) + sorted(plugins))


def _is_sample_function(obj: Any) -> bool:
    """A plain ``fn(prompt_ids, n, params, seed)``: exactly 4 required positional parameters."""
    if inspect.isclass(obj) or not callable(obj):
        return False
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return False
    required = [
        p
        for p in sig.parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    return len(required) == _SAMPLE_FN_ARITY


def _instantiate(obj: Any, options: dict[str, Any], label: str) -> Engine:
    if _is_engine(obj):
        if options:
            raise ConfigError(
                f"options {sorted(options)} given, but {label!r} is an engine instance already; "
                "point at a class or factory to pass options",
                where=f"engine {label!r}",
            )
        return obj
    if _is_sample_function(obj):
        allowed = {"vocab_size", "eos_token_id", "name"}
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise ConfigError(
                f"unknown option(s) {unknown} for a plain sampling function; expected some of {sorted(allowed)}",
                where=f"engine {label!r}",
            )
        # the name is the spec the user typed ("my_engine.py:sample"), not the function's __qualname__
        return FunctionEngine(obj, **{"name": label, **options})
    if not callable(obj):
        raise ConfigError(
            f"{label!r} is a {type(obj).__name__}: expected an Engine, a class, a factory or a function "
            "fn(prompt_ids, n, params, seed)",
            where=f"engine {label!r}",
        )
    try:
        inspect.signature(obj).bind(**options)
    except TypeError as exc:
        unknown, allowed = _unknown_keywords(obj, options)
        if unknown:
            raise ConfigError(unknown_options_message(unknown, allowed), where=f"engine {label!r}") from None
        if not inspect.isclass(obj) and _positional_required(obj):
            raise ConfigError(
                f"{label}{inspect.signature(obj)} is not a sampling function: expected the signature "
                f"fn(prompt_ids, n, params, seed) (4 positional parameters) returning n token lists, got "
                f"{len(_positional_required(obj))} required positional parameter(s) "
                f"({', '.join(_positional_required(obj))}); a factory instead is called with the engine options "
                f"only ({exc})",
                where=f"engine {label!r}",
            ) from None
        raise ConfigError(
            f"options {options} do not fit {label}{inspect.signature(obj)}: {exc}", where=f"engine {label!r}"
        ) from None
    except ValueError:  # no signature (builtins): let the call decide
        pass
    return _check_engine(obj(**options), label)


def _unknown_keywords(obj: Any, options: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(given options ``obj`` has no parameter for, its keyword parameters); ([], ...) when it takes ``**kwargs``."""
    try:
        params = list(inspect.signature(obj).parameters.values())
    except (TypeError, ValueError):
        return [], []
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return [], []
    allowed = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    return sorted(set(options) - set(allowed)), allowed


def _check_engine(engine: Any, label: str) -> Engine:
    if not _is_engine(engine):
        missing = [a for a in ("name", "vocab_size", "eos_token_id", "describe", "sample") if not hasattr(engine, a)]
        raise ConfigError(
            f"{label!r} produced a {type(engine).__name__}, not an Engine (missing: {', '.join(missing) or '?'})",
            where=f"engine {label!r}",
        )
    return engine


def parse_engine_options(items: list[str]) -> dict[str, Any]:
    """Parse CLI ``key=value`` strings: JSON values (numbers, true/false/null, lists, objects)
    are decoded, ``True``/``False``/``None`` accepted, anything else stays a string.
    Dashes in keys become underscores.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise ConfigError("expected key=value with a Python identifier as key", where=f"engine option {item!r}")
        if key in out:
            raise ConfigError(f"option {key!r} given twice", where=f"engine option {item!r}")
        out[key] = _parse_value(raw.strip())
    return out


def _parse_value(raw: str) -> Any:
    words = {"True": True, "False": False, "None": None}
    if raw in words:
        return words[raw]
    try:
        return json.loads(raw)
    except ValueError:
        return raw
