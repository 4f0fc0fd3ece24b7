"""Decode generated tokens to text with a case's tokenizer (for stop strings).

:func:`row_decoder` turns a tokenizer name (``bytes``, ``bpe``, ``smollm2``) or the path of a
``tokenizer.json`` (or of its folder) into a function token ids -> text, special tokens
skipped (vLLM's default ``skip_special_tokens``). Loaded once per name.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

from speceq.errors import ConfigError
from speceq.models.named_tokenizers import TOKENIZER_NAMES, named_tokenizer_folder

#: Name of the bundled byte tokenizer.
BYTES = "bytes"


def tokenizer_json(tokenizer: str) -> Path:
    """The ``tokenizer.json`` of a case's tokenizer (a name of :data:`TOKENIZER_NAMES`, a file or a folder).

    Raises ConfigError (where: ``tokenizer``) when there is none.
    """
    if tokenizer == BYTES:
        from speceq.models import TARGET_DIR

        return TARGET_DIR / "tokenizer.json"
    folder = named_tokenizer_folder(tokenizer)
    path = folder / "tokenizer.json" if folder is not None else Path(tokenizer)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ConfigError(f"tokenizer {tokenizer!r} is neither a name ({', '.join(TOKENIZER_NAMES)}) nor an existing "
                          f"tokenizer.json (looked at {path})", where="tokenizer")
    return path


@lru_cache(maxsize=16)
def row_decoder(tokenizer: str) -> Callable[[Sequence[int]], str]:
    """token ids -> text with ``tokenizer`` (a name of :data:`TOKENIZER_NAMES` or a tokenizer.json path).

    Raises ConfigError (where: ``tokenizer``) when it cannot be found or loaded.
    """
    if tokenizer == BYTES:
        from speceq.models.tokenizer import ByteTokenizer

        tok = ByteTokenizer()
        return lambda ids: tok.decode([int(i) for i in ids])
    path = tokenizer_json(tokenizer)
    from tokenizers import Tokenizer

    try:
        loaded = Tokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers package raises a bare Exception on bad files
        raise ConfigError(f"cannot load tokenizer {path}: {e}", where="tokenizer") from None
    return lambda ids: loaded.decode([int(i) for i in ids], skip_special_tokens=True)


__all__ = ["row_decoder", "tokenizer_json"]
