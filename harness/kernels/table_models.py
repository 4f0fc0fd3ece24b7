"""Tiny exact "models" for kernels that call the models themselves (the ``model`` layout).

A :class:`TableModel` gives a next-token law for every prefix: the law at prefix s is row
``row_of(s)`` of a small table of laws (float32 probabilities ``[R, V]``), where ``row_of`` is a
fixed hash of the whole prefix modulo R. So a kernel may query any prefix, on the draft path or
off it (block resampling, hierarchical speculative decoding, tree re-drafting), and speceq knows
the exact law it got. A draft model built with the same salt and R is *tied* to the target:
its law at s is row ``row_of(s)`` of the draft table (the draft law derived from that target row).

The law of prefix s depends on s only through its row, so a lossless kernel's token at position
m, given that m is reached with prefix s, follows target row ``row_of(s)``: the kernel check tests
each (position, row) cell (:mod:`speceq.kernels.model_layout`).

Each model counts its calls and the prefixes it was asked for (for the diagnosis).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from speceq.errors import ConfigError

#: Modulus of the rolling prefix hash (a Mersenne prime; products stay below 2^62).
_MOD = (1 << 31) - 1
_MUL = 1_000_003
_MIX = np.uint64(0x9E3779B97F4A7C15)


def start_hash(salt: int, count: int) -> np.ndarray:
    """The hash of the empty prefix, ``count`` times (int64)."""
    return np.full(count, int(salt) % _MOD, dtype=np.int64)


def extend_hash(h: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The hashes of the prefixes ``h`` extended by one token each (int64 arrays of equal length)."""
    return (h * _MUL + np.asarray(tokens, dtype=np.int64) + 1) % _MOD


def hash_rows(h: np.ndarray, rows: int) -> np.ndarray:
    """The table row of each prefix hash: a mixed hash modulo ``rows`` (int64)."""
    x = np.asarray(h, dtype=np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(15))) * _MIX
        x = x ^ (x >> np.uint64(29))
    return (x % np.uint64(rows)).astype(np.int64)


def prefix_hashes(prefixes: np.ndarray, salt: int) -> np.ndarray:
    """The hash of every row of an int ``[N, T]`` array of prefixes."""
    h = start_hash(salt, prefixes.shape[0])
    for j in range(prefixes.shape[1]):
        h = extend_hash(h, prefixes[:, j])
    return h


def sample_tokens(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of ``probs`` ``[N, V]`` (any float dtype, rows need not be normalised), by inverse CDF.

    A token of probability 0 is never drawn. Returns int64 ``[N]`` on the device of ``probs``.
    """
    p = probs.to(torch.float64)
    cdf = torch.cumsum(p, dim=-1)
    u = torch.rand(p.shape[0], 1, generator=generator, dtype=torch.float64, device=p.device) * cdf[:, -1:]
    return torch.searchsorted(cdf, u, right=True).clamp_(max=p.shape[-1] - 1).squeeze(-1)


class TableModel:
    """An exact next-token model: the law at a prefix is a table row chosen by a hash of the prefix.

    laws: ``[R, V]`` probabilities (stored as float32: float32 rows as given, other rows
    normalised then rounded; :attr:`laws64` is the float64 law of each stored row, renormalised:
    what a correct kernel samples from). salt: the hash's
    start, shared by a target and its tied draft model. Calling the model with int prefixes
    ``[N, T]`` (a tensor, array or nested list; ``[T]`` for one prefix) returns float32
    probabilities ``[N, V]`` on the prefixes' device. ``calls`` / ``prefixes`` count the calls and
    the prefixes asked for.
    """

    def __init__(self, laws: np.ndarray, *, salt: int, name: str = "model") -> None:
        table = np.asarray(laws, dtype=np.float64)
        if table.ndim != 2 or table.shape[0] < 1 or table.shape[1] < 2:
            raise ConfigError(f"expected laws [rows, vocab] with vocab >= 2, got shape {table.shape}", where=name)
        if not np.all(np.isfinite(table)) or table.min() < 0 or np.any(table.sum(axis=1) <= 0):
            raise ConfigError("every law row must be finite, non-negative, with positive mass", where=name)
        given = np.asarray(laws)
        # float32 rows are used as given (so a table built once is handed out bit for bit); others are normalised
        t32 = given if given.dtype == np.float32 else (table / table.sum(axis=1, keepdims=True)).astype(np.float32)
        t64 = t32.astype(np.float64)
        self.laws64 = t64 / t64.sum(axis=1, keepdims=True)
        self.laws64.setflags(write=False)
        self._table = torch.from_numpy(np.ascontiguousarray(t32, dtype=np.float32).copy())
        self._on: dict[torch.device, torch.Tensor] = {}
        self.salt = int(salt)
        self.name = name
        self.calls = 0
        self.prefixes = 0

    @property
    def vocab_size(self) -> int:
        return int(self._table.shape[1])

    @property
    def rows(self) -> int:
        return int(self._table.shape[0])

    def row_of(self, prefixes: object) -> np.ndarray:
        """The table row of each prefix (int64 ``[N]``); see the module docstring."""
        arr, _ = self._as_array(prefixes)
        return hash_rows(prefix_hashes(arr, self.salt), self.rows)

    def __call__(self, prefixes: object) -> torch.Tensor:
        arr, device = self._as_array(prefixes)
        rows = hash_rows(prefix_hashes(arr, self.salt), self.rows)
        self.calls += 1
        self.prefixes += arr.shape[0]
        return self._rows(rows, device)

    def block(self, prefixes: object, tokens: object) -> torch.Tensor:
        """The laws after ``prefixes`` ``[N, T]`` extended by ``tokens[:, :i]``, i = 0..j: ``[N, j + 1, V]``.

        One call, as a forward pass over a drafted block: row i is the law of the token after
        the prefix and the first i tokens.
        """
        arr, device = self._as_array(prefixes)
        tok, _ = self._as_array(tokens, what="tokens")
        if tok.shape[0] != arr.shape[0]:
            raise ConfigError(f"{tok.shape[0]} token rows for {arr.shape[0]} prefixes", where=f"{self.name}.block")
        h = prefix_hashes(arr, self.salt)
        rows = [hash_rows(h, self.rows)]
        for j in range(tok.shape[1]):
            h = extend_hash(h, tok[:, j])
            rows.append(hash_rows(h, self.rows))
        self.calls += 1
        self.prefixes += arr.shape[0] * (tok.shape[1] + 1)
        stacked = np.stack(rows, axis=1)
        return self._rows(stacked.reshape(-1), device).reshape(arr.shape[0], tok.shape[1] + 1, self.vocab_size)

    def causal_logits(self, input_ids: object) -> torch.Tensor:
        """What a causal LM's forward returns: float32 log-probabilities ``[N, T, V]`` (-inf where 0).

        Row t is the log of the law after ``input_ids[:, :t + 1]``: hand this to a package that
        expects ``model(input_ids) -> logits`` (one call).
        """
        arr, device = self._as_array(input_ids, what="input_ids")
        if arr.shape[1] == 0:
            raise ConfigError("input_ids must hold at least one token", where=f"{self.name}.causal_logits")
        laws = self.block(torch.from_numpy(arr[:, :1]).to(device), torch.from_numpy(arr[:, 1:]).to(device))
        return torch.log(laws)

    def reset_counts(self) -> None:
        self.calls = 0
        self.prefixes = 0

    def _rows(self, rows: np.ndarray, device: torch.device) -> torch.Tensor:
        table = self._on.get(device)
        if table is None:
            table = self._on[device] = self._table.to(device)
        return table[torch.from_numpy(rows).to(device)]

    def _as_array(self, prefixes: object, what: str = "prefixes") -> tuple[np.ndarray, torch.device]:
        device = torch.device("cpu")
        if isinstance(prefixes, torch.Tensor):
            device = prefixes.device
            arr = prefixes.detach().to("cpu").numpy()
        elif isinstance(prefixes, np.ndarray):
            arr = prefixes
        elif isinstance(prefixes, Sequence):
            lengths = {len(p) if isinstance(p, Sequence | np.ndarray | torch.Tensor) else -1 for p in prefixes}
            if -1 in lengths:
                arr = np.asarray(prefixes)
            elif len(lengths) > 1:
                raise ConfigError(f"{what} of one call must have one length, got lengths {sorted(lengths)}; call "
                                  "the model once per length", where=self.name)
            else:
                arr = np.asarray([np.asarray(p) for p in prefixes])
        else:
            raise ConfigError(f"{what} must be an int tensor, array or list, got {type(prefixes).__name__}",
                              where=self.name)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2 or (arr.size and arr.dtype.kind not in "iu"):
            raise ConfigError(f"{what} must be integer [N, T] (or [T]), got {arr.dtype} {arr.shape}", where=self.name)
        arr = arr.astype(np.int64, copy=False)
        if arr.size and (arr.min() < 0 or arr.max() >= self.vocab_size):
            bad = np.argwhere((arr < 0) | (arr >= self.vocab_size))[0]
            raise ConfigError(f"{what} row {bad[0]} holds token {arr[bad[0], bad[1]]} at column {bad[1]}, outside "
                              f"the vocabulary [0, {self.vocab_size})", where=self.name)
        return arr, device
