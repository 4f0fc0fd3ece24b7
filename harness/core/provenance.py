"""Provenance of a run: what produced the samples, so a result can be traced and reproduced.

Package versions are read from installed metadata (no heavy imports); the git commit is
read from the checkout that holds this package, when there is one. Credentials (a password in
a server URL, an ``api_key`` option) are masked by :func:`speceq.core.credentials.redact`.
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from speceq.core.credentials import redact

#: Distributions whose versions are recorded.
TRACKED_PACKAGES: tuple[str, ...] = ("speceq", "torch", "transformers", "numpy", "scipy")


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    """Installed version per distribution name (None when not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    if out.get("speceq") is None:  # running from a checkout that is not pip-installed
        from speceq.core.package import __version__

        out["speceq"] = f"{__version__} (not installed)"
    return out


def git_info(folder: Path | None = None) -> dict[str, Any] | None:
    """Commit and dirty flag of the git checkout holding ``folder`` (default: this package).

    None when git is absent or ``folder`` is not inside a work tree.
    """
    folder = folder or Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            r = subprocess.run(
                ["git", *args], cwd=folder, capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return r.stdout.strip() if r.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    status = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def machine_info() -> dict[str, Any]:
    """Python, platform and CPU facts of this machine (no host name)."""
    return {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor() or None,
        "cpu_count": os.cpu_count(),
    }


def utc_now() -> str:
    """Current UTC time, ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def collect_provenance(
    *,
    seeds: Mapping[str, Any],
    engines: Mapping[str, Any],
    settings: Mapping[str, Any],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The provenance document of a run.

    seeds: the run seed and how chunk seeds derive from it; engines: per role, the spec,
    options and ``describe()`` config; settings: the run settings (samples, alpha, ...).
    Credentials anywhere in it are masked.
    """
    return redact({
        "created": utc_now(),
        "packages": package_versions(),
        "git": git_info(),
        "machine": machine_info(),
        "seeds": dict(seeds),
        "engines": dict(engines),
        "settings": dict(settings),
        **dict(extra or {}),
    })
