"""Stop strings: where a row ends, and its text with or without the stop string.

A row's generated tokens are decoded (``decode``: token ids -> text) after each token; the row
ends at the first token after which its text contains one of the stop strings, as vLLM checks
stop strings on the text generated so far (the prompt's text is never searched). That token
is the row's last, exactly as an EOS would be: its tokens do not depend on
``include_stop_str_in_output``, which only says whether the row's *text* keeps the stop
string (:func:`stop_text`). Pure functions on token lists; the decoder comes from the caller
(:func:`speceq.models.text_decoding.row_decoder`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Decoder = Callable[[Sequence[int]], str]


@dataclass(frozen=True, slots=True)
class StopMatch:
    """The first stop string a row's text contains: which one, and where.

    length: the row's tokens up to and including the one that completed it. stop: the stop
    string. start: its character offset in the text of those ``length`` tokens.
    """

    length: int
    stop: str
    start: int


def _first_in(text: str, stops: Sequence[str]) -> tuple[str, int] | None:
    """The stop string occurring earliest in ``text`` (ties: the one listed first), with its offset."""
    best: tuple[str, int] | None = None
    for s in stops:
        i = text.find(s)
        if i >= 0 and (best is None or i < best[1]):
            best = (s, i)
    return best


def first_stop(tokens: Sequence[int], decode: Decoder, stops: Sequence[str], *, start: int = 0) -> StopMatch | None:
    """The first prefix ``tokens[:n]`` (``n > start``) whose decoded text contains a stop string; None if none.

    ``start``: a prefix length already known to hold none (the tokens committed earlier), so
    only the prefixes that end at a later token are decoded.
    """
    if not stops:
        return None
    for n in range(max(start, 0) + 1, len(tokens) + 1):
        hit = _first_in(decode(tokens[:n]), stops)
        if hit is not None:
            return StopMatch(length=n, stop=hit[0], start=hit[1])
    return None


def stop_text(tokens: Sequence[int], decode: Decoder, stops: Sequence[str], include_stop_str_in_output: bool) -> str:
    """The text of a row: its decoded tokens, cut at the first stop string (kept when ``include_stop_str_in_output``)."""
    match = first_stop(tokens, decode, stops)
    if match is None:
        return decode(tokens)
    text = decode(tokens[: match.length])
    return text[: match.start + (len(match.stop) if include_stop_str_in_output else 0)]


__all__ = ["Decoder", "StopMatch", "first_stop", "stop_text"]
