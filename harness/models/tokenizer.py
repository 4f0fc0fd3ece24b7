"""The byte tokenizer of the bundled models: token id == byte value, plus three specials.

Ids 0..255 are the bytes of the UTF-8 text, ``<bos>`` = 256, ``<eos>`` = 257,
``<pad>`` = 258. Pure Python, so the harness can tokenise prompts without torch or
transformers. :func:`write_hf_tokenizer` writes the same tokenizer as a standard Hugging
Face ``tokenizer.json`` (byte-level BPE with no merges) so that ``AutoTokenizer``, vLLM and
llama.cpp's converter can load a model folder as it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from speceq.errors import ConfigError

VOCAB_SIZE = 259
BOS_ID = 256
EOS_ID = 257
PAD_ID = 258
SPECIAL_TOKENS: dict[int, str] = {BOS_ID: "<bos>", EOS_ID: "<eos>", PAD_ID: "<pad>"}

# byte 0xC0 never occurs in valid UTF-8, so a merge of two of them never fires on text
_HARMLESS_MERGE_BYTES = (0xC0, 0xC0)


def byte_symbols() -> list[str]:
    """The printable stand-in character of each byte, indexed by byte value.

    This is the byte-to-unicode table of byte-level BPE (GPT-2): printable Latin-1 bytes
    stand for themselves, the other bytes map to code points from 256 upward in byte order.
    """
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAC + 1)) | set(range(0xAE, 0xFF + 1))
    symbols: list[str] = []
    shifted = 0
    for b in range(256):
        if b in printable:
            symbols.append(chr(b))
        else:
            symbols.append(chr(256 + shifted))
            shifted += 1
    return symbols


class ByteTokenizer:
    """UTF-8 byte tokenizer with ``<bos>``, ``<eos>`` and ``<pad>`` specials.

    Special-token strings in text are NOT parsed: ``"<eos>"`` encodes to its five bytes.
    """

    vocab_size: int = VOCAB_SIZE
    bos_token_id: int = BOS_ID
    eos_token_id: int = EOS_ID
    pad_token_id: int = PAD_ID

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        """Token ids of ``text``: optional ``<bos>``, then its UTF-8 bytes."""
        if not isinstance(text, str):
            raise ConfigError(f"expected text (str), got {type(text).__name__}", where="ByteTokenizer.encode")
        ids = list(text.encode("utf-8"))
        return [BOS_ID, *ids] if add_bos else ids

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Text of ``ids``; invalid UTF-8 becomes U+FFFD. Specials are dropped or shown as ``<eos>``."""
        out: list[str] = []
        pending = bytearray()
        for i, tok in enumerate(ids):
            tok = self._check_id(tok, f"ByteTokenizer.decode: ids[{i}]")
            if tok < 256:
                pending.append(tok)
                continue
            if not skip_special:
                out.append(pending.decode("utf-8", errors="replace"))
                pending.clear()
                out.append(SPECIAL_TOKENS[tok])
        out.append(pending.decode("utf-8", errors="replace"))
        return "".join(out)

    def token_text(self, token_id: int) -> str:
        """A printable label for one token: ``'a'``, ``'\\n'``, ``<EOS>``, ``0xff``.

        Printable ASCII bytes and the escapes ``\\n``, ``\\t``, ``\\r`` are quoted with
        ``repr``; other bytes (control bytes, UTF-8 lead/continuation bytes) show as hex.
        """
        tok = self._check_id(token_id, "ByteTokenizer.token_text")
        if tok >= 256:
            return f"<{SPECIAL_TOKENS[tok].strip('<>').upper()}>"
        if 0x20 <= tok < 0x7F or tok in (0x09, 0x0A, 0x0D):
            return repr(chr(tok))
        return f"0x{tok:02x}"

    def _check_id(self, token_id: object, where: str) -> int:
        if isinstance(token_id, bool) or not isinstance(token_id, int):
            # numpy / torch integer scalars are accepted through __index__
            try:
                token_id = token_id.__index__()  # type: ignore[attr-defined]
            except AttributeError:
                raise ConfigError(f"expected an integer token id, got {token_id!r}", where=where) from None
        if not 0 <= token_id < VOCAB_SIZE:
            raise ConfigError(f"token id {token_id} is outside [0, {VOCAB_SIZE})", where=where)
        return token_id


def write_hf_tokenizer(folder: str | Path) -> list[Path]:
    """Write ``tokenizer.json`` and friends for the byte tokenizer into ``folder``.

    Byte-level BPE whose 256 byte symbols have id == byte value and no merges, specials
    ``<bos>``/``<eos>``/``<pad>`` = 256/257/258, and a post-processor that prepends
    ``<bos>``, so ``AutoTokenizer.from_pretrained(folder)("...").input_ids`` equals
    ``ByteTokenizer().encode("...")``. Also writes ``vocab.json`` and a ``merges.txt`` with
    one merge that never fires on UTF-8 text (llama.cpp's loader refuses a BPE vocabulary
    without merges). Built offline with the ``tokenizers`` package. Returns the paths written.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    symbols = byte_symbols()
    vocab = {sym: b for b, sym in enumerate(symbols)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(SPECIAL_TOKENS[i], special=True, normalized=False) for i in sorted(SPECIAL_TOKENS)])
    for i, text in SPECIAL_TOKENS.items():
        if tok.token_to_id(text) != i:
            raise ConfigError(f"special token {text} got id {tok.token_to_id(text)}, expected {i}", where=str(folder))
    bos = SPECIAL_TOKENS[BOS_ID]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1", special_tokens=[(bos, BOS_ID)]
    )
    paths = [folder / "tokenizer.json", folder / "tokenizer_config.json", folder / "special_tokens_map.json"]
    tok.save(str(paths[0]))
    specials = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "unk_token": None,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True,
        "add_prefix_space": False,
    }
    paths[1].write_text(json.dumps(tokenizer_config, indent=2) + "\n", encoding="utf-8")
    paths[2].write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")
    full_vocab = {**vocab, **{text: i for i, text in SPECIAL_TOKENS.items()}}
    vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
    vocab_path.write_text(json.dumps(full_vocab, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    a, b = (symbols[x] for x in _HARMLESS_MERGE_BYTES)
    merges_path.write_text(f"#version: 0.2\n{a} {b}\n", encoding="utf-8")
    return [*paths, vocab_path, merges_path]
