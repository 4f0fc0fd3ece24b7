"""Every mutant of the gallery at a small budget: does each shifted case's report card show a
picture of the test that decided it?

For each mutant: baseline and mutant samples of one case (the mutant's own sampling
parameters, 4 new tokens, batch 64; companions for batch bugs), the full analysis with the
target oracle (and the mutant's draft), one result.json and one HTML report per mutant in
``--out``. Then each report is read back: a shifted case passes when its "Why shifted" block
holds an inline SVG (or, for a hard failure, states it). Prints one line per mutant and exits
1 if any shifted case lacks its picture.

Usage: python benchmarks/report_gallery.py [--samples 300] [--out speceq-gallery] [--mutants a,b]
       python benchmarks/report_gallery.py --check-only --out DIR   (re-render saved results)
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

#: Stronger settings of the two tunable mutants (as in tests/engines/test_mutants.py), so that
#: a small budget detects them.
STRONG = {"biased-ratio": {"power": 0.5}, "mixture": {"mix": 0.5}}


def run_mutant(name: str, samples: int, models, seed: int = 0):
    """RunResult of baseline vs ``mutant:<name>`` on one case, with the oracle."""
    from speceq.core.params import SamplingParams
    from speceq.engines.base import SampleRequest
    from speceq.engines.baseline import BaselineEngine
    from speceq.engines.mutants import MUTANTS, make_mutant
    from speceq.inputs.cases import Case
    from speceq.models import ByteTokenizer
    from speceq.models.prompts import DEFAULT_PROMPTS
    from speceq.oracles.hf import TargetOracle
    from speceq.pipeline.analysis import analyse_run

    target, draft = models
    spec = MUTANTS[name]
    tok = ByteTokenizer()
    companions = tuple(tuple(tok.encode(DEFAULT_PROMPTS[i])) for i in (7, 8)) if spec.bug_class == "batch" else ()
    case = Case(case_id=name, prompt_ids=tuple(tok.encode(DEFAULT_PROMPTS[0])), text=DEFAULT_PROMPTS[0],
                params=SamplingParams(max_new_tokens=4, **spec.params), batch_size=64, companions=companions)
    shared = {"target": target} if name == "draft-is-target" else {"target": target, "draft": draft}
    engine = make_mutant(name, **shared, **{**spec.options, **STRONG.get(name, {})})
    prompts = tuple(map(tuple, case.prompts))
    baseline = BaselineEngine(target)
    base = baseline.sample(SampleRequest(prompts=prompts, params=case.params, n=samples, seed=101,
                                                       batch_size=case.batch_size))
    cand = engine.sample(SampleRequest(prompts=prompts, params=case.params, n=samples, seed=202,
                                       batch_size=case.batch_size))
    oracle = TargetOracle(target, draft=engine.draft)
    spec_text = f"mutant:{name}"
    return analyse_run([case], {name: base}, {name: cand}, oracle=oracle, alpha=1e-3, tolerance=0.05, seed=seed,
                       engines={"baseline": baseline.describe(), "candidate": engine.describe()},
                       provenance={"engines": {"baseline": {"spec": "baseline"}, "candidate": {"spec": spec_text}},
                                   "benchmark": "benchmarks/report_gallery.py"})


def check_report(html: str) -> list[tuple[str, str, str]]:
    """(case id, verdict, what decided it and whether the card pictures it) per case of a report page."""
    out = []
    for section in re.findall(r'<section id="case-\d+" class="block case v-(\w+)">(.*?)</section>', html, re.S):
        verdict, body = section
        case_id = re.search(r'<span class="case-id">(.*?)</span>', body).group(1)
        decided = re.search(r'<div class="decided">(.*?)</div>', body, re.S)
        if verdict != "shifted":
            out.append((case_id, verdict, "—"))
        elif decided is None:
            out.append((case_id, verdict, "MISSING: no 'Why shifted' block"))
        else:
            title = re.search(r"<h3>Why shifted: (.*?)</h3>", decided.group(1)).group(1)
            svg = re.search(r'<svg [^>]*aria-label="([^"]*)"', decided.group(1))
            if svg:
                out.append((case_id, verdict, f"{title}: picture '{svg.group(1)}'"))
            elif title == "hard failure":
                out.append((case_id, verdict, "hard failure (stated, no statistics needed)"))
            else:
                out.append((case_id, verdict, f"MISSING: {title} has no picture"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300, help="samples per engine and mutant (default 300)")
    parser.add_argument("--out", default="speceq-gallery", help="folder for result JSONs and reports")
    parser.add_argument("--mutants", default="", help="comma-separated subset (default: all)")
    parser.add_argument("--check-only", action="store_true", help="re-render and check saved results only")
    args = parser.parse_args(argv)

    import torch

    from speceq.engines.mutants import MUTANTS
    from speceq.reports import render_report
    from speceq.verdicts.result import RunResult

    torch.set_num_threads(1)
    names = [n for n in args.mutants.split(",") if n] or list(MUTANTS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = None
    missing = 0
    for name in names:
        path = out / f"{name}.json"
        t0 = time.perf_counter()
        if not args.check_only:
            if models is None:
                from speceq.models import load_draft, load_target

                models = (load_target(), load_draft())
            path.write_text(run_mutant(name, args.samples, models).to_json() + "\n", encoding="utf-8")
        result = RunResult.from_json(path.read_text(encoding="utf-8"))
        html = render_report(result)
        (out / f"{name}.html").write_text(html, encoding="utf-8")
        for _case_id, verdict, what in check_report(html):
            missing += what.startswith("MISSING")
            lossless = " (lossless)" if MUTANTS[name].lossless else ""
            print(f"{name:<24} {verdict:<12} {what}{lossless}  [{time.perf_counter() - t0:.0f} s]", flush=True)
    print(f"{missing} shifted case(s) without a picture of the deciding test")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
