"""Shared by every test folder: ``tests/`` on ``sys.path`` for the fakes that live here
(``fake_engines.py``, ``fake_logprob_server.py``), whichever folder a test module sits in."""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))
