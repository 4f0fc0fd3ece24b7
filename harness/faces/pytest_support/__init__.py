"""The logic behind the pytest plugin (:mod:`speceq.faces.plugin` only wires hooks to it).

- :mod:`~speceq.faces.pytest_support.options`: the ``--speceq-*`` options, their ini mirrors and
  how they resolve into :class:`~speceq.faces.pytest_support.options.Settings` (cheap to import:
  stdlib and pytest only, so pytest can load the plugin without numpy or torch);
- :mod:`~speceq.faces.pytest_support.session`: the per-session state (engine cache, results of
  every check, the HTML report, results sent from pytest-xdist workers to the controller);
- :mod:`~speceq.faces.pytest_support.checker`: the ``speceq`` fixture's checker;
- :mod:`~speceq.faces.pytest_support.explain`: the texts shown in failures and report sections;
- :mod:`~speceq.faces.pytest_support.wiring`: registering the plugin once when it is not
  installed as an entry point (used by the root ``conftest.py`` and ``suites/conftest.py``).
"""
