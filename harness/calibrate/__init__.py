"""Calibration of speceq against the mutant gallery: exact laws, engine methods, power runs.

- :mod:`~harness.calibrate.exact`: exact laws of a speculative engine's first two tokens by
  enumeration (the true TV shift of a mutant).
- :mod:`~harness.calibrate.methods`: the checks engines use today, re-implemented side by
  side (vLLM's L2 convergence heuristic, TensorRT-LLM's KL gap, greedy exact match) and the
  Neyman-Pearson likelihood-ratio test, the statistical limit.
- :mod:`~harness.calibrate.power`: samples-to-detect per mutant and method, false alarms on
  the lossless variants, and the mixture power curve.
- :mod:`~harness.calibrate.tables` / :mod:`~harness.calibrate.plot`: markdown + JSON tables
  and a hand-written SVG power curve.
"""
