"""A local worker process: ``python -m speceq.pipeline.collect.worker READ_FD WRITE_FD [DRIVER_PID]``.

Started by :class:`~speceq.pipeline.collect.executors.ProcessExecutor` as a plain subprocess (not
``multiprocessing``), so a worker never re-imports the caller's ``__main__``: library users
need no ``if __name__ == "__main__"`` guard. Protocol over the two pipes (pickled
messages): first ``(recipes, threads)``, answered with ``("ready", None)`` once the engines are
built (the driver's chunk timeout counts from then, not through start-up), then chunks or oracle
scoring tasks, or ``("recipes", recipes)`` (no answer: the recipes of the chunks that follow, when a
pool kept across runs serves another run; engines are built on first use and kept); each task is answered with ``("ok", (batch or scores, seconds))`` or ``("error", ...)``,
after any number of ``("rows", done)`` messages while a chunk runs (rows its engine reports
done, :mod:`speceq.engines.row_progress`; at most one a second); ``None`` ends the worker. A worker
whose driver is gone (killed, even by SIGKILL) ends itself within :data:`PARENT_POLL_S` seconds.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection

#: Seconds between two "rows done" messages of a worker (an engine may report every row).
ROWS_EVERY_S = 1.0
#: Seconds between two looks of a worker at whether its driver is still alive.
PARENT_POLL_S = 1.0


def exit_with_parent(parent: int, poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """Watch, on a daemon thread, that ``parent`` (the driver's pid) is still this process's parent; end the
    process at once when it is not (the driver was killed: SIGKILL, an out-of-memory kill), so no worker
    lives on sampling for nobody, even inside a hung engine call."""

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(1)

    thread = threading.Thread(target=watch, name="speceq-worker-parent-watch", daemon=True)
    thread.start()
    return thread


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    exit_with_parent(int(argv[2]) if len(argv) > 2 else os.getppid())  # the driver's pid, named before any race
    reader, writer = Connection(int(argv[0]), writable=False), Connection(int(argv[1]), readable=False)
    from speceq.pipeline.collect.sampling import apply_worker_threads
    from speceq.pipeline.collect.tasks import run_task

    try:
        recipes, threads = reader.recv()
    except EOFError:
        return 0
    apply_worker_threads(threads)
    from speceq.pipeline.collect.sampling import RECIPES_MESSAGE, engine_for

    for recipe in recipes.values():  # load now, while the driver loads its own: the first chunk finds them ready
        try:
            engine_for(recipe)
        except Exception:  # reported with its chunk, by the same call, when a chunk needs this engine
            pass
    writer.send(("ready", None))
    last = [0.0]

    def rows(chunk: object, done: int) -> None:  # rows inside a chunk, at most one message per ROWS_EVERY_S
        now = time.monotonic()
        if now - last[0] >= ROWS_EVERY_S:
            last[0] = now
            writer.send(("rows", done))

    while True:
        try:
            chunk = reader.recv()
        except EOFError:
            return 0
        if chunk is None:
            return 0
        if isinstance(chunk, tuple) and chunk and chunk[0] == RECIPES_MESSAGE:
            recipes = chunk[1]
            continue
        writer.send(run_task(chunk, recipes, rows))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
