"""speceq: empirical distribution-equivalence tests for speculative decoding.

The import package is ``harness``; the distribution is ``speceq``. Importing it is cheap:
torch and transformers are imported only by the modules that need them.
"""

__version__ = "0.1.0"
