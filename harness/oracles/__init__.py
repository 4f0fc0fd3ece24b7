"""Oracles: the target's exact next-token law, to score every sampled token against.

:mod:`speceq.oracles.hf` scores with a transformers model (teacher forcing),
:mod:`speceq.oracles.server` with an OpenAI-compatible server's prompt log-probabilities, and
:mod:`speceq.oracles.server_laws` turns a server's top-K values into processed laws.
"""
