"""Default prompts for the bundled models: short Python-source snippets of different lengths.

Chosen so the trained target continues them with realistic, non-degenerate entropy (see
``tests/models/test_prompts.py``), with distinct lengths from 4 to 52 bytes so batches are
ragged, and with repeated n-grams in several of them, which prompt-lookup / n-gram
speculation needs to propose anything. Encode with :class:`speceq.models.ByteTokenizer`.
"""

from __future__ import annotations

DEFAULT_PROMPTS: tuple[str, ...] = (
    "def ",
    "for i in range(",
    "def __init__(self",
    "    return self.",
    "import os\nimport sys\nimport ",
    "        elif self.",
    "class ",
    "self.x = x\nself.y = y\nself.",
    "    def __repr__(self):\n        return ",
    "        raise ValueError(\"",
    "def get(self, key):\n    return self._data[key]\n\ndef ",
)
