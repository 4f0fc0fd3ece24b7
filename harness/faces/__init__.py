"""The faces users touch: the ``speceq`` command (:mod:`~speceq.faces.cli`) and the pytest plugin
(:mod:`~speceq.faces.plugin`, :mod:`~speceq.faces.pytest_support`). They parse, call the pipeline, print."""
