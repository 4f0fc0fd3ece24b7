"""What a run refuses before it samples anything: empty or duplicate cases, too few samples,
engines that cannot be compared, prompts outside an engine's vocabulary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from speceq.engines.base import Engine, check_sampling_support
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.models.grammar import check_grammar
from speceq.pipeline.config import RunConfig
from speceq.store import ROLES

#: Fewest samples per engine of a sampling case with which any of its tests can reject.
MIN_SAMPLES = 10


def check_cases(cases: Sequence[Case]) -> None:
    """Refuse an empty case list or duplicate case ids (ConfigError naming them)."""
    if not cases:
        raise ConfigError("no cases to run", where="cases")
    ids = [c.case_id for c in cases]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise ConfigError(f"duplicate case ids {dup}", where="cases")


def check_sample_sizes(config: RunConfig, cases: Sequence[Case]) -> None:
    """Refuse sampling cases with too few samples for any test to say anything."""
    from speceq.stats import required_n_two_sample

    for case in cases:
        n = case.samples or config.samples
        if not case.params.greedy and n < MIN_SAMPLES:
            need = required_n_two_sample(config.tolerance, 10, config.alpha)
            raise ConfigError(
                f"{n} samples per engine is too few for any test (at least {MIN_SAMPLES}); detecting a TV shift of "
                f"{config.tolerance:g} over ~10 likely tokens at alpha={config.alpha:g} needs about {need}",
                where=f"case {case.case_id!r}.samples" if case.samples else "run.samples",
            )


def check_engines_comparable(engines: Mapping[str, Engine]) -> None:
    """Baseline and candidate must share a vocabulary and an EOS id: their tokens are compared as ids."""
    from speceq.models.vocab import option_hint, source_note

    base, cand = engines["baseline"], engines["candidate"]
    for attr in ("vocab_size", "eos_token_id"):
        a, b = getattr(base, attr), getattr(cand, attr)
        if a != b:
            # fix the side whose value nothing declared (the byte model's default), else the candidate
            role, value = ("baseline", b) if source_note(base, attr) and not source_note(cand, attr) else ("candidate", a)
            what = "vocabulary" if attr == "vocab_size" else "EOS id"
            def note(engine: Engine, attr: str = attr) -> str:
                return " (the bundled byte model's default)" if source_note(engine, attr) else ""

            raise ConfigError(
                f"the candidate {cand.name!r} has {what} {b}{note(cand)} but the baseline {base.name!r} "
                f"has {a}{note(base)}: token ids of different vocabularies or tokenizers cannot be "
                f"compared; {option_hint(role, attr, value, engines[role])}",
                where=f"engines.{attr}",
            )


def check_case_vocabularies(cases: Sequence[Case], engines: Mapping[str, Engine]) -> None:
    """Every prompt id of every case must be in both engines' vocabularies (ConfigError with the fixing option)."""
    from speceq.models.vocab import option_hint, source_note

    for role in ROLES:
        eng = engines[role]
        for case in cases:
            try:
                case.check_vocab(eng.vocab_size)
            except ConfigError as e:
                raise ConfigError(
                    f"{e} ({role} engine {eng.name!r}, vocabulary {eng.vocab_size}{source_note(eng, 'vocab_size')}); "
                    f"if the prompts are right, {option_hint(role, 'vocab_size', '<the model vocabulary size>', eng)}"
                ) from None


def check_sampling_fields(cases: Sequence[Case], engines: Mapping[str, Engine]) -> None:
    """Every request field a case sets (min_p, penalties, logit_bias, structured_outputs) must be one both
    engines apply (ConfigError naming the case, the field and the engine), so no field is silently dropped;
    a grammar must parse (ConfigError naming the case; also when llguidance is not installed)."""
    for case in cases:
        check_grammar(case.params, case.case_id)
    for role in ROLES:
        for case in cases:
            check_sampling_support(engines[role], case.params, case.case_id, role=role)


__all__ = ["MIN_SAMPLES", "check_case_vocabularies", "check_cases", "check_engines_comparable", "check_sample_sizes",
           "check_sampling_fields"]
