"""Calibration of speceq against the mutant gallery (``speceq calibrate``).

- :mod:`~harness.calibrate.exact`: exact laws of a speculative engine's first two tokens by
  enumeration (the true TV shift of a mutant).
- :mod:`~harness.calibrate.methods`: the checks engines use today, re-implemented side by
  side (vLLM's L2 convergence heuristic, TensorRT-LLM's KL gap, greedy exact match), and the
  Neyman-Pearson likelihood-ratio test, the statistical limit; :mod:`~harness.calibrate.simulate`
  runs them over repetitions with thresholds calibrated under H0.
- :mod:`~harness.calibrate.power`: samples-to-detect per mutant and method, false alarms on the
  lossless variants, the mixture power curve; sizes in :mod:`~harness.calibrate.settings`,
  seeded engine samples in :mod:`~harness.calibrate.pools`, results in
  :mod:`~harness.calibrate.report`.
- :mod:`~harness.calibrate.ceiling`: one-row TVs and the one-sample ceiling (alpha + TV), which
  say when "1/10 of the best engine method's samples" is below what any test can do.
- :mod:`~harness.calibrate.tables` / :mod:`~harness.calibrate.plot`: markdown + JSON tables and
  a hand-written SVG power curve.
"""
