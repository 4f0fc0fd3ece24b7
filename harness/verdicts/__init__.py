"""Verdicts: run-level decisions (Holm across primary tests) and the result objects."""
