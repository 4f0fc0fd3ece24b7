"""A fixed audit matrix (no run) for the report and Markdown tests: every cell status and verdict."""

from __future__ import annotations

from speceq.pipeline.audit import NOT_RUN, NOT_SUPPORTED, RAN, AuditCell, AuditResult

PAYLOAD = "<script>window.__pwned = 1</script>|`x`"


def example_audit() -> AuditResult:
    def ran(method: str, setting: str, shape: str, verdict: str, tv: float, bound: float, accept: float | None,
            reason: str = "nothing rejected") -> AuditCell:
        case = f"{setting}-{shape}"
        return AuditCell(method=method, setting=setting, shape=shape, status=RAN, verdict=verdict, reason=reason,
                         tv_estimate=tv, tv_upper_bound=bound, tv_reference="two-sample", acceptance=accept, n=500,
                         command=f"speceq run --candidate {method} --out audit/cells/{method}/{case}",
                         result=f"cells/{method}/{case}/result.json", seconds=1.5, chunks_sampled=2,
                         baseline_chunks_sampled=0)

    cells = (
        ran("hf-assisted", "t1", "single", "equivalent", 0.021, 0.064, 0.61),
        AuditCell(method="hf-assisted", setting="t1", shape="ragged-b4", status=NOT_SUPPORTED,
                  reason="transformers runs assisted generation at batch size 1 only"),
        ran("hf-assisted", "greedy", "single", "inconclusive", 0.05, 0.31, 0.58),
        AuditCell(method="hf-assisted", setting="greedy", shape="ragged-b4", status=NOT_SUPPORTED,
                  reason="transformers runs assisted generation at batch size 1 only"),
        ran("hf-universal", "t1", "single", "shifted", 0.33, 0.41, 0.12,
            reason="chi2 position 0 rejects (Holm p = 1e-12)"),
        AuditCell(method="hf-universal", setting="t1", shape="ragged-b4", status=NOT_SUPPORTED,
                  reason="batch size 1 only"),
        AuditCell(method="hf-universal", setting="greedy", shape="single", status=NOT_RUN,
                  reason=f"EngineError: {PAYLOAD}"),
        AuditCell(method="hf-universal", setting="greedy", shape="ragged-b4", status=NOT_SUPPORTED,
                  reason="batch size 1 only"),
    )
    return AuditResult(family="transformers", world="byte", baseline="hf-sample",
                       methods=("hf-assisted", "hf-universal"),
                       settings=(("t1", "T = 1.0, 4 tokens"), ("greedy", "greedy, 4 tokens")),
                       shapes=(("single", "one request at a time"), ("ragged-b4", "ragged batch of 4")),
                       cells=cells, samples=500, seed=0, alpha=0.001, tolerance=0.15,
                       versions={"speceq": "0.1.0", "transformers": "5.25.0"}, created="2026-12-07T03:00:00Z",
                       wall_s=12.0)
