"""Training of the bundled models (``python -m tools.training.train``, ``python -m tools.training.train_bpe``).

Not installed with speceq: the runtime package only loads the trained weights (:mod:`speceq.models`).
"""
