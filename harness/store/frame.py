"""Stored samples as a pandas DataFrame, for users who want to look at them directly."""

from __future__ import annotations

import os
from typing import Any

from speceq.store.chunks import SampleStore

FRAME_COLUMNS: tuple[str, ...] = (
    "engine", "engine_name", "case", "slice", "seed", "row", "prompt_index", "tokens", "length",
)


def load_samples_frame(root: str | os.PathLike[str]) -> Any:
    """One row per stored sample (every chunk under ``root``, companions included).

    Columns: engine (role: baseline/candidate/control), engine_name (the engine's ``name``),
    case (case id), slice, seed (the chunk's seed), row (row within the chunk),
    prompt_index (0 = the case's prompt, 1.. = companions), tokens (list of generated ids,
    EOS included, no padding), length (number of generated tokens).
    Sorted by engine, case, slice, row. Returns a ``pandas.DataFrame``.
    """
    import pandas as pd

    store = SampleStore(root)
    records: dict[str, list[Any]] = {c: [] for c in FRAME_COLUMNS}
    for key, batch in sorted(store.items(), key=lambda kb: (kb[0].role, kb[0].case_id, kb[0].slice_index)):
        ident = key.identity
        engine = ident.get("engine", {})
        name = engine.get("name") if isinstance(engine, dict) else None
        for i in range(batch.rows):
            records["engine"].append(key.role)
            records["engine_name"].append(name)
            records["case"].append(key.case_id)
            records["slice"].append(key.slice_index)
            records["seed"].append(ident.get("seed"))
            records["row"].append(i)
            records["prompt_index"].append(int(batch.prompt_index[i]))
            records["tokens"].append(batch.row_tokens(i))
            records["length"].append(int(batch.lengths[i]))
    return pd.DataFrame(records, columns=list(FRAME_COLUMNS))
