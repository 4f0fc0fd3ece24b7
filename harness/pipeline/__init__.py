"""One run: plan, collect, analyse, decide, write (:func:`speceq.pipeline.runner.run`).

:mod:`~speceq.pipeline.runner` holds the run skeleton and :class:`~speceq.pipeline.runner.RunConfig`,
:mod:`~speceq.pipeline.collect` the executors that sample chunks, :mod:`~speceq.pipeline.analysis`
turns samples and oracle scores into evidence, :mod:`~speceq.pipeline.sequential` is the
anytime-valid loop.
"""
