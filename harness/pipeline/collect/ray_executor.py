"""Sample chunks as tasks on a Ray cluster (``speceq run --executor ray``; needs ``speceq[ray]``).

Without an address a local Ray instance is started for the run (on 127.0.0.1, ``workers``
CPUs, no dashboard) and shut down after it. With ``--ray-address`` (``auto``,
``HOST:PORT`` of a head started with ``ray start --head``, or ``ray://HOST:10001``) the run
connects to that cluster and leaves it running. Every node must be able to import speceq
and the engines (same spec strings: installed packages, or files at the same paths).

Each task samples one chunk from its own seed and returns the arrays; the driver validates
and stores them, as with every executor. A task whose worker dies is retried by Ray
(``max_retries``) and samples the same chunk from the same seed again.
"""

from __future__ import annotations

import os
import sys
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from speceq.errors import ConfigError, EngineError
from speceq.pipeline.collect.executors import MAX_ATTEMPTS, OnResult, OnStart, StopFlag
from speceq.pipeline.collect.sampling import EngineRecipe, apply_worker_threads, decode_error, item_case_id
from speceq.pipeline.collect.tasks import run_task


def import_ray() -> Any:
    """The ``ray`` module, or ConfigError saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ConfigError(f"the Ray executor needs Ray: pip install 'speceq[ray]' ({e})", where="run.executor") from None
    return ray


def _ray_sample(chunk: Any, recipes: dict[str, EngineRecipe], threads: int) -> tuple[str, Any]:
    """The Ray task: sample one chunk (or score one oracle task) in a Ray worker process (engines built once per worker)."""
    apply_worker_threads(threads)
    return run_task(chunk, recipes)


class RayExecutor:
    """Chunks as Ray tasks, at most one in flight per cluster CPU (or ``workers``)."""

    def __init__(self, recipes: Mapping[str, EngineRecipe], *, address: str | None, workers: int | None,
                 threads: int) -> None:
        self.recipes = dict(recipes)
        self.address = address
        self.workers = workers
        self.threads = threads
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        self.description = f"Ray tasks on {where}, {threads} torch thread(s) each"
        self._keep = False
        self._started = False  # this executor started Ray (and shuts it down)

    def __enter__(self) -> RayExecutor:
        """Keep Ray up between calls of :meth:`run` (collection, then oracle scoring)."""
        self._keep = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._keep = False
        if self._started:
            import_ray().shutdown()
            self._started = False

    def _init(self, ray: Any) -> bool:
        """Connect or start Ray; True when this call started it (and must shut it down)."""
        if ray.is_initialized():
            return False
        if self.address:
            ray.init(address=self.address, log_to_driver=False)
        else:
            code_path = [p for p in sys.path if p and os.path.isdir(p)]
            ray.init(address="local", num_cpus=self.workers or os.cpu_count() or 1, include_dashboard=False,
                     log_to_driver=False,
                     _node_ip_address="127.0.0.1",
                     runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(code_path)}})
        return True

    def run(self, chunks: Sequence[Any], on_start: OnStart, on_result: OnResult, stop: StopFlag, *,
            timeout_s: float | None = None, on_rows: Any = None) -> None:
        """Sample on Ray tasks; ``timeout_s`` must be None (:class:`~speceq.pipeline.config.RunConfig` refuses a
        chunk timeout with Ray). ``on_rows`` is not called: a task reports its chunk when it is done."""
        if timeout_s is not None:
            raise ValueError("the Ray executor has no chunk timeout")
        if not chunks:
            return
        ray = import_ray()
        self._started = self._init(ray) or self._started
        in_flight: dict[Any, Any] = {}
        try:
            task = ray.remote(num_cpus=1, max_retries=MAX_ATTEMPTS - 1)(_ray_sample)
            recipes = ray.put(self.recipes)
            limit = self.workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            queue = deque(chunks)
            while queue or in_flight:
                while queue and len(in_flight) < limit and not stop.requested:
                    chunk = queue.popleft()
                    on_start(chunk)
                    in_flight[task.remote(chunk, recipes, self.threads)] = chunk
                if not in_flight:
                    return
                ready, _ = ray.wait(list(in_flight), num_returns=1)
                for ref in ready:
                    chunk = in_flight.pop(ref)
                    try:
                        status, payload = ray.get(ref)
                    except ray.exceptions.RayError as e:  # worker died MAX_ATTEMPTS times, node lost, ...
                        what = f"sampling slice {chunk.slice_index}" if hasattr(chunk, "slice_index") else chunk.label()
                        raise EngineError(f"Ray task {what} failed after {MAX_ATTEMPTS} attempts: "
                                          f"{type(e).__name__}: {e}", case_id=item_case_id(chunk)) from None
                    if status != "ok":
                        raise decode_error(payload, chunk)
                    batch, elapsed = payload
                    on_result(chunk, batch, elapsed)
        finally:
            for ref in in_flight:
                ray.cancel(ref, force=True)
            if self._started and not self._keep:
                ray.shutdown()
                self._started = False
