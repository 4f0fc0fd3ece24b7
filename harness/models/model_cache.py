"""A checksummed, atomically written cache of derived model folders.

Model folders that are expensive to build (a GGUF file dequantized into a Hugging Face folder,
a draft derived from a real model) are built once into
``${SPECEQ_CACHE:-~/.cache/speceq}/models/<key>/`` and reused. Each folder carries a manifest,
``speceq-cache.json``, listing every file with its size and SHA-256; a folder whose manifest is
missing or whose files do not match it (a killed build, a truncated copy, a flipped byte) is
not used but rebuilt. A build writes into a hidden temporary folder next to the final one and is
renamed into place only when complete, so readers see a whole folder or none; a lock file
serialises builders of the same key across processes (POSIX ``flock``; elsewhere two builders
may both build, and the second rename loses harmlessly).

Only the standard library is imported here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speceq.errors import ConfigError

#: Environment variable naming the cache root (default ``~/.cache/speceq``).
CACHE_ENV = "SPECEQ_CACHE"
#: The manifest every cached folder carries (written last).
MANIFEST_NAME = "speceq-cache.json"
#: Manifest format version; a folder with another version is rebuilt.
MANIFEST_FORMAT = 1

_CHUNK = 1 << 20
# folders verified in this process: (folder, manifest mtime_ns, total size) -> True
_verified: set[tuple[str, int, int]] = set()


def cache_root() -> Path:
    """The cache root: ``$SPECEQ_CACHE`` when set, else ``~/.cache/speceq``."""
    env = os.environ.get(CACHE_ENV, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "speceq"


def models_root(cache: str | Path | None = None) -> Path:
    """Where cached model folders live: ``<cache>/models`` (``cache`` defaults to :func:`cache_root`)."""
    return (Path(cache).expanduser() if cache is not None else cache_root()) / "models"


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB chunks (~0.5 s per GB on one core)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class FolderCheck:
    """Outcome of :func:`check_folder`: ``ok``, or why not (``reason``)."""

    ok: bool
    reason: str
    manifest: dict[str, Any] | None = None


def read_manifest(folder: str | Path) -> dict[str, Any] | None:
    """The manifest of a cached folder, or None when it is absent or unreadable."""
    try:
        data = json.loads((Path(folder) / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def check_folder(folder: str | Path) -> FolderCheck:
    """Whether ``folder`` is a complete cached folder: manifest present, every listed file there
    with the listed size and SHA-256, and no unlisted file. Checksums are recomputed once per
    process and folder state (a 517 MB folder takes ~1 s)."""
    folder = Path(folder)
    if not folder.is_dir():
        return FolderCheck(False, "absent")
    manifest = read_manifest(folder)
    if manifest is None:
        return FolderCheck(False, f"no readable {MANIFEST_NAME} (an interrupted or foreign folder)")
    if manifest.get("format") != MANIFEST_FORMAT or not isinstance(manifest.get("files"), dict):
        return FolderCheck(False, f"{MANIFEST_NAME} has format {manifest.get('format')!r}, not {MANIFEST_FORMAT}")
    files: dict[str, Any] = manifest["files"]
    present = sorted(p.name for p in folder.iterdir() if p.name != MANIFEST_NAME)
    if present != sorted(files):
        extra = sorted(set(present) - set(files))
        missing = sorted(set(files) - set(present))
        return FolderCheck(False, f"files differ from the manifest (missing {missing}, unlisted {extra})")
    total = 0
    for name, entry in files.items():
        size = (folder / name).stat().st_size
        if size != entry.get("size"):
            return FolderCheck(False, f"{name}: {size} bytes, the manifest says {entry.get('size')}")
        total += size
    key = (str(folder.resolve()), (folder / MANIFEST_NAME).stat().st_mtime_ns, total)
    if key not in _verified:
        for name, entry in files.items():
            if sha256_file(folder / name) != entry.get("sha256"):
                return FolderCheck(False, f"{name}: SHA-256 differs from the manifest (corrupted)")
        _verified.add(key)
    return FolderCheck(True, "verified", manifest)


def _write_manifest(folder: Path, meta: dict[str, Any]) -> dict[str, Any]:
    files = {}
    for p in sorted(folder.iterdir()):
        if not p.is_file():
            raise ConfigError("a cached model folder holds files only (no sub-folders)", where=str(p))
        files[p.name] = {"size": p.stat().st_size, "sha256": sha256_file(p)}
    manifest = {"format": MANIFEST_FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": files, **meta}
    tmp = folder / f".{MANIFEST_NAME}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, folder / MANIFEST_NAME)
    return manifest


@contextlib.contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no cross-process lock
        yield
        return
    with open(path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@dataclass(frozen=True, slots=True)
class CachedFolder:
    """A verified cached folder: its path, whether this call built it, and its manifest."""

    path: Path
    built: bool
    manifest: dict[str, Any]
    rebuilt_because: str | None = None  # why an existing folder was not used (None: absent or a hit)


def cached_folder(
    key: str,
    build: Callable[[Path], dict[str, Any] | None],
    *,
    cache: str | Path | None = None,
    log: Callable[[str], None] | None = None,
) -> CachedFolder:
    """The verified folder ``<models_root>/<key>``, built by ``build(tmp_folder)`` when absent or
    invalid. ``build`` fills the empty folder it is given with files (no sub-folders) and returns
    extra manifest fields (JSON-able), e.g. where the folder came from."""
    if not key or "/" in key or key.startswith("."):
        raise ConfigError(f"a cache key is a plain folder name, got {key!r}", where="model cache")
    root = models_root(cache)
    final = root / key
    check = check_folder(final)
    if check.ok:
        assert check.manifest is not None
        return CachedFolder(final, False, check.manifest)
    with _lock(root / f".{key}.lock"):
        check = check_folder(final)  # another process may have built it meanwhile
        if check.ok:
            assert check.manifest is not None
            return CachedFolder(final, False, check.manifest)
        stale = None if check.reason == "absent" else check.reason
        if log is not None:
            log(f"building {final}" + (f" (the cached copy is unusable: {stale})" if stale else ""))
        tmp = root / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        tmp.mkdir(parents=True)
        try:
            meta = build(tmp) or {}
            manifest = _write_manifest(tmp, meta)
            if final.exists():
                trash = root / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.old"
                os.replace(final, trash)
                shutil.rmtree(trash, ignore_errors=True)
            os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        check = check_folder(final)
        if not check.ok:  # pragma: no cover - only if the disk changed the files under us
            raise ConfigError(f"freshly built folder fails its own manifest: {check.reason}", where=str(final))
        return CachedFolder(final, True, manifest, stale)
