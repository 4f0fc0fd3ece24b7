"""HTML equivalence report: renders a saved run result as one self-contained page.

Python: ``write_report(RunResult.from_json(Path("result.json").read_text()), "report.html")``.
Shell: ``speceq report result.json -o report.html``.
"""

from speceq.reports.render import render_report, write_report

__all__ = ["render_report", "write_report"]
