"""Stop strings on decoded text: where a row ends, and its text with or without the stop string."""

from __future__ import annotations

import pytest

from speceq.core.stops import first_stop, stop_text
from speceq.models.text_decoding import row_decoder
from speceq.models.tokenizer import ByteTokenizer

TOK = ByteTokenizer()
DECODE = row_decoder("bytes")


def ids(text: str) -> list[int]:
    return TOK.encode(text, add_bos=False)


def test_a_row_ends_at_the_token_that_completes_the_first_stop_string() -> None:
    row = ids("abc\nxy\n")
    m = first_stop(row, DECODE, ["\n"])
    assert (m.length, m.stop, m.start) == (4, "\n", 3)
    # a stop string spread over tokens completes at its last byte
    m = first_stop(ids("hello world"), DECODE, ["lo w"])
    assert (m.length, m.start) == (7, 3)
    # the earliest completion wins, not the first listed string
    m = first_stop(ids("a;b.c"), DECODE, [".", ";"])
    assert (m.length, m.stop) == (2, ";")
    assert first_stop(ids("abc"), DECODE, ["x"]) is None
    assert first_stop(ids("abc"), DECODE, []) is None


def test_start_skips_prefixes_known_to_hold_none() -> None:
    row = ids("ab\ncd")
    assert first_stop(row, DECODE, ["\n"], start=2).length == 3  # a continuation searches its new tokens
    assert first_stop(ids("abcd"), DECODE, ["cd"], start=4) is None  # no prefix longer than 4
    assert first_stop(ids("abcd"), DECODE, ["cd"], start=3).length == 4


def test_a_multibyte_stop_completes_at_its_last_byte() -> None:
    row = ids("caf\u00e9!")  # e-acute is two UTF-8 bytes: the first alone decodes to U+FFFD
    m = first_stop(row, DECODE, ["\u00e9"])
    assert m.length == 5 and m.start == 3


@pytest.mark.parametrize(("include", "want"), [(False, "x = 1"), (True, "x = 1\n")])
def test_the_text_keeps_the_stop_string_only_when_asked(include: bool, want: str) -> None:
    assert stop_text(ids("x = 1\ny"), DECODE, ["\n"], include) == want
    assert stop_text(ids("no stop"), DECODE, ["\n"], include) == "no stop"


def test_the_text_cut_uses_the_stop_strings_start_not_the_tokens() -> None:
    # the completing token may end inside a longer text with a BPE tokenizer; here: a 3-char stop
    assert stop_text(ids("ab###cd"), DECODE, ["###"], False) == "ab"
    assert stop_text(ids("ab###cd"), DECODE, ["###"], True) == "ab###"


def test_special_tokens_are_skipped_in_the_text() -> None:
    row = [TOK.bos_token_id, *ids("a\n")]
    assert first_stop(row, DECODE, ["\n"]).length == 3
    assert stop_text(row, DECODE, ["\n"], True) == "a\n"


def test_an_unknown_tokenizer_is_a_config_error() -> None:
    from speceq.errors import ConfigError

    with pytest.raises(ConfigError, match="neither a name"):
        row_decoder("/nonexistent/tokenizer.json")
