"""Calibration of speceq against the mutant gallery (``speceq calibrate``).

- :mod:`~speceq.calibrate.exact`: exact laws of a speculative engine's first two tokens by
  enumeration (the true TV shift of a mutant).
- :mod:`~speceq.calibrate.methods`: the checks engines use today, re-implemented side by
  side (vLLM's L2 convergence heuristic, TensorRT-LLM's KL gap, greedy exact match), and the
  Neyman-Pearson likelihood-ratio test, the statistical limit; :mod:`~speceq.calibrate.simulate`
  runs them over repetitions with thresholds calibrated under H0.
- :mod:`~speceq.calibrate.calibrator`: samples-to-detect per mutant and method, false alarms on the
  lossless variants, the mixture power curve; sizes in :mod:`~speceq.calibrate.settings`,
  seeded engine samples in :mod:`~speceq.calibrate.pools`, results in
  :mod:`~speceq.calibrate.results`.
- :mod:`~speceq.calibrate.ceiling`: one-row TVs and the one-sample ceiling (alpha + TV), which
  say when "1/10 of the best engine method's samples" is below what any test can do.
- :mod:`~speceq.calibrate.tables` / :mod:`~speceq.calibrate.plot`: markdown + JSON tables and
  a hand-written SVG power curve.
"""
