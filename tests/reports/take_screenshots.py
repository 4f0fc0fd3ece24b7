"""Screenshots of two real reports for the docs, taken with headless Chromium (docs/img/).

- ``report-shifted.png``: baseline vs ``mutant:resample-from-target`` (300 samples per engine,
  oracle on; decided by the draft-drift z-test): the page top and the first case's "Why
  shifted" block.
- ``report-equivalent.png``: baseline vs ``reference`` on two cases (6,000 samples per
  engine): the page top and the first case card.

The results are tests/reports/data/result-*.json (real runs, model paths shortened). Run
``python tests/reports/take_screenshots.py`` from the repository root after changing the
report's look.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from chromium_cdp import Chromium  # noqa: E402

from speceq.reports import write_report  # noqa: E402
from speceq.verdicts.result import RunResult  # noqa: E402

DOCS_IMG = HERE.parents[1] / "docs" / "img"
#: (result file, screenshot, the element whose bottom ends the picture)
SHOTS = (
    ("result-mutant-resample-from-target.json", "report-shifted.png", "#case-1 .decided"),
    ("result-reference-equivalent.json", "report-equivalent.png", "#case-1 figure"),
)
WIDTH = 1100


def main() -> int:
    DOCS_IMG.mkdir(parents=True, exist_ok=True)
    with Chromium() as browser, tempfile.TemporaryDirectory() as tmp:
        for data, png, last in SHOTS:
            result = RunResult.from_json((HERE / "data" / data).read_text(encoding="utf-8"))
            page = browser.load(write_report(result, Path(tmp) / "report.html"), width=WIDTH)
            bottom = page.evaluate(f"document.querySelector({last!r}).getBoundingClientRect().bottom + window.scrollY")
            (DOCS_IMG / png).write_bytes(page.screenshot_clip(0, 0, WIDTH, bottom + 16))
            print(f"wrote {DOCS_IMG / png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
