"""Black-box counting: symbols per generated position, joint prefixes, paired count vectors.

Input layout is the engines' ``SampleBatch``: ``tokens`` int64 ``[rows, max_new_tokens]``,
padded with -1 after each row's ``lengths[row]`` generated tokens (EOS included). A row that
has already ended shows the :data:`END` symbol at later positions, so "stopped earlier" is a
category of its own and shifts in length are seen by the per-position tests.
"""

from __future__ import annotations

import numpy as np

#: Symbol of a row that has already ended at a position (distinct from the -1 padding).
END = -2

#: Bits per symbol in :func:`joint_symbols` codes; token ids must be < 2**21 - 2.
_JOINT_BITS = 21
_JOINT_MAX_M = 3


def _batch_iv(tokens: object, lengths: object) -> tuple[np.ndarray, np.ndarray]:
    tok = np.asarray(tokens)
    lens = np.asarray(lengths)
    if tok.ndim != 2 or not np.issubdtype(tok.dtype, np.integer):
        raise TypeError(f"`tokens` must be a 2-D integer array [rows, max_new_tokens], got {tok.dtype} shape {tok.shape}")
    if lens.shape != (tok.shape[0],) or not np.issubdtype(lens.dtype, np.integer):
        raise ValueError(f"`lengths` must be an integer array of shape ({tok.shape[0]},), got {lens.dtype} shape {lens.shape}")
    if lens.size and (lens.min() < 0 or lens.max() > tok.shape[1]):
        raise ValueError(f"`lengths` must lie in [0, {tok.shape[1]}], found {int(lens.min())}..{int(lens.max())}")
    inside = np.arange(tok.shape[1])[None, :] < lens[:, None]
    if inside.any() and tok[inside].min() < 0:
        row, pos = np.argwhere(inside & (tok < 0))[0]
        raise ValueError(f"`tokens` holds {int(tok[row, pos])} at row {row}, position {pos}, inside the row's length")
    return tok.astype(np.int64, copy=False), lens.astype(np.int64, copy=False)


def _position_symbols_iv(tokens: object, lengths: object, position: object) -> tuple[np.ndarray, np.ndarray, int]:
    tok, lens = _batch_iv(tokens, lengths)
    if not isinstance(position, (int, np.integer)) or isinstance(position, bool):
        raise TypeError(f"`position` must be an integer, got {type(position).__name__}")
    if not 0 <= int(position) < tok.shape[1]:
        raise ValueError(f"`position` must lie in [0, {tok.shape[1]}) (max_new_tokens), got {position}")
    return tok, lens, int(position)


def position_symbols(tokens: np.ndarray, lengths: np.ndarray, position: int) -> np.ndarray:
    """Symbol of every row at generated position ``position`` (0-based): the token id, or END.

    Returns int64 ``[rows]``.
    """
    tok, lens, t = _position_symbols_iv(tokens, lengths, position)
    return np.where(t < lens, tok[:, t], END)


def _joint_symbols_iv(tokens: object, lengths: object, m: object) -> tuple[np.ndarray, np.ndarray, int]:
    tok, lens = _batch_iv(tokens, lengths)
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool):
        raise TypeError(f"`m` must be an integer, got {type(m).__name__}")
    if not 1 <= int(m) <= min(_JOINT_MAX_M, tok.shape[1]):
        raise ValueError(f"`m` must lie in [1, {min(_JOINT_MAX_M, tok.shape[1])}] (and <= max_new_tokens), got {m}")
    limit = (1 << _JOINT_BITS) - 2
    if tok.size and tok.max() >= limit:
        raise ValueError(f"`tokens` holds id {int(tok.max())}; joint codes support ids < {limit}")
    return tok, lens, int(m)


def joint_symbols(tokens: np.ndarray, lengths: np.ndarray, m: int) -> np.ndarray:
    """Code of every row's first-``m`` tuple of symbols (END after the row ends), as int64.

    The code is injective and independent of the data (fixed 21 bits per symbol, m <= 3), so
    codes of two sample sets are comparable; :func:`decode_joint` inverts it.
    """
    tok, lens, m = _joint_symbols_iv(tokens, lengths, m)
    code = np.zeros(tok.shape[0], dtype=np.int64)
    for t in range(m):
        sym = np.where(t < lens, tok[:, t], END) - END  # END -> 0, token id x -> x + 2
        code |= sym << (_JOINT_BITS * t)
    return code


def _decode_joint_iv(code: object, m: object) -> tuple[int, int]:
    if not isinstance(code, (int, np.integer)) or isinstance(code, bool):
        raise TypeError(f"`code` must be an integer, got {type(code).__name__}")
    if code < 0:
        raise ValueError(f"`code` must be non-negative, got {code}")
    if not isinstance(m, (int, np.integer)) or isinstance(m, bool):
        raise TypeError(f"`m` must be an integer, got {type(m).__name__}")
    if not 1 <= m <= _JOINT_MAX_M:
        raise ValueError(f"`m` must lie in [1, {_JOINT_MAX_M}], got {m}")
    return int(code), int(m)


def decode_joint(code: int, m: int) -> tuple[int, ...]:
    """The symbol tuple (token ids or END) of one :func:`joint_symbols` code."""
    code, m = _decode_joint_iv(code, m)
    mask = (1 << _JOINT_BITS) - 1
    return tuple(int((int(code) >> (_JOINT_BITS * t)) & mask) + END for t in range(m))


def _paired_counts_iv(sym_a: object, sym_b: object) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for name, s in (("sym_a", sym_a), ("sym_b", sym_b)):
        arr = np.asarray(s)
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise TypeError(f"`{name}` must be a 1-D integer array of symbols, got {arr.dtype} shape {arr.shape}")
        out.append(arr.astype(np.int64, copy=False))
    return out[0], out[1]


def paired_counts(sym_a: np.ndarray, sym_b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts of every symbol seen in either sample: ``(labels, counts_a, counts_b)``.

    labels: sorted distinct symbols of both samples (int64); counts_a/counts_b: int64 counts
    aligned with labels (zeros where a symbol occurs in one sample only).
    """
    a, b = _paired_counts_iv(sym_a, sym_b)
    labels, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)
    counts_a = np.bincount(inverse[: a.size], minlength=labels.size).astype(np.int64)
    counts_b = np.bincount(inverse[a.size :], minlength=labels.size).astype(np.int64)
    return labels, counts_a, counts_b
