"""Power of speceq against the mutant gallery (``speceq power``), next to the engines' own checks.

- :mod:`~speceq.power.exact`: exact laws of a speculative engine's first two tokens by
  enumeration (the true TV shift of a mutant).
- :mod:`~speceq.power.methods`: the checks engines use today, re-implemented side by
  side (vLLM's L2 convergence heuristic, TensorRT-LLM's KL gap, greedy exact match), and the
  Neyman-Pearson likelihood-ratio test, the statistical limit; :mod:`~speceq.power.simulate`
  runs them over repetitions with thresholds calibrated under H0.
- :mod:`~speceq.power.study`: samples-to-detect per mutant and method, false alarms on the
  lossless variants, the mixture power curve; sizes in :mod:`~speceq.power.settings`,
  seeded engine samples in :mod:`~speceq.power.pools`, results in
  :mod:`~speceq.power.results`.
- :mod:`~speceq.power.ceiling`: one-row TVs and the one-sample ceiling (alpha + TV), which
  say when "1/10 of the best engine method's samples" is below what any test can do.
- :mod:`~speceq.power.tables` / :mod:`~speceq.power.plot`: markdown + JSON tables and
  a hand-written SVG power curve.
"""
