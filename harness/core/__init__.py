"""What every layer shares: run defaults, sampling parameters, logit processing, cases, provenance, HTTP JSON.

Nothing here imports torch at module level or any other speceq layer except :mod:`speceq.errors`.
"""
