"""Samples and oracle scores shared by the runs of one process: an audit's cells, a pytest session's checks.

Two mechanisms, both safe because a chunk is keyed by its identity (:mod:`speceq.pipeline.plan`):

- **stored chunks**: a run's chunk folder (its ``chunks/<role>`` folder, or one case's
  ``chunks/<role>/<case folder>``) is a relative symbolic link to a shared folder
  (:func:`link_folder`). A chunk another run stored there with the same identity is reused; one
  of another identity in the same place is refused by the store, never mixed, so a shared
  folder must only be shared by runs whose chunks there have one identity:
  :func:`shared_case_folder` names one folder per (engine identity, case, run seed), so two
  checks share a folder exactly when every chunk in it would be the same;
- **oracle scores**: :class:`OracleShelf` builds each distinct oracle once and wraps it in a
  :class:`~speceq.oracles.memo.RememberingOracle`, so a row is scored once however many runs
  score it (p-values may differ from a fresh oracle's in the last float bits, as batching does;
  verdicts and samples do not).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from speceq.engines.base import Engine
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.oracles.protocol import Oracle
from speceq.pipeline.config import RunConfig
from speceq.pipeline.plan import case_run_seed, engine_identities
from speceq.store import ROLES
from speceq.store.chunks import CHUNKS_DIR, case_dir_name


def link_folder(link: Path, target: Path, *, where: str, what: str = "a link to the shared samples") -> None:
    """Make ``link`` a relative symbolic link to the folder ``target`` (created); nothing when it is one already.

    A link elsewhere is replaced; a real folder at ``link`` is refused (ConfigError naming it, ``what``
    the link should be, and ``where``), since its chunks would be hidden.
    """
    target.mkdir(parents=True, exist_ok=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink():
        if link.resolve() == target.resolve():
            return
        link.unlink()
    elif link.exists():
        raise ConfigError(f"{link} is a folder of its own, not {what} ({target}): remove it or use another "
                          "output folder", where=where)
    link.symlink_to(os.path.relpath(target, link.parent), target_is_directory=True)


def shared_case_folder(root: Path, config: RunConfig, engines: Mapping[str, Engine], case: Case, role: str) -> Path:
    """The shared folder of ``role``'s chunks of ``case`` under ``root``: one per engine identity (code
    included), case (without its display text) and run seed, so every chunk stored there has one identity."""
    ident = engine_identities(config, engines)[role]
    case_doc = {k: v for k, v in case.to_dict().items() if k not in ("text", "tokenizer")}
    doc = {"engine": ident, "case": case_doc, "run_seed": case_run_seed(config.seed, case)}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True, default=repr).encode("utf-8")).hexdigest()[:20]
    return root / role / f"{case_dir_name(case.case_id)}-{digest}"


def share_case_chunks(root: Path, config: RunConfig, engines: Mapping[str, Engine], cases: list[Case]) -> None:
    """Link every case's chunk folders (both roles) of the run ``config`` to their shared folders under ``root``.

    A case folder that is already a real folder (a store written before sharing) is kept as it is.
    Fixed-size runs only: a sequential run's chunk files are named without their size, so two
    schedules could meet in one file; its store stays its own (nothing is linked).
    """
    if config.sequential or config.out_dir is None:
        return
    for case in cases:
        for role in ROLES:
            link = Path(config.out_dir) / CHUNKS_DIR / role / case_dir_name(case.case_id)
            if link.exists() and not link.is_symlink():  # a store from before sharing: its chunks stay its own
                continue
            link_folder(link, shared_case_folder(root, config, engines, case, role), where="shared samples")


def count_chunks(folder: Path) -> int:
    """Chunk files directly in ``folder`` (a case folder), 0 when it does not exist."""
    return sum(1 for _ in folder.glob("slice-*.npz")) if folder.is_dir() else 0


class OracleShelf:
    """One :class:`~speceq.oracles.memo.RememberingOracle` per distinct oracle (``describe()``), built on first use."""

    def __init__(self) -> None:
        self.oracles: dict[str, Oracle] = {}
        self._built: dict[tuple[str, tuple[int, ...]], Oracle] = {}  # (spec, engine ids) -> shared oracle

    def oracle_for(self, config: RunConfig, engines: Mapping[str, Engine]) -> Oracle | None:
        """The shared oracle of ``config``; None when its oracle is off."""
        spec = config.oracle_spec()
        if spec is None:
            return None
        from speceq.oracles.build import make_oracle
        from speceq.oracles.memo import RememberingOracle

        built = (repr(spec), tuple(id(engines[r]) for r in ROLES))
        if built in self._built:  # these engines and this spec: no second model load
            return self._built[built]
        oracle = make_oracle(spec, engines)
        key = json.dumps(oracle.describe(), sort_keys=True, default=str)
        if key not in self.oracles:
            self.oracles[key] = RememberingOracle(oracle)
        self._built[built] = self.oracles[key]
        return self.oracles[key]


def rows_scored(oracle: Any) -> tuple[int, int]:
    """(rows scored, rows answered from memory) so far by a remembering oracle."""
    return int(oracle.scored_rows), int(oracle.reused_rows)


__all__ = ["OracleShelf", "count_chunks", "link_folder", "rows_scored", "share_case_chunks", "shared_case_folder"]
