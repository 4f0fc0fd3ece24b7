"""Why a case got its verdict, in words every face can print: the CLI table, the Markdown
summary and the HTML report.

- :func:`deciding_test`: the test that made a case ``shifted`` (the primary test with the
  smallest Holm-adjusted p-value, as :mod:`speceq.verdicts.decide` picks it), or None when a
  hard failure or a greedy mismatch decided it.
- :func:`decided_by`: one short line naming it, its adjusted p and its effect.
- :func:`meaning`: one sentence on what the deciding test says about the candidate engine.
- :func:`skipped_tests`: primary tests that did not run, and how to enable them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any

from speceq.verdicts.result import CaseResult, RunResult, TestOutcome

#: Said wherever a fixed-size rerun with more samples is advised.
SECOND_LOOK = ("the rerun is a second look at the same cases: k such reruns spend up to k x alpha; "
               "--sequential stays valid however often it looks")

_TV = re.compile(r"\bTV=([0-9.eE+-]+)")
_MEAN_F = re.compile(r"mean f (\S+) vs expected (\S+?)[ (;]")
_ROW_DIFF = re.compile(r"\(difference ([0-9.eE+-]+);")


def deciding_test(case: CaseResult, alpha: float) -> TestOutcome | None:
    """The primary test that rejects with the smallest Holm-adjusted p (ties: smaller raw p); None if none rejects."""
    rejecting = [t for t in case.tests if t.primary and t.adjusted_pvalue is not None and t.adjusted_pvalue <= alpha]
    return min(rejecting, key=lambda t: (t.adjusted_pvalue, t.pvalue), default=None)


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return "0 (underflow)" if p == 0 else f"{p:.2g}"


def effect(test: TestOutcome) -> str:
    """The test's effect in its own units, from its stored summary: TV for chi-square tests, the
    mean row-score difference for comparisons, per-token excess of f for z-tests, the statistic otherwise."""
    d = _ROW_DIFF.search(test.summary)
    if test.name.endswith(" comparison") and d:
        return f"Z={test.statistic:+.3g}, candidate minus baseline row score {float(d.group(1)):+.3g}"
    m = _MEAN_F.search(test.summary + " ")
    if test.name.startswith("z ") and m:
        try:
            return f"Z={test.statistic:+.3g}, per-token excess {float(m.group(1)) - float(m.group(2)):+.3g}"
        except ValueError:
            pass
    tv = _TV.search(test.summary)
    if tv and test.name.startswith("chi2"):
        return f"TV={tv.group(1)}"
    return f"statistic {test.statistic:.4g}"


def decided_by(case: CaseResult, alpha: float) -> str:
    """One short line: what decided a shifted case ('' for other verdicts)."""
    if case.verdict != "shifted":
        return ""
    if case.hard_failures:
        more = f" (+{len(case.hard_failures) - 1} more)" if len(case.hard_failures) > 1 else ""
        return f"hard failure: {case.hard_failures[0]}{more}"
    test = deciding_test(case, alpha)
    if test is None:
        return case.reason
    return f"{test.name}: Holm p={_fmt_p(test.adjusted_pvalue)}, {effect(test)}"


def meaning(case: CaseResult, alpha: float, engine: str) -> str:
    """One sentence: what the deciding test (or hard failure) says about ``engine``."""
    if case.hard_failures and case.greedy is not None:
        return (f"{engine} chose, at temperature 0, a token the target clearly does not prefer (its top-2 margin is "
                "far above numerical noise): a correct greedy speculative decoder never does that.")
    if case.hard_failures:
        return (f"{engine} emitted a token that the processed target gives probability 0 (outside its top-k/top-p): "
                "a correct speculative sampler can never do that.")
    test = deciding_test(case, alpha)
    if test is None:
        return f"{case.reason}."
    up = test.statistic > 0
    name = test.name
    same = "than the baseline's do, both scored by the same oracle"
    if name in ("draft ratio comparison", "draft log-ratio comparison"):
        return (f"{engine}'s tokens are ones its draft model favours {'more' if up else 'less'} often {same}: its output "
                f"leans {'toward' if up else 'away from'} the draft, the signature of a wrong accept/resample rule.")
    if name == "argmax comparison":
        return (f"{engine} emits the target's most likely token {'more' if up else 'less'} often than the baseline does: "
                f"{'some draws behave greedily' if up else 'probability moved off the top token'}.")
    if name == "log-likelihood comparison":
        return (f"{engine}'s tokens are {'likelier' if up else 'less likely'} under the target {same}: its distribution "
                f"is {'sharper (a lower temperature or extra truncation)' if up else 'flatter (a higher temperature or missing truncation)'} "
                "than the baseline's.")
    if name == "PIT comparison":
        return (f"{engine}'s tokens sit {'lower' if up else 'higher'} in the target's ranking {same}: mass moved toward the "
                f"target's {'unlikely' if up else 'likely'} tokens.")
    if name == "support comparison":
        return (f"{engine} emits tokens the processed target gives probability 0 (outside its top-k/top-p) in more rows "
                "than the baseline: a correct speculative sampler never does that more often than plain sampling.")
    if name == "z draft drift":
        return (f"{engine} emits the tokens its draft model favours {'more' if up else 'less'} often than the target "
                f"allows: its output leans {'toward' if up else 'away from'} the draft, the signature of a wrong "
                "accept/resample rule.")
    if name == "z argmax leak":
        return (f"{engine} emits the target's most likely token {'more' if up else 'less'} often than the target's "
                f"probability allows: {'some draws behave greedily' if up else 'probability moved off the top token'}.")
    if name == "z temperature drift":
        return (f"{engine}'s tokens are {'likelier' if up else 'less likely'} under the target than sampling from it "
                f"gives: its distribution is {'sharper (a lower temperature or extra truncation)' if up else 'flatter (a higher temperature or missing truncation)'} "
                "than the target's.")
    if name.startswith("PIT"):
        return (f"{engine}'s tokens do not fall where the target's probabilities put them: mass moved between the "
                "target's likely and unlikely tokens.")
    if name == "chi2 GOF first token":
        return f"{engine}'s first token does not follow the target's exact next-token probabilities."
    if name == "chi2 length":
        return f"{engine}'s outputs stop (EOS) at different lengths than the baseline's."
    if name.startswith("chi2 joint"):
        return (f"{engine} produces the pairs of first two tokens at different rates than the baseline: the law of the "
                "sequence changed, not only of one token.")
    if test.position is not None:
        prompt = f" of prompt {test.prompt}" if test.prompt is not None else ""
        return (f"At generated position {test.position}{prompt}, {engine} picks tokens at different rates than the "
                "baseline (the bars show which tokens moved).")
    return f"{name} rejects: {engine} does not sample the baseline's distribution."


def detectable_shift(case: CaseResult) -> str:
    """The smallest TV shift the case's chi-square detects at its size ('' when not computed)."""
    if case.min_detectable_tv is None:
        return ""
    return f"its tests detect TV shifts >= {case.min_detectable_tv:.3f} (power 0.9)"


def samples_needed(case: CaseResult) -> str:
    """For an inconclusive case: the samples that would decide ('' when none is known)."""
    if case.verdict != "inconclusive":
        return ""
    if case.required_n is None:
        return case.reason
    shift = detectable_shift(case)
    return (f"~{case.required_n:,} samples per engine would decide (now {min(case.n_baseline, case.n_candidate):,}"
            f"{'; ' + shift if shift else ''})")


def argv_rerun_command(argv: Sequence[str], samples: int, *, program: str = "speceq") -> str:
    """The command line ``argv`` (of ``speceq ...``) with ``--samples`` set to ``samples`` and
    ``--fresh`` dropped, so that the rerun reuses the stored samples and adds the rest."""
    out: list[str] = []
    skip = False
    for i, a in enumerate(argv):
        if skip:
            skip = False
            continue
        if a == "--samples":
            skip = i + 1 < len(argv)
            continue
        if a.startswith("--samples=") or a == "--fresh":
            continue
        out.append(a)
    return shlex.join([program, *out, "--samples", str(samples)])


#: How each face enables the oracle tests: the ``speceq run`` flags and the pytest plugin's options.
ENABLE_HINTS: dict[str, dict[str, str]] = {
    "cli": {
        "oracle": "drop --no-oracle (and give --oracle-model DIR if the baseline loads no model)",
        "draft": "give the candidate's draft with --oracle-draft DIR (--oracle-draft bundled for the bundled models)",
    },
    "pytest": {
        "oracle": "set --speceq-oracle=on (or --speceq-oracle=DIR, the target's folder, if the baseline loads no model)",
        "draft": "use a candidate engine that exposes its draft model, or run `speceq run --oracle-draft DIR` on the "
                 "same engines",
    },
}


def skipped_tests(result: RunResult, face: str = "cli") -> list[str]:
    """Primary tests that did not run in this result, each with how to enable it from ``face``
    (``"cli"`` for ``speceq run``, ``"pytest"`` for the plugin)."""
    hints = ENABLE_HINTS[face]
    sampled = any(c.greedy is None for c in result.cases)
    if not sampled:
        return []
    if result.oracle is None:
        return ["oracle tests not run (black-box mode): the comparisons of oracle scores (argmax, log-likelihood, PIT, "
                f"draft ratio and log-ratio, support) need the target oracle; {hints['oracle']}"]
    if "draft" in result.oracle and result.oracle["draft"] is None:
        return ["draft ratio comparison not run (nor the draft log-ratio one): the oracle has no draft model (the "
                f"candidate exposes none). They are the tests that catch a wrong accept/resample rule; {hints['draft']}"]
    return []


def engine_label(result: RunResult, role: str) -> str:
    """The engine spec the user typed for ``role`` (from provenance), else its name."""
    prov = result.provenance.get("engines") if isinstance(result.provenance, dict) else None
    ident: Any = prov.get(role) if isinstance(prov, dict) else None
    if isinstance(ident, dict) and isinstance(ident.get("spec"), str) and ident["spec"]:
        return ident["spec"]
    cfg = result.engines.get(role)
    if isinstance(cfg, dict):
        return str(cfg.get("name") or cfg.get("engine") or role)
    return role
