"""A local worker process: ``python -m speceq.pipeline.collect.worker READ_FD WRITE_FD``.

Started by :class:`~speceq.pipeline.collect.executors.ProcessExecutor` as a plain subprocess (not
``multiprocessing``), so a worker never re-imports the caller's ``__main__``: library users
need no ``if __name__ == "__main__"`` guard. Protocol over the two pipes (pickled
messages): first ``(recipes, threads)``, answered with ``("ready", None)`` once the engines are
built (the driver's chunk timeout counts from then, not through start-up), then chunks or oracle
scoring tasks; each is answered with ``("ok", (batch or scores, seconds))`` or ``("error", ...)``;
``None`` ends the worker.
"""

from __future__ import annotations

import signal
import sys
from multiprocessing.connection import Connection


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    reader, writer = Connection(int(argv[0]), writable=False), Connection(int(argv[1]), readable=False)
    from speceq.pipeline.collect.sampling import apply_worker_threads
    from speceq.pipeline.collect.tasks import run_task

    try:
        recipes, threads = reader.recv()
    except EOFError:
        return 0
    apply_worker_threads(threads)
    from speceq.pipeline.collect.sampling import engine_for

    for recipe in recipes.values():  # load now, while the driver loads its own: the first chunk finds them ready
        try:
            engine_for(recipe)
        except Exception:  # reported with its chunk, by the same call, when a chunk needs this engine
            pass
    writer.send(("ready", None))
    while True:
        try:
            chunk = reader.recv()
        except EOFError:
            return 0
        if chunk is None:
            return 0
        writer.send(run_task(chunk, recipes))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
