"""Ready-made equivalence suites: run them against your own speculative engine.

From a checkout::

    pytest suites/                                   # bundled models: baseline vs reference
    pytest suites/ --speceq-candidate=hf-assisted    # any engine spec (see `speceq engines`)
    pytest suites/ --speceq-samples=300              # small budget for every test (smoke run)

From an installed package (``pip install speceq``)::

    pytest --pyargs speceq.suites --speceq-candidate=my_pkg.engines:MyEngine

The prompts are byte strings of the bundled byte vocabulary (:mod:`speceq.models`), so the
candidate must sample the bundled target (or a model of the same 259-token byte vocabulary,
given to both engines with ``--speceq-baseline-option`` / ``--speceq-candidate-option``).

Modules, each documenting the bug class it targets and its sample budget:

- ``test_temperature``: first token and every position at T = 0.3, 0.7, 1.0, 1.3;
- ``test_sampling_params``: top-k, top-p and both, combined with temperature;
- ``test_batch_invariance``: batch sizes 1, 2, 8 with ragged prompts; a prompt alone vs in a batch;
- ``test_greedy``: exact greedy equality, divergences classified by the target's top-2 margin;
- ``test_long_and_eos``: 64-token continuations, with and without EOS;
- ``test_repeatability``: same-seed repeatability (information) and seed sensitivity.

Outcomes: ``shifted`` fails the test with the evidence; ``equivalent`` passes;
``inconclusive`` (no shift detected, equivalence within ``--speceq-tolerance`` not shown at
the budget) skips by default (``--speceq-inconclusive``). Certifying TV < 0.05 at every
position of a multi-token case needs ~2x10^4 samples per engine; on a CPU only the first-token
tests (20,000 one-token rows) and the greedy tests reach a decision at their default budget,
the others detect shifts (the oracle tests score every generated token) but usually stay
inconclusive. ``--speceq-samples=100`` runs every test in about 2 CPU-minutes (smoke run).
"""
