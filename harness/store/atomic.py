"""Atomic file writes: a reader sees the old file or the complete new one, never a part.

A write goes to a temporary file in the same folder (so ``os.replace`` is a rename on one
file system), is flushed and fsync'ed, then renamed over the target; the folder is fsync'ed
so the rename itself survives a power loss. A process killed mid-write leaves only a
temporary file (``.<name>.<pid>.<random>.tmp``), which readers never look at and
:func:`remove_temp_files` deletes.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from speceq.core.credentials import redact
from speceq.errors import ConfigError

T = TypeVar("T")

TEMP_SUFFIX = ".tmp"


def temp_path_for(path: Path) -> Path:
    """A fresh temporary name next to ``path``: hidden, with the writer's pid."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{TEMP_SUFFIX}")


def is_temp_file(path: Path) -> bool:
    return path.name.startswith(".") and path.name.endswith(TEMP_SUFFIX)


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a folder; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Create or replace ``path`` atomically; ``write`` fills the open binary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path_for(path)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented, key-sorted JSON (UTF-8), atomically, credentials masked
    (:func:`speceq.core.credentials.redact`)."""
    data = (json.dumps(redact(obj), indent=2, sort_keys=True, default=jsonable) + "\n").encode("utf-8")
    atomic_write(Path(path), lambda f: f.write(data))


def remove_temp_files(root: Path) -> list[Path]:
    """Delete every leftover temporary file under ``root``; return what was removed.

    Call only while holding the store's writer lock: a live writer's temp file would go too.
    """
    removed = []
    root = Path(root)
    if not root.exists():
        return removed
    for p in root.rglob(f"*{TEMP_SUFFIX}"):
        if p.is_file() and is_temp_file(p):
            p.unlink(missing_ok=True)
            removed.append(p)
    return removed


def jsonable(obj: Any) -> Any:
    """``json.dumps`` fallback for numpy scalars/arrays, tuples and paths."""
    import numpy as np

    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, (set, frozenset)):
        return sorted(obj, key=repr)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


def load_saved(path: str | os.PathLike[str], from_json: Callable[[str], T], what: str) -> T:
    """``from_json`` of the text of a file speceq saved (``what``: e.g. ``result.json``), or a
    ConfigError naming the file when it cannot be read or is not one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the {what.split('.')[0]}: {e}", where=str(path)) from None
    try:
        return from_json(text)
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"not a speceq {what} ({type(e).__name__}: {e})", where=str(path)) from None
