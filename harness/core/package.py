"""What speceq knows about itself: its version and the folder it is installed in.

It lives in the lowest layer so that any module (provenance, the engine code identity) reads them
without importing the top package, which sits above every layer. pyproject.toml reads the version
from here, so it is written once.
"""

from pathlib import Path

__version__ = "0.1.0"

#: The installed ``speceq`` package folder (``harness/`` in a checkout).
PACKAGE_DIR: Path = Path(__file__).resolve().parents[1]
