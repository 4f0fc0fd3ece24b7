"""Append-only chunk store of engine samples.

One chunk = the :class:`~speceq.engines.base.SampleBatch` of one engine role
(``"baseline"`` or ``"candidate"``), one case and one seed slice. Its :class:`ChunkKey`
carries the *identity* of the chunk: a JSON document of everything that determines its
samples (engine spec and ``describe()`` config, the case's prompt ids, parameters and batch
context, the seed, the slice index and the sample count). The key's fingerprint is the
SHA-256 of that document.

Layout under ``root``::

    chunks/<role>/<case-dir>/slice-00000-n500.npz

The file name carries the slice index and the chunk's sample count, so the same slice at
two sample counts (the last, partial slice of a run before and after its budget changed)
are two files: growing or shrinking ``--samples`` never collides with what is stored.

A chunk file is an uncompressed ``.npz`` (``np.savez``) holding ``tokens``, ``lengths``,
``prompt_index`` and ``meta`` (a JSON string: identity, fingerprint, array checksum and
the batch's scalar fields). Why ``.npz`` rather than parquet: a chunk is three dense int64
arrays, which numpy writes and reads with no conversion, and ``np.load(...,
allow_pickle=False)`` can never execute code from a file. Files are written atomically
(:mod:`speceq.store.atomic`).

The same (role, case, slice, sample count) with a different fingerprint is a :class:`StoreError` naming
the fields that differ: samples of two configurations are never mixed. A chunk file that
cannot be read back whole (truncated, corrupt, wrong checksum) is deleted by the writer and
reported as missing, so the run redoes it; the writer says so on stderr (which file, why, that
it is sampled again) and keeps the record in :attr:`SampleStore.discarded` for the provenance.

``--fresh`` (:meth:`SampleStore.discard_all`) deletes every chunk file, also inside a ``chunks``
folder that is a symbolic link (the link stays), and raises :class:`StoreError` naming the path
when anything is left: a run never reuses a sample it was told to discard.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from speceq.engines.base import SampleBatch
from speceq.errors import StoreError
from speceq.store.atomic import atomic_write, jsonable, remove_temp_files

#: Bump when the chunk file layout changes; part of every chunk identity.
#: 2: the sample count is part of the file name; identities carry the engine's code.
STORE_FORMAT = 2
ROLES: tuple[str, ...] = ("baseline", "candidate")
#: The third engine role of a run with a numerics control (speceq.pipeline.control_arm): stored beside the two.
CONTROL_ROLE = "control"
#: Every role a chunk may be stored under.
STORED_ROLES: tuple[str, ...] = (*ROLES, CONTROL_ROLE)
CHUNKS_DIR = "chunks"
_ARRAYS = ("tokens", "lengths", "prompt_index")
_BATCH_SCALARS = ("drafted_tokens", "accepted_tokens", "verify_steps", "wall_time_s")


def canonical_json(obj: Any) -> str:
    """Compact, key-sorted JSON: equal documents give equal strings (and fingerprints)."""
    try:
        return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False, default=jsonable)
    except (TypeError, ValueError) as e:
        raise StoreError(f"chunk identity is not JSON-serialisable: {e}") from None


@dataclass(frozen=True, slots=True)
class ChunkKey:
    """Where a chunk lives and what determines its samples.

    role: ``"baseline"`` or ``"candidate"``; case_id: the case's id; slice_index: which seed
    slice of the case (0-based); identity_json: canonical JSON of the chunk's identity;
    samples: the chunk's sample count, part of its file name (None: a name without it).
    """

    role: str
    case_id: str
    slice_index: int
    identity_json: str
    samples: int | None = None

    def __post_init__(self) -> None:
        if self.role not in STORED_ROLES:
            raise StoreError(f"chunk role must be one of {STORED_ROLES}, got {self.role!r}")
        if not isinstance(self.case_id, str) or not self.case_id:
            raise StoreError(f"chunk case id must be a non-empty string, got {self.case_id!r}")
        if isinstance(self.slice_index, bool) or not isinstance(self.slice_index, int) or self.slice_index < 0:
            raise StoreError(f"chunk slice index must be an integer >= 0, got {self.slice_index!r}")
        if self.samples is not None and (
            isinstance(self.samples, bool) or not isinstance(self.samples, int) or self.samples < 1
        ):
            raise StoreError(f"chunk sample count must be None or an integer >= 1, got {self.samples!r}")

    @classmethod
    def build(cls, role: str, case_id: str, slice_index: int, identity: Mapping[str, Any], *,
              samples: int | None = None) -> ChunkKey:
        """Key from a JSON-able identity mapping (canonicalised here)."""
        return cls(role, case_id, slice_index, canonical_json(dict(identity)), samples)

    @property
    def file_name(self) -> str:
        """``slice-<index>[-n<samples>].npz``."""
        count = "" if self.samples is None else f"-n{self.samples}"
        return f"slice-{self.slice_index:05d}{count}.npz"

    @property
    def identity(self) -> dict[str, Any]:
        return json.loads(self.identity_json)

    @property
    def fingerprint(self) -> str:
        """SHA-256 (hex) of the canonical identity."""
        return hashlib.sha256(self.identity_json.encode("utf-8")).hexdigest()

    def label(self) -> str:
        return f"{self.role} samples of case {self.case_id!r} (slice {self.slice_index})"


def case_dir_name(case_id: str) -> str:
    """A file-system-safe, collision-free folder name for a case id."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", case_id).strip("._")[:40] or "case"
    return f"{safe}-{hashlib.sha256(case_id.encode('utf-8')).hexdigest()[:10]}"


def arrays_checksum(tokens: np.ndarray, lengths: np.ndarray, prompt_index: np.ndarray) -> str:
    """SHA-256 over the three arrays (as little-endian int64, with their shapes)."""
    h = hashlib.sha256()
    for a in (tokens, lengths, prompt_index):
        a = np.ascontiguousarray(a, dtype="<i8")
        h.update(repr(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def diff_identities(stored: Any, current: Any, path: str = "") -> list[str]:
    """Human-readable differences between two identity documents, e.g. ``seed: stored 1, now 2``."""
    if isinstance(stored, dict) and isinstance(current, dict):
        out: list[str] = []
        for k in sorted(set(stored) | set(current)):
            sub = f"{path}.{k}" if path else str(k)
            if k not in stored:
                out.append(f"{sub}: not stored, now {current[k]!r}")
            elif k not in current:
                out.append(f"{sub}: stored {stored[k]!r}, now absent")
            else:
                out.extend(diff_identities(stored[k], current[k], sub))
        return out
    if stored != current:
        return [f"{path or '<identity>'}: stored {_short(stored)}, now {_short(current)}"]
    return []


def _short(v: Any, limit: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."


class SampleStore:
    """Append-only store of sample chunks under ``root`` (see the module docstring)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self._lock_fd: int | None = None
        #: Unreadable chunk files the writer deleted (to sample them again): path, why, when.
        self.discarded: list[dict[str, str]] = []

    # ----- paths and locking -------------------------------------------------------------
    def path_for(self, key: ChunkKey) -> Path:
        return self.root / CHUNKS_DIR / key.role / case_dir_name(key.case_id) / key.file_name

    def acquire_writer_lock(self) -> None:
        """Take the store's exclusive writer lock, then remove temp files of killed writers.

        Raises StoreError when another process holds it. The kernel releases the lock when
        the process dies, so a killed run never blocks the next one.
        """
        if self._lock_fd is not None:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            import fcntl
        except ImportError:  # no advisory locks on this platform: single writer is the user's job
            self._lock_fd = fd
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise StoreError(f"another process is writing to the sample store {self.root}") from None
            self._lock_fd = fd
        remove_temp_files(self.root / CHUNKS_DIR)

    def release_writer_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = None

    def discard_all(self) -> int:
        """Delete every stored chunk (``--fresh``); return how many chunk files were deleted.

        Other files under ``root`` stay. A ``chunks`` folder that is a symbolic link keeps its link
        and loses its ``baseline/`` and ``candidate/`` folders (the store's own); anything else in
        the link's target is not the store's and stays. Raises StoreError naming the path when
        something cannot be deleted or a chunk file is left afterwards: discarding never fails silently.
        """
        base = self.root / CHUNKS_DIR
        if base.is_symlink() and not base.exists():
            raise StoreError(f"{base} is a symbolic link to a missing folder ({os.readlink(base)}): remove the "
                             f"link or create its target, or use another --out")
        if not base.exists():
            return 0
        if not base.is_dir():
            raise StoreError(f"{base} is not a folder, so its chunks cannot be discarded: remove it, or use another --out")
        failures: list[str] = []
        deleted = 0
        owned = [base / role for role in STORED_ROLES] if base.is_symlink() else [base]
        for top in owned:
            if top.is_symlink() or top.is_file():
                paths = [top]
            elif top.is_dir():
                # deepest first, so that every folder is empty when it is removed; links are removed, never followed
                paths = [*sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True), top]
            else:
                continue
            for path in paths:
                try:
                    if path.is_dir() and not path.is_symlink():
                        path.rmdir()
                    else:
                        path.unlink()
                        deleted += path.suffix == ".npz"
                except OSError as e:
                    failures.append(f"{path}: {e.strerror or e}")
        left = sorted(base.glob("*/*/slice-*.npz")) if base.is_dir() else []
        if failures or left:
            shown = "; ".join(failures[:3]) + (f"; and {len(failures) - 3} more" if len(failures) > 3 else "")
            raise StoreError(
                f"cannot discard the stored samples in {base} ({len(left)} chunk file(s) left"
                f"{': ' + shown if shown else ''}); delete them by hand, or use another --out"
            )
        return deleted

    # ----- reading -----------------------------------------------------------------------
    def _read(self, path: Path) -> tuple[dict[str, Any], SampleBatch] | None:
        """Load a chunk file whole: (stored document, batch), or None when missing or corrupt."""
        if not path.is_file():
            return None
        try:
            with open(path, "rb") as fh:
                z = np.load(fh, allow_pickle=False)
                if not isinstance(z, np.lib.npyio.NpzFile):
                    raise ValueError("not an .npz archive")
                with z:
                    arrays = {name: np.asarray(z[name], dtype=np.int64) for name in _ARRAYS}
                    meta = json.loads(str(z["meta"][()]))
            if meta.get("checksum") != arrays_checksum(*(arrays[n] for n in _ARRAYS)):
                raise ValueError("checksum mismatch")
            if not (isinstance(meta.get("identity"), dict) and isinstance(meta.get("fingerprint"), str)):
                raise ValueError("meta lacks identity or fingerprint")
            batch = SampleBatch(
                **arrays,
                **{k: meta["batch"].get(k) for k in _BATCH_SCALARS},
                info=meta["batch"].get("info", {}),
            )
        except (OSError, EOFError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as e:
            # A chunk we cannot read back whole is as good as missing. The writer (lock
            # holder) deletes it so the run redoes it, and says so; a reader just skips it.
            if self._lock_fd is not None:
                self._discard_unreadable(path, f"{type(e).__name__}: {e}")
            return None
        return meta, batch

    def _discard_unreadable(self, path: Path, why: str) -> None:
        """Delete an unreadable chunk file, say so on stderr and keep the record in :attr:`discarded`."""
        from speceq.core.provenance import utc_now

        path.unlink(missing_ok=True)
        self.discarded.append({"path": str(path), "reason": why, "when": utc_now()})
        print(f"speceq: chunk file {path} is unreadable ({why}): deleted, its samples are drawn again",
              file=sys.stderr, flush=True)

    def _mismatch(self, key: ChunkKey, stored_identity: dict[str, Any]) -> StoreError:
        diffs = diff_identities(stored_identity, key.identity)
        shown = "; ".join(diffs[:4]) + (f"; and {len(diffs) - 4} more" if len(diffs) > 4 else "")
        return StoreError(
            f"{self.root} already holds {key.label()} made with a different configuration "
            f"({shown}); samples of two configurations are never mixed: use a fresh store "
            f"(another output folder, or discard the stored samples)"
        )

    def has(self, key: ChunkKey) -> bool:
        """True when the chunk is stored whole with this fingerprint.

        False when it is missing or corrupt (the writer deletes a corrupt file). StoreError when the
        same (role, case, slice) is stored with a different identity.
        """
        got = self._read(self.path_for(key))
        if got is None:
            return False
        meta, _ = got
        if meta["fingerprint"] != key.fingerprint:
            raise self._mismatch(key, meta["identity"])
        return True

    def get(self, key: ChunkKey) -> SampleBatch:
        """The stored SampleBatch of ``key``; StoreError when missing or of another identity."""
        got = self._read(self.path_for(key))
        if got is None:
            raise StoreError(f"{self.root} holds no readable {key.label()}")
        meta, batch = got
        if meta["fingerprint"] != key.fingerprint:
            raise self._mismatch(key, meta["identity"])
        return batch

    def get_meta(self, key: ChunkKey) -> dict[str, Any]:
        """The user ``meta`` stored with a chunk by :meth:`put`."""
        got = self._read(self.path_for(key))
        if got is None:
            raise StoreError(f"{self.root} holds no readable {key.label()}")
        return got[0].get("meta", {})

    def keys(self) -> list[ChunkKey]:
        """Keys of every readable chunk, sorted by (role, case id, slice)."""
        return [k for k, _ in sorted(self.items(), key=lambda kb: (kb[0].role, kb[0].case_id, kb[0].slice_index))]

    def items(self) -> Iterator[tuple[ChunkKey, SampleBatch]]:
        """(key, batch) of every readable chunk, in file order (temp files never match the pattern)."""
        base = self.root / CHUNKS_DIR
        if not base.is_dir():
            return
        for path in sorted(base.glob("*/*/slice-*.npz")):
            got = self._read(path)
            if got is None:
                continue
            meta, batch = got
            yield ChunkKey(meta["role"], meta["case_id"], meta["slice_index"], canonical_json(meta["identity"]),
                           meta.get("samples")), batch

    # ----- writing -----------------------------------------------------------------------
    def put(self, key: ChunkKey, batch: SampleBatch, meta: Mapping[str, Any] | None = None) -> Path:
        """Store ``batch`` under ``key`` atomically; return the chunk's path.

        Append-only: StoreError when a readable chunk is already stored at that place
        (of the same identity or another one).
        """
        path = self.path_for(key)
        existing = self._read(path)
        if existing is not None:
            if existing[0]["fingerprint"] != key.fingerprint:
                raise self._mismatch(key, existing[0]["identity"])
            raise StoreError(f"{self.root} already holds {key.label()}; chunks are never overwritten")
        try:
            arrays = {n: np.ascontiguousarray(getattr(batch, n), dtype=np.int64) for n in _ARRAYS}
        except (TypeError, ValueError) as e:
            raise StoreError(f"cannot store {key.label()}: arrays are not integer arrays ({e})") from None
        doc = {
            "format": STORE_FORMAT,
            "role": key.role,
            "case_id": key.case_id,
            "slice_index": key.slice_index,
            "samples": key.samples,
            "identity": key.identity,
            "fingerprint": key.fingerprint,
            "checksum": arrays_checksum(*(arrays[n] for n in _ARRAYS)),
            "batch": {**{k: getattr(batch, k) for k in _BATCH_SCALARS}, "info": dict(batch.info)},
            "meta": dict(meta or {}),
        }
        try:
            meta_json = json.dumps(doc, sort_keys=True, default=jsonable)
        except (TypeError, ValueError) as e:
            raise StoreError(f"cannot store {key.label()}: metadata is not JSON-serialisable ({e})") from None
        atomic_write(path, lambda f: np.savez(f, meta=np.array(meta_json), **arrays))
        return path
