"""Compare two speceq output folders: the stored samples and every decided field of the results.

``python -m tools.compare_runs OUT_A OUT_B`` prints whether the samples are identical row for row
and which result fields differ, leaving out what measures time or records where and when
(tokens per second, speed-ups, provenance, the rerun command's paths). Used to show that a
refactoring changes neither the samples nor the verdicts of the same seed.
"""
import json
import sys
from pathlib import Path

from speceq.store import load_samples_frame

a, b = Path(sys.argv[1]), Path(sys.argv[2])
fa = load_samples_frame(a).sort_values(["engine", "case", "slice", "row"]).reset_index(drop=True)
fb = load_samples_frame(b).sort_values(["engine", "case", "slice", "row"]).reset_index(drop=True)
cols = [c for c in fa.columns if c not in ("elapsed_s", "created", "wall_time_s")]
same_samples = fa[cols].astype(str).equals(fb[cols].astype(str))
print("samples rows", len(fa), len(fb), "identical:", same_samples)
ra, rb = json.loads((a / "result.json").read_text()), json.loads((b / "result.json").read_text())
SKIP = {"baseline_tokens_per_s", "candidate_tokens_per_s", "speedup_per_token", "provenance", "rerun_command"}
def strip(x):
    if isinstance(x, dict):
        return {k: strip(v) for k, v in x.items() if k not in SKIP}
    if isinstance(x, list):
        return [strip(v) for v in x]
    return x
diff = [k for k in set(ra) | set(rb) if strip(ra.get(k)) != strip(rb.get(k))]
print("result keys differing (timing/provenance excluded):", diff)
for ca, cb in zip(ra["cases"], rb["cases"]):
    d = [k for k in ca if strip(ca[k]) != strip(cb.get(k))]
    if d: print(ca["case_id"], d)
