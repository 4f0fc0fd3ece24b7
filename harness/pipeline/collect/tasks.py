"""Worker side of every executor: one item is a chunk to sample or an oracle task to score.

Separate from :mod:`~speceq.pipeline.collect.sampling` and
:mod:`~speceq.pipeline.collect.oracle_tasks` so that neither imports the other's worker code
(the oracle tasks build engines through sampling; sampling never needs the oracle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from speceq.pipeline.collect.oracle_tasks import OracleScoreTask, score_task
from speceq.pipeline.collect.sampling import EngineRecipe, encode_error, engine_for, sample_chunk


def run_task(item: Any, recipes: dict[str, EngineRecipe],
             on_rows: Callable[[Any, int], None] | None = None) -> tuple[str, Any]:
    """Worker side: a chunk to sample or an oracle task to score (:mod:`speceq.pipeline.collect.oracle_tasks`).

    Returns ("ok", (batch or scores, seconds)) or ("error", (error class name, message)).
    ``on_rows(chunk, done)``: rows the engine reports done inside a chunk.
    """
    try:
        if isinstance(item, OracleScoreTask):
            return "ok", score_task(item, recipes)
        return "ok", sample_chunk(item, engine_for(recipes[item.role]), on_rows)
    except Exception as e:  # sent back to the driver, which raises it
        return "error", encode_error(e)
