"""The bundled model worlds of ``speceq run --models``: which models and cases a world uses.

- ``byte``: the 259-token byte models (``target/``, ``draft/``) and ``speceq.cases.default_cases()``;
- ``bpe``: the 32 000-token BPE models (``bpe-target/``, ``bpe-draft/``) and :func:`bpe_cases`.

:func:`world_engine_options` fills the model-folder options (``target``, ``draft``, or the
``openai`` engine's ``tokenizer``) of the built-in engines for a world, leaving every option
the user gave untouched; engines it does not know (plug-ins, plain functions) declare their
own vocabulary. Python users pass the same folders as engine options themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from speceq.errors import ConfigError

if TYPE_CHECKING:
    from speceq.params import Case

WORLDS: tuple[str, ...] = ("byte", "bpe")

_TARGET_ONLY = {"baseline", "hf-sample", "hf-prompt-lookup", "mutant:draft-is-target"}
_TARGET_AND_DRAFT = {"reference", "hf-assisted"}


def check_world(world: str) -> str:
    """Return ``world`` or raise :class:`ConfigError` listing the known worlds."""
    if world not in WORLDS:
        raise ConfigError(f"unknown model world {world!r}; expected one of {', '.join(WORLDS)}", where="--models")
    return world


def world_engine_options(world: str, spec: str, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` with the world's model folders added where the built-in engine ``spec`` takes them."""
    check_world(world)
    out = dict(options)
    if world == "byte":
        return out
    from speceq.models.bpe import BPE_DRAFT_DIR, BPE_TARGET_DIR

    if spec in _TARGET_ONLY:
        out.setdefault("target", str(BPE_TARGET_DIR))
    elif spec in _TARGET_AND_DRAFT or spec.startswith("mutant:"):
        out.setdefault("target", str(BPE_TARGET_DIR))
        out.setdefault("draft", str(BPE_DRAFT_DIR))
    elif spec == "openai":
        if "vocab_size" not in out and "eos_token_id" not in out:
            out.setdefault("tokenizer", str(BPE_TARGET_DIR))
    return out


def bpe_cases() -> list[Case]:
    """The cases of ``speceq run --models bpe``: 7 cases over the BPE models, 4 new tokens each.

    The byte world's shapes (one unbatched first-token case; batch 4 with and without a longer
    companion; batch 32 with companions; T = 1.0 and 0.7; top-k 50 and top-p 0.9), with text
    prompts encoded by the BPE tokenizer, plus two cases on prompts that end the way modules
    end (``if __name__ == "__main__": main()``, followed by ``<eos>`` in the corpus). The
    bundled target is small and short-trained: it gives ``<eos>`` only ~4e-4 there
    (``bpe-metrics.json``, ``eos_mass``), so EOS rows are rare; the second of them therefore
    sets ``ignore_eos``, which exercises masking EOS id 31998 in every engine and the oracle.
    """
    from speceq.models.bpe import BPE_EOS_PROMPTS, BPE_PROMPTS, load_bpe_tokenizer
    from speceq.params import Case, SamplingParams

    tok = load_bpe_tokenizer()
    P, E = BPE_PROMPTS, BPE_EOS_PROMPTS

    def ids(text: str) -> tuple[int, ...]:
        return tuple(tok.encode(text).ids)

    def case(cid: str, prompt: str, *, batch_size: int = 1, companions: tuple[str, ...] = (), tokens: int = 4,
             **params: Any) -> Case:
        return Case(
            case_id=cid,
            prompt_ids=ids(prompt),
            params=SamplingParams(max_new_tokens=tokens, **params),
            batch_size=batch_size,
            companions=tuple(ids(c) for c in companions),
            text=prompt,
        )

    return [
        case("bpe-def-b1", P[0], temperature=1.0, tokens=1),
        case("bpe-import-b4-ragged", P[1], temperature=1.0, batch_size=4, companions=(P[2],)),
        case("bpe-raise-topk-b4", P[3], temperature=1.0, top_k=50, batch_size=4),
        case("bpe-repr-t07-b32", P[2], temperature=0.7, batch_size=32, companions=(P[4],)),
        case("bpe-class-topp-b32", P[4], temperature=1.0, top_p=0.9, batch_size=32),
        case("bpe-eos-b32", E[0], temperature=1.0, batch_size=32, companions=(P[5], E[1])),
        case("bpe-ignore-eos-t07-b4", E[1], temperature=0.7, batch_size=4, companions=(P[0],), ignore_eos=True),
    ]
