"""ByteTokenizer, and the Hugging Face tokenizer files that must agree with it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from speceq.errors import ConfigError
from speceq.models import BOS_ID, DRAFT_DIR, DRAFT_HD32_DIR, EOS_ID, PAD_ID, TARGET_DIR, VOCAB_SIZE, ByteTokenizer
from speceq.models.tokenizer import byte_symbols, write_hf_tokenizer

TOK = ByteTokenizer()


@given(st.text())
def test_encode_decode_round_trip(text: str) -> None:
    ids = TOK.encode(text)
    assert ids[0] == BOS_ID
    assert ids[1:] == list(text.encode("utf-8"))
    assert TOK.decode(ids) == text
    assert TOK.encode(text, add_bos=False) == ids[1:]


def test_constants_and_attributes() -> None:
    assert (VOCAB_SIZE, BOS_ID, EOS_ID, PAD_ID) == (259, 256, 257, 258)
    assert (TOK.vocab_size, TOK.bos_token_id, TOK.eos_token_id, TOK.pad_token_id) == (259, 256, 257, 258)


def test_decode_specials_and_invalid_utf8() -> None:
    ids = [BOS_ID, *b"ab", EOS_ID, PAD_ID]
    assert TOK.decode(ids) == "ab"
    assert TOK.decode(ids, skip_special=False) == "<bos>ab<eos><pad>"
    # shown specials cut a UTF-8 sequence; skipped ones do not (as in transformers' decode)
    assert TOK.decode([0xC3, EOS_ID, 0xA9], skip_special=False) == "\ufffd<eos>\ufffd"
    assert TOK.decode([0xC3, EOS_ID, 0xA9]) == "\u00e9"
    assert TOK.decode([0xC3, 0xA9]) == "é"
    assert TOK.decode([0xFF, 0x41]) == "\ufffdA"


def test_special_strings_are_not_parsed() -> None:
    assert TOK.encode("<eos>", add_bos=False) == list(b"<eos>")


@pytest.mark.parametrize(
    ("token_id", "label"),
    [(97, "'a'"), (10, "'\\n'"), (9, "'\\t'"), (32, "' '"), (EOS_ID, "<EOS>"), (BOS_ID, "<BOS>"),
     (PAD_ID, "<PAD>"), (0xFF, "0xff"), (0, "0x00"), (0xC3, "0xc3")],
)
def test_token_text(token_id: int, label: str) -> None:
    assert TOK.token_text(token_id) == label


@pytest.mark.parametrize("bad", [-1, VOCAB_SIZE, 10_000])
def test_out_of_range_ids_raise(bad: int) -> None:
    with pytest.raises(ConfigError, match=f"token id {bad} is outside"):
        TOK.decode([1, bad])
    with pytest.raises(ConfigError, match="token_text"):
        TOK.token_text(bad)


def test_non_integer_ids_and_text_raise() -> None:
    with pytest.raises(ConfigError, match=r"ids\[0\]"):
        TOK.decode(["a"])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="expected text"):
        TOK.encode(b"bytes")  # type: ignore[arg-type]


def test_numpy_and_torch_ids_are_accepted() -> None:
    import numpy as np
    import torch

    assert TOK.decode(np.array([104, 105])) == "hi"
    assert TOK.decode(torch.tensor([104, 105])) == "hi"


def test_byte_symbols_are_distinct_printable_and_ordered() -> None:
    symbols = byte_symbols()
    assert len(set(symbols)) == 256
    assert symbols[ord("a")] == "a" and symbols[0xC0] == "\u00c0"
    assert all(s.isprintable() for s in symbols)


@pytest.fixture(scope="module")
def auto_tokenizer():  # noqa: ANN201 (transformers type)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TARGET_DIR, local_files_only=True)


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_auto_tokenizer_agrees_with_byte_tokenizer(auto_tokenizer, text: str) -> None:  # noqa: ANN001
    ids = TOK.encode(text)
    assert auto_tokenizer(text).input_ids == ids
    assert auto_tokenizer.decode(ids, skip_special_tokens=True) == text


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, VOCAB_SIZE - 1), max_size=40))
def test_auto_tokenizer_decodes_any_ids_like_byte_tokenizer(auto_tokenizer, ids: list[int]) -> None:  # noqa: ANN001
    assert auto_tokenizer.decode(ids, skip_special_tokens=True) == TOK.decode(ids)
    assert auto_tokenizer.decode(ids, skip_special_tokens=False) == TOK.decode(ids, skip_special=False)


def test_auto_tokenizer_special_ids(auto_tokenizer) -> None:  # noqa: ANN001
    assert (auto_tokenizer.bos_token_id, auto_tokenizer.eos_token_id, auto_tokenizer.pad_token_id) == (256, 257, 258)
    assert len(auto_tokenizer) == VOCAB_SIZE
    assert auto_tokenizer("<eos>").input_ids == [BOS_ID, *b"<eos>"]


@pytest.mark.parametrize("folder", [TARGET_DIR, DRAFT_DIR, DRAFT_HD32_DIR], ids=["target", "draft", "draft-hd32"])
def test_packaged_tokenizer_files_match_a_fresh_build(folder, tmp_path) -> None:  # noqa: ANN001
    written = write_hf_tokenizer(tmp_path)
    for path in written:
        packaged = folder / path.name
        assert packaged.is_file(), f"{packaged} missing"
        assert json_or_text(packaged) == json_or_text(path), path.name


def json_or_text(path):  # noqa: ANN001, ANN201
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else text


def test_merges_file_has_one_merge_of_a_byte_absent_from_utf8() -> None:
    lines = (TARGET_DIR / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#version")
    (merge,) = lines[1:]
    left, right = merge.split(" ")
    for sym in (left, right):
        byte = byte_symbols().index(sym)
        with pytest.raises(UnicodeDecodeError):
            bytes([byte]).decode("utf-8")  # a lone lead byte
        assert byte in (0xC0, 0xC1) or byte >= 0xF5  # never valid anywhere in UTF-8
