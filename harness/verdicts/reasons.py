"""Why a case got its verdict, in words every face can print: the CLI table, the Markdown
summary and the HTML report.

- :func:`deciding_test`: the test that made a case ``shifted`` (the primary test with the
  smallest Holm-adjusted p-value, as :mod:`speceq.verdicts.decide` picks it), or None when a
  hard failure or a greedy mismatch decided it.
- :func:`decided_by`: one short line naming it, its adjusted p and its effect.
- :func:`effect` / :func:`effect_bound`: a test's effect in words, from its ``kind`` and ``effect`` fields.
- :func:`meaning`: one sentence on what the deciding test says about the candidate engine.
- :func:`skipped_tests`: primary tests that did not run, and how to enable them.
- :class:`TokenLabels` / :func:`failure_lines`: token ids as text, and the hard-failure records in words.
- :func:`note_line` / :func:`note_lines`: the note records (:mod:`speceq.verdicts.notes`) in words.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from speceq.core.defaults import CONTROL_RATIO
from speceq.stats.results import Effect
from speceq.verdicts.failures import FailureKind, HardFailure
from speceq.verdicts.kinds import EffectName, TestKind
from speceq.verdicts.notes import BOTH_ROLES, Note, NoteKind, OffsetReading, sampling_time_note
from speceq.verdicts.numerics_drift import CONTROL_NOTE, drift_words, numerics_differ_hint
from speceq.verdicts.result import CaseResult, GreedySummary, RunResult, TestOutcome, TokenFrequency

#: Said wherever a fixed-size rerun with more samples is advised.
SECOND_LOOK = ("the rerun is a second look at the same cases: k such reruns spend up to k x alpha; "
               "--sequential stays valid however often it looks")

class TokenLabels:
    """Token ids as display text: decoded by the case's tokenizer when it is known (``tokenizer``: a portable
    name, ``bytes``/``bpe``/``smollm2``, or a tokenizer.json path), else the bundled byte vocabulary decoded
    when ``vocab_size`` is its size, else ids as numbers (``#5230``)."""

    def __init__(self, vocab_size: int, tokenizer: str | None = None) -> None:
        from speceq.models import VOCAB_SIZE, ByteTokenizer

        self.vocab_size = vocab_size
        self._hf = None if tokenizer in (None, "bytes") else _load_tokenizer(str(tokenizer))
        self._bt = ByteTokenizer() if self._hf is None and (vocab_size == VOCAB_SIZE or tokenizer == "bytes") else None

    @property
    def from_tokenizer(self) -> bool:
        """Whether a named tokenizer (not the bundled bytes) makes the labels."""
        return self._hf is not None

    def _bytes(self, ids: Sequence[int]) -> bool:
        # without an oracle the vocabulary is a guess (259): ids beyond it are shown as numbers, never decoded
        return self._bt is not None and all(0 <= int(i) < self._bt.vocab_size for i in ids)

    def _known(self, ids: Sequence[int]) -> bool:
        return self._hf is not None and all(0 <= int(i) < self._hf.get_vocab_size() for i in ids)

    def token(self, t: int) -> str:
        """One token: its text, ``<END>`` (the end symbol of the position tests), ``<ended>`` (a row that ended)."""
        from speceq.stats.counts import END

        if t == END:
            return "<END>"
        if t < 0:
            return "<ended>"
        if self._known([t]):
            text = self._hf.decode([int(t)], skip_special_tokens=False)
            return repr(text) if text else (self._hf.id_to_token(int(t)) or f"#{int(t)}")
        return self._bt.token_text(int(t)) if self._bytes([t]) else f"#{int(t)}"

    def text(self, ids: Sequence[int]) -> str:
        """A run of tokens: decoded text, or the ids separated by spaces."""
        if self._known(ids):
            return self._hf.decode([int(i) for i in ids], skip_special_tokens=False)
        return self._bt.decode([int(i) for i in ids]) if self._bytes(ids) else " ".join(str(int(i)) for i in ids)


@functools.lru_cache(maxsize=8)
def _load_tokenizer(name: str) -> Any:
    """The ``tokenizers.Tokenizer`` of a portable name or a tokenizer.json path; None when this machine lacks it
    (a face then shows ids: a result stays readable where its tokenizer is not)."""
    from speceq.errors import ConfigError
    from speceq.models.named_tokenizers import named_tokenizer_folder

    try:
        folder = named_tokenizer_folder(name)
    except ConfigError:  # e.g. smollm2 not prepared on this machine
        return None
    path = folder / "tokenizer.json" if folder is not None else Path(name)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(path))
    except Exception:  # the tokenizers package raises a bare Exception on bad files: show ids instead
        return None


def case_token_labels(case: CaseResult) -> TokenLabels:
    """The token labels of a result's case: its tokenizer (``case.case["tokenizer"]``) when named and present on
    this machine, else the vocabulary its hard failures record (bytes decoded), else ids."""
    spec = case.case if isinstance(case.case, Mapping) else {}
    name = spec.get("tokenizer")
    vocab = next((f.vocab_size for f in case.failures), 0)
    return TokenLabels(vocab, name if isinstance(name, str) and name else None)


def with_token_text(case: CaseResult) -> CaseResult:
    """``case`` with every shown token made from its stored ids by the case's tokenizer (:func:`case_token_labels`):
    frequency-bar tokens, chi-square bins, sample texts, greedy divergences and hard-failure lines. Unchanged when
    the tokenizer is not known here or the result predates the ids (its stored texts are kept)."""
    labels = case_token_labels(case)
    if not labels.from_tokenizer:  # bytes or unknown: the analysis's labels are already the best there is
        return case
    g = case.greedy
    if g is not None:
        g = dataclasses.replace(g, divergences=tuple(dataclasses.replace(
            d, baseline_text=labels.token(d.baseline_token), candidate_text=labels.token(d.candidate_token),
            prefix_text=labels.text(d.prefix_ids)[-60:] if d.prefix_ids else d.prefix_text) for d in g.divergences))
    return dataclasses.replace(
        case,
        top_tokens=tuple(dataclasses.replace(t, text=labels.token(t.token)) for t in case.top_tokens),
        test_bins=tuple(b if len(b.tokens) != len(b.labels) else dataclasses.replace(
            b, labels=tuple(" ".join(labels.token(x) for x in ids) if ids else old
                            for ids, old in zip(b.tokens, b.labels))) for b in case.test_bins),
        samples=tuple(dataclasses.replace(s, text=labels.text(s.token_ids)) if s.token_ids else s for s in case.samples),
        greedy=g,
        hard_failures=failure_lines(case.failures, labels) if case.failures else case.hard_failures,
    )


def _where(f: HardFailure) -> str:
    return f"row {f.row} (prompt {f.prompt}) position {f.position}"


def failure_line(f: HardFailure, labels: TokenLabels | None = None) -> str:
    """One hard failure in words, without its group's counts (see :func:`failure_lines`); ``labels``: the case's
    token labels (default: by the vocabulary size the record holds)."""
    labels = labels if labels is not None else TokenLabels(f.vocab_size)
    after = labels.text(f.prefix)
    if f.kind is FailureKind.ZERO_PROBABILITY:
        return (f"{_where(f)}: token {labels.token(f.token)} has probability 0 under the processed target "
                f"after {after[-40:]!r}")
    if f.kind is FailureKind.OUTSIDE_MARGIN:
        far = ("no finite logit error admits it" if f.margin_nats is None or math.isinf(f.margin_nats)
               else f"its exclusion margin {f.margin_nats:.3g} nats")
        return f"{_where(f)}: token {labels.token(f.token)} after {after[-40:]!r} ({far})"
    if f.kind is FailureKind.LEAVES_GRAMMAR:
        return (f"{_where(f)}: token {labels.token(f.token)} leaves the grammar (structured_outputs) after "
                f"{after[-40:]!r}")
    if f.kind is FailureKind.GREEDY_MISMATCH:
        return (f"greedy rows of prompt {f.prompt} differ at position {f.position} where the target's top-2 margin is "
                f"{f.margin_nats:.3g} nats (> {f.threshold_nats:g}): {labels.token(f.baseline_token)} vs "
                f"{labels.token(f.token)} after {after[-30:]!r} ({f.rows} rows)")
    return (f"greedy row {f.row} of prompt {f.prompt}, teacher-forced through the oracle after it left the "
            f"baseline's row, emits {labels.token(f.token)} at position {f.position}, not the target's argmax, "
            f"where the top-2 margin is {f.margin_nats:.3g} nats (> {f.threshold_nats:g}) after {after[-30:]!r}")


def support_rule(margin_nats: float) -> str:
    """What puts a token outside the processed support at a support margin (nats; 0: the oracle taken as exact)."""
    return (f"every law whose logits are within {margin_nats:g} nats of the oracle's excludes it" if margin_nats > 0
            else "the oracle (taken as exact: --support-margin-nats 0) gives it probability 0")


def failure_lines(failures: Sequence[HardFailure], labels: TokenLabels | None = None) -> tuple[str, ...]:
    """The hard failures of a case in words, one line each; the first of a group leads with its counts."""
    out: list[str] = []
    for i, f in enumerate(failures):
        line = failure_line(f, labels)
        if f.kind is FailureKind.ZERO_PROBABILITY and f.rows_flagged is not None:
            line = (f"{f.rows_flagged} of {f.rows_total} candidate rows hold a token the processed target gives "
                    f"probability 0, the baseline's {f.baseline_rows} rows none (exact p = {f.pvalue:.2g}); {line}")
        elif f.kind is FailureKind.LEAVES_GRAMMAR and f.rows_flagged is not None:
            line = f"{f.rows_flagged} of {f.rows_total} candidate rows leave the case's grammar; {line}"
        elif f.kind is FailureKind.OUTSIDE_MARGIN and f.rows_flagged is not None:
            line = (f"{f.rows_flagged} candidate row(s) hold a token outside the processed target's support beyond "
                    f"the numerics margin ({support_rule(f.threshold_nats or 0.0)}; the baseline's {f.baseline_rows} "
                    f"rows none): {line}")
        out.append(line)
        last_mismatch = f.kind is FailureKind.GREEDY_MISMATCH and (
            i + 1 == len(failures) or failures[i + 1].kind is not FailureKind.GREEDY_MISMATCH)
        first = next((g for g in failures if g.kind is FailureKind.GREEDY_MISMATCH), None)
        if last_mismatch and first is not None and first.total is not None:
            out.append(f"... {first.total} distinct mismatches in all")
    return tuple(out)


def deciding_test(case: CaseResult, alpha: float) -> TestOutcome | None:
    """The primary test that rejects with the smallest Holm-adjusted p (ties: smaller raw p); None if none rejects."""
    rejecting = [t for t in case.tests if t.primary and t.adjusted_pvalue is not None and t.adjusted_pvalue <= alpha]
    return min(rejecting, key=lambda t: (t.adjusted_pvalue, t.pvalue), default=None)


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "—"
    return "0 (underflow)" if p == 0 else f"{p:.2g}"


def test_kind(test: TestOutcome) -> TestKind | None:
    """The test's kind; for a result written before kinds were stored, the kind whose value is exactly its name."""
    if test.kind is not None:
        return test.kind
    return next((k for k in TestKind if k.value == test.name), None)


def effect(test: TestOutcome) -> str:
    """The test's effect in its own units, from its ``kind`` and ``effect`` fields: TV for chi-square tests,
    the mean row-score difference for row-score comparisons, the per-token excess of f for z-tests, the largest
    e-value and the plug-in estimate so far for a sequential e-process, the statistic otherwise (and for results
    written before effects were stored)."""
    kind, e = test_kind(test), test.effect
    if kind is not None and e is not None:
        if kind.is_eprocess:  # an estimate so far, no interval (speceq.verdicts.sequential.eprocess_effect)
            what = (f"TV={e.estimate:.4f}" if kind.is_pair_eprocess else
                    f"candidate minus baseline {'share of rows' if e.name == EffectName.ROW_RATE_DIFFERENCE else 'row score'} "
                    f"{e.estimate:+.3g}")
            return f"max e-value {math.exp(min(test.statistic, 700.0)):.3g}, {what} (plug-in, so far)"
        if kind.is_row_comparison:
            return f"Z={test.statistic:+.3g}, candidate minus baseline row score {e.estimate:+.3g}"
        if kind.is_z_test:
            return f"Z={test.statistic:+.3g}, per-token excess {e.estimate:+.3g}"
        if kind.is_chi2:
            return f"TV={e.estimate:.4f}"
        if kind is TestKind.ROW_INDEPENDENCE:
            return f"within-call minus across-call agreement {e.estimate:+.3f}"
    return f"statistic {test.statistic:.4g}"


def effect_bound(test: TestOutcome) -> str:
    """The test's TV with its own upper bound and level (``"TV=0.0415 <= 0.0754 (confidence 1-0.001)"``), or ''
    when its effect is not a bounded TV."""
    e = test.effect
    if e is None or e.name != "TV" or e.high is None or e.level is None:
        return ""
    return f"TV={e.estimate:.4f} <= {e.high:.4f} (confidence 1-{1.0 - e.level:.2g})"


def size_words(size: Effect) -> str:
    """A shift's size in words: ``"size: largest TV of 5 laws 0.0120 in [0.0040, 0.0510] (confidence 1-0.001;
    held-out estimate, not the plug-in)"``; a greedy case's: ``"size: 100.0% of the greedy row pairs diverge beyond
    a near-tie, in [94.6%, 100.0%] (confidence 1-0.001; Clopper-Pearson)"``."""
    level = "" if size.level is None else f"confidence 1-{1.0 - size.level:.2g}; "
    low = 0.0 if size.low is None else size.low
    if size.name == EffectName.GREEDY_DIVERGENCE:
        high = "?" if size.high is None else f"{size.high:.1%}"
        return (f"size: {size.estimate:.1%} of the greedy row pairs (every prompt of the batch) diverge beyond a "
                f"near-tie, in [{low:.1%}, {high}] ({level}Clopper-Pearson)")
    what = size.name.removesuffix(" (held-out estimate)")
    high = "?" if size.high is None else f"{size.high:.4f}"
    return f"size: {what} {size.estimate:.4f} in [{low:.4f}, {high}] ({level}held-out estimate, not the plug-in)"


def time_uniform_bound_words(upper: float, grid_n: int | None) -> str:
    """``"largest per-position TV at most 0.2540 (time-uniform upper bound, data up to n = 900)"``: the bound of a
    sequential case, which holds at every look at once."""
    return f"largest per-position TV at most {upper:.4f} (time-uniform upper bound, data up to n = {grid_n})"


def time_uniform_size_words(upper: float | None, grid_n: int | None) -> str:
    """The size a sequential ``shifted`` can state: its time-uniform bound, and why it has no interval."""
    why = "a sequential run has no size interval: one of a fixed sample size does not hold at a look the data chose"
    if upper is None:
        return f"size: no time-uniform TV bound yet ({why})"
    return f"size: {time_uniform_bound_words(upper, grid_n)}; {why}"


def near_tie_words(rows: int) -> str:
    """What a greedy size leaves out: ``"3 more row pairs diverge only at numerical near-ties (not counted)"``."""
    pairs = "row pair diverges" if rows == 1 else "row pairs diverge"
    return f"{rows} more {pairs} only at numerical near-ties (not counted)"


#: The bound each certificate compares with the tolerance, as faces name it.
BOUND_NAMES = {"tv": "TV bound", "pit-law": "PIT-law bound"}


def bound_name(certificate: str) -> str:
    """What the decisive bound of a run under ``certificate`` is called (a table header): ``"TV bound"``,
    ``"PIT-law bound"``."""
    return BOUND_NAMES.get(certificate, f"{certificate} bound")


def case_bound_name(case: CaseResult) -> str:
    """The name of the bound that decides ``case``: the PIT-law bound of a sampling case under ``pit-law``,
    else the TV bound (a greedy case's is on whole rows)."""
    return bound_name("pit-law" if case.certificate == "pit-law" and case.greedy is None else "tv")


def tolerance_rule(certificate: str, tolerance: float) -> str:
    """The equivalence rule in force, naming the certificate: ``"tolerance TV < 0.15"`` or
    ``"certificate pit-law: PIT-law bound < 0.15"``."""
    if certificate == "tv":
        return f"tolerance TV < {tolerance:g}"
    return f"certificate {certificate}: {bound_name(certificate)} < {tolerance:g}"


def shown_bound(case: CaseResult) -> float | None:
    """The bound a face shows for ``case`` next to its verdict: its decisive bound, except for a shifted greedy case
    (None): a mismatch decided it, and the bound on the TV of its whole rows (near 1 there) says nothing of how
    large the difference is; its ``size`` does."""
    if case.greedy is not None and case.verdict == "shifted":
        return None
    return case.decisive_bound


def bound_line(case: CaseResult) -> str | None:
    """The bound that decided ``case`` against its tolerance, naming the certificate, and under ``pit-law`` the TV
    bound it does not certify; None when the case has no bound at all, or none a face shows (:func:`shown_bound`)."""
    name, bound = case_bound_name(case), case.decisive_bound
    if (bound is None and case.tv_upper_bound is None) or (case.greedy is not None and shown_bound(case) is None):
        return None
    if bound is None:
        met = "none computed"
    else:
        met = f"{bound:.4f} {'<' if bound < case.tolerance else '>='} tolerance {case.tolerance:g}"
    if case.certificate == "pit-law" and case.greedy is None:
        tv = "" if case.tv_upper_bound is None else \
            f"; the TV bound {case.tv_upper_bound:.4f} is shown for information, not certified"
        return f"{name} {met} (certificate pit-law: the verdict rests on it){tv}"
    return f"{name} {met} (certificate tv; {case.tv_reference})"


def decided_by(case: CaseResult, alpha: float) -> str:
    """One short line: what decided a shifted or within-tolerance case ('' for other verdicts)."""
    if case.verdict not in ("shifted", "within-tolerance"):
        return ""
    size = "" if case.size is None else f"; {size_words(case.size)}"
    if case.size is not None and case.greedy is not None:
        size += f"; {near_tie_words(greedy_near_tie_only(case.greedy))}"
    if case.hard_failures:
        more = f" (+{len(case.hard_failures) - 1} more)" if len(case.hard_failures) > 1 else ""
        return f"hard failure: {case.hard_failures[0]}{more}{size}"
    test = deciding_test(case, alpha)
    if test is None:
        return case.reason
    plug_in = size and test.effect is not None and test.effect.name == "TV"  # the size replaces a plug-in TV
    return f"{test.name}: Holm p={_fmt_p(test.adjusted_pvalue)}" + ("" if plug_in else f", {effect(test)}") + size


def greedy_near_tie_only(g: GreedySummary) -> int:
    """Diverging row pairs of a greedy summary whose every departure from the target's argmax is a near-tie."""
    return g.rows_compared - g.rows_equal - g.rows_beyond_near_tie - g.unexplained


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
    kind = test_kind(test)
    same = "than the baseline's do, both scored by the same oracle"
    if kind in (TestKind.DRAFT_RATIO_COMPARISON, TestKind.DRAFT_LOG_RATIO_COMPARISON):
        return (f"{engine}'s tokens are ones its draft model favours {'more' if up else 'less'} often {same}: its output "
                f"leans {'toward' if up else 'away from'} the draft, the signature of a wrong accept/resample rule.")
    if kind is TestKind.ROW_INDEPENDENCE:
        return (f"{engine}'s rows sampled in the same call agree with each other more often than rows of different "
                "calls: its rows share randomness (a uniform or a seed reused across a batch), so they are not "
                "independent draws, even if each row on its own follows the target law.")
    if kind is TestKind.ARGMAX_COMPARISON:
        return (f"{engine} emits the target's most likely token {'more' if up else 'less'} often than the baseline does: "
                f"{'some draws behave greedily' if up else 'probability moved off the top token'}.")
    if kind is TestKind.LOG_LIKELIHOOD_COMPARISON:
        return (f"{engine}'s tokens are {'likelier' if up else 'less likely'} under the target {same}: its distribution "
                f"is {'sharper (a lower temperature or extra truncation)' if up else 'flatter (a higher temperature or missing truncation)'} "
                "than the baseline's.")
    if kind is TestKind.PIT_COMPARISON:
        return (f"{engine}'s tokens sit {'lower' if up else 'higher'} in the target's ranking {same}: mass moved toward the "
                f"target's {'unlikely' if up else 'likely'} tokens.")
    if kind is TestKind.SUPPORT_COMPARISON:
        return (f"{engine} emits tokens the processed target gives probability 0 (outside its top-k/top-p) in more rows "
                "than the baseline: a correct speculative sampler never does that more often than plain sampling.")
    if kind is TestKind.Z_DRAFT_DRIFT:
        return (f"{engine} emits the tokens its draft model favours {'more' if up else 'less'} often than the target "
                f"allows: its output leans {'toward' if up else 'away from'} the draft, the signature of a wrong "
                "accept/resample rule.")
    if kind is TestKind.Z_ARGMAX_LEAK:
        return (f"{engine} emits the target's most likely token {'more' if up else 'less'} often than the target's "
                f"probability allows: {'some draws behave greedily' if up else 'probability moved off the top token'}.")
    if kind is TestKind.Z_TEMPERATURE_DRIFT:
        return (f"{engine}'s tokens are {'likelier' if up else 'less likely'} under the target than sampling from it "
                f"gives: its distribution is {'sharper (a lower temperature or extra truncation)' if up else 'flatter (a higher temperature or missing truncation)'} "
                "than the target's.")
    if kind is TestKind.PIT_UNIFORMITY:
        return (f"{engine}'s tokens do not fall where the target's probabilities put them: mass moved between the "
                "target's likely and unlikely tokens.")
    if kind is TestKind.CHI2_FIRST_TOKEN_GOF:
        return f"{engine}'s first token does not follow the target's exact next-token probabilities."
    if kind is TestKind.CHI2_LENGTH:
        return f"{engine}'s outputs stop (EOS) at different lengths than the baseline's."
    if kind is TestKind.CHI2_JOINT:
        return (f"{engine} produces the pairs of first two tokens at different rates than the baseline: the law of the "
                "sequence changed, not only of one token.")
    if test.position is not None:
        prompt = f" of prompt {test.prompt}" if test.prompt is not None else ""
        return (f"At generated position {test.position}{prompt}, {engine} picks tokens at different rates than the "
                "baseline (the bars show which tokens moved).")
    return f"{test.name} rejects: {engine} does not sample the baseline's distribution."


#: A token "clearly moved" in a plain summary when its two-proportion z between the engines is at least this.
CLEAR_SHIFT_Z = 3.0
#: At most this many moved tokens are named in a plain summary.
PLAIN_TOKENS = 3


def _share_z(t: TokenFrequency, n_base: int, n_cand: int) -> float:
    """Two-proportion z of one token's share, candidate minus baseline (pooled standard error; 0 when undefined)."""
    if n_base <= 0 or n_cand <= 0:
        return 0.0
    pooled = (t.baseline_count + t.candidate_count) / (n_base + n_cand)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_base + 1 / n_cand))
    return 0.0 if se == 0 else (t.candidate_count / n_cand - t.baseline_count / n_base) / se


def clearly_moved(case: CaseResult, position: int | None = None) -> list[TokenFrequency]:
    """The case prompt's tokens whose share moved clearly between the engines (|z| >= :data:`CLEAR_SHIFT_Z`),
    largest |z| first, at ``position`` when given; labels from the case's tokenizer (:func:`with_token_text`)."""
    toks = [t for t in with_token_text(case).top_tokens if position is None or t.position == position]
    z = {id(t): _share_z(t, case.n_baseline, case.n_candidate) for t in toks}
    moved = [t for t in toks if abs(z[id(t)]) >= CLEAR_SHIFT_Z]
    return sorted(moved, key=lambda t: (-abs(z[id(t)]), t.position, t.token))


def _moved_words(case: CaseResult, toks: Sequence[TokenFrequency]) -> str:
    def pct(count: int, n: int) -> str:
        return f"{count / n:.1%}" if n else "—"

    def label(text: str) -> str:  # token labels come quoted ('a', <END>, 0xff, #5230); older results' raw text is quoted here
        return text if text[:1] in ("'", '"', "<", "#") or text.startswith("0x") else repr(text)

    return "; ".join(f"{label(t.text)} at position {t.position}: {pct(t.baseline_count, case.n_baseline)} of the baseline's "
                     f"draws, {pct(t.candidate_count, case.n_candidate)} of the candidate's" for t in toks)


def plain_case_summary(case: CaseResult, alpha: float) -> str:
    """The case's verdict as an answer to the user's question (do the two engines sample the same answers?), in
    plain words from the result's data: what an equivalent verdict covers; for a shifted one, which answers moved
    and by how much; for an inconclusive one, what more would decide."""
    n = min(case.n_baseline, case.n_candidate)
    bound, name = case.decisive_bound, case_bound_name(case)
    if case.verdict == "equivalent":
        if case.greedy is not None:
            g = case.greedy
            ties = f"; the {g.rows_compared - g.rows_equal} that differ do so at numerical near-ties" \
                if g.rows_equal < g.rows_compared else ""
            return (f"The two engines give the same greedy answers: {g.rows_equal} of {g.rows_compared} rows are "
                    f"identical token for token{ties}.")
        claim = (f"no answer's chance at any position of this prompt differs by {case.tolerance:g} or more "
                 f"({name} {bound:.3f}, certificate tv)" if case.certificate != "pit-law" and bound is not None else
                 f"the target's likely and unlikely tokens keep their chances to within {case.tolerance:g} at every "
                 f"position ({name} {bound:.3f}, certificate pit-law; it does not bound each answer's chance)"
                 if bound is not None else "")
        return (f"The two engines sample the same answers as far as {n:,} draws per engine can tell"
                f"{': ' + claim if claim else ''}. A worse-looking answer from the candidate is a different draw, "
                "not a different engine.")
    if case.verdict == "shifted":
        if case.failures or case.hard_failures:
            what = "greedy answers the target clearly does not prefer" if case.greedy is not None else \
                "tokens the baseline can never produce (probability 0 under the processed target)"
            first = with_token_text(case).hard_failures[:1]
            size = "" if case.size is None else _size_sentence(case.size)
            return f"The candidate produces {what}: {first[0] if first else case.reason}.{size}"
        test = deciding_test(case, alpha)
        moved = clearly_moved(case, test.position if test is not None and test.prompt in (None, 0) else None)
        if not moved:
            moved = clearly_moved(case)
        tv = _size_sentence(case.size) if case.size is not None else "" if case.tv_estimate is None else \
            f" In all, about {case.tv_estimate:.0%} of the answers' probability moved at the worst position (TV estimate, biased upward)."
        if moved:
            return (f"The candidate samples different answers from the baseline: "
                    f"{_moved_words(case, moved[:PLAIN_TOKENS])}.{tv}")
        why = "" if test is None else f" ({test.name})"
        return (f"The candidate samples different answers from the baseline{why}, though no single token of the "
                f"first positions moved clearly on its own: the shift is spread over many tokens or later ones.{tv}")
    if case.verdict == "lossy":
        size = "" if case.size is None else _size_sentence(case.size)
        return ("The candidate declares itself lossy by design (it does not promise the target's law), so its "
                f"distance is measured, not judged.{size}")
    if case.verdict == "within-tolerance":
        size = "" if case.size is None else _size_sentence(case.size)
        return ("The candidate samples slightly different answers from the baseline, but by less than the numerics "
                f"tolerance: the difference is real and certified small, as a change of precision or kernels makes "
                f"it.{size}")
    if case.required_n is not None and case.required_n > n:
        need = f"about {case.required_n:,} draws per engine would decide (rerun with --samples {case.required_n})"
    elif case.required_n is not None:
        need = "the difference may be close to the tolerance; a larger tolerance or more draws would decide"
    else:
        need = case.reason
    bound_words = "" if bound is None else f" the {name} {bound:.3f} is not below the tolerance {case.tolerance:g}:"
    return (f"Not decided yet: no difference shows in {n:,} draws per engine, but they are too few to certify the "
            f"engines the same;{bound_words} {need}.")


def _size_sentence(size: Effect) -> str:
    low = 0.0 if size.low is None else size.low
    if size.name == EffectName.GREEDY_DIVERGENCE:
        high = "?" if size.high is None else f"{size.high:.1%}"
        return (f" {size.estimate:.1%} of the greedy answers differ from the baseline's beyond a numerical near-tie "
                f"(the rate lies in [{low:.1%}, {high}], Clopper-Pearson).")
    high = "" if size.high is None else f" and at most {size.high:.1%}"
    return (f" About {size.estimate:.1%} of the answers' probability moved at the worst position: at least {low:.1%}"
            f"{high} (held-out TV estimate and its bounds).")


def plain_run_summary(result: RunResult) -> str:
    """The run's verdict as an answer to the user's question, in plain words (names the cases that differ or need
    more draws). With a numerics control, the candidate is compared with the control, and the numerics drift found
    between the control and the baseline follows in its own sentence."""
    control = result.numerics_control
    if control is None:
        return _plain_run_verdict(result, "the baseline")
    return f"{_plain_run_verdict(result, 'the numerics control (the baseline at its numerics)')} {control.words()}"


def _plain_run_verdict(result: RunResult, reference: str) -> str:
    cases = result.cases
    n = min((min(c.n_baseline, c.n_candidate) for c in cases), default=0)
    shifted = [c.case_id for c in cases if c.verdict == "shifted"]
    open_ = [c for c in cases if c.verdict == "inconclusive"]
    if result.verdict == "equivalent":
        which = f"all {len(cases)} cases" if len(cases) != 1 else "the one case"
        return (f"The two engines sample the same answers in {which}, as "
                f"far as {n:,} draws per engine can tell ({tolerance_rule(result.certificate, result.tolerance)}). A "
                "worse-looking answer from the candidate is a different draw, not a different engine.")
    if result.verdict == "shifted":
        if not shifted:
            return (f"The candidate samples different answers from {reference}: no case shows it alone, but pooled "
                    f"over the cases a comparison rejects ({result.pooled_reason.split(':')[0]}).")
        which = f"{len(shifted)} of {len(cases)} cases" if len(cases) != 1 else "its one case"
        return (f"The candidate samples different answers from {reference} in {which} ({', '.join(shifted)}): a "
                "correct speculative decoder would not.")
    if result.verdict == "within-tolerance":
        within = [c.case_id for c in cases if c.verdict == "within-tolerance"]
        tol = "" if result.numerics_tolerance is None else f" TV {result.numerics_tolerance:g}"
        which = f"{len(within)} of {len(cases)} cases" if len(cases) != 1 else "its one case"
        return (f"The candidate samples slightly different answers from the baseline in {which} ({', '.join(within)}), "
                f"each difference certified below the numerics tolerance{tol}: drift of that size, not a broken "
                f"engine{'; the other cases are equivalent' if len(within) < len(cases) else ''}.")
    if result.verdict == "lossy":
        return (f"The candidate declares itself lossy by design, so speceq measures how far its answers are from "
                f"{reference}'s instead of judging them: the cases give each distance with its bounds.")
    need = max((c.required_n for c in open_ if c.required_n is not None), default=None)
    more = f"; about {need:,} draws per engine would decide" if need is not None else ""
    which = f"{len(open_)} of {len(cases)} cases" if len(cases) != 1 else "its one case"
    return (f"No difference shows, but {which} ({', '.join(c.case_id for c in open_)}) "
            f"need{'s' if len(open_) == 1 and len(cases) == 1 else ''} more draws to certify the engines the same{more}.")


#: Said of a case whose oracle knows only the top-K of each law.
TOP_K_ORACLE_NOTE = ("the oracle knows only the top-K of each law (a server's top-K log-probabilities): "
                     "'log-likelihood comparison' and 'z temperature drift' (need log p over the whole law) and "
                     "'chi2 GOF first token' (needs the whole first-token law) are not run, and the PIT is "
                     "coarsened (top-K tokens plus one tail cell; still exactly uniform under H0)")
#: Said when the candidate has tokens outside the oracle's support but the oracle cannot bound the support near it.
UNBOUNDED_SUPPORT_NOTE = ("the oracle cannot bound the processed support of the laws near its own (only top-K "
                          "log-probabilities): tokens outside its support are judged by the support comparison alone")


def baseline_outside_margin_note(count: int, example: HardFailure, labels: TokenLabels | None = None) -> str:
    """Why no support hard failure is called: the baseline too emits ``count`` tokens outside the margin (``example``)."""
    margin = example.threshold_nats or 0.0
    return (f"the baseline emits {count} token(s) outside the processed support by more than the "
            f"numerics margin ({support_rule(margin)}), e.g. {failure_line(example, labels)}: the engines' logits are "
            f"further from the oracle's than --support-margin-nats {margin:g} (or the baseline is not correct); no "
            "support hard failure, the support comparison decides")


def baseline_zero_probability_note(count: int, example: HardFailure, labels: TokenLabels | None = None) -> str:
    """The baseline too emits ``count`` tokens of oracle probability 0 (``example``): the oracle's law is off at its edge."""
    tokens = f"{count} token{'s' if count != 1 else ''}"
    return (f"the baseline too emits tokens of probability 0 under the oracle ({tokens}, e.g. "
            f"{failure_line(example, labels)}): the oracle's processed law is not the engines' at its support's edge "
            "(e.g. bf16 rounding at a top-p boundary); the support comparison decides whether the candidate has more "
            "of them")


def sampling_time_estimate(required_n: int, n_now: int, *, prompts: int, candidate_tokens: int,
                           baseline_tokens_per_s: float | None, candidate_tokens_per_s: float | None) -> str | None:
    """:func:`speceq.verdicts.notes.sampling_time_note` in words (None when it is None)."""
    note = sampling_time_note(required_n, n_now, prompts=prompts, candidate_tokens=candidate_tokens,
                              baseline_tokens_per_s=baseline_tokens_per_s,
                              candidate_tokens_per_s=candidate_tokens_per_s)
    return None if note is None else note_line(note)


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min" if seconds >= 90 \
        else f"{seconds:.0f} s"


def _numerics(dtype: Any, device: Any, role: str) -> str:
    if dtype is None:
        return f"{role} undeclared"
    return f"{role} {dtype}" + (f" on {device}" if device else "")


def _offset_line(v: Mapping[str, Any]) -> str:
    zs = f"baseline z = {v['baseline_z']:+.2f}, candidate z = {v['candidate_z']:+.2f}"
    p = v.get("comparison_pvalue")
    cmp_p = "not run" if p is None else f"p = {p:.3g}"
    test = v["test"]
    if v["reading"] == OffsetReading.SPECULATION:
        return (f"{test}: the candidate departs from the oracle more than the baseline does ({zs}); the "
                f"comparison of the two engines rejects ({cmp_p}): the speculation, not the oracle")
    if v["reading"] == OffsetReading.SHARED:
        return (f"{test}: both engines depart from the oracle ({zs}), the candidate no more than the baseline "
                f"(comparison {cmp_p}): the oracle or the numerics, not the speculation")
    return (f"{test}: one engine departs from the oracle ({zs}) but the comparison of the two does not "
            f"reject ({cmp_p}): a one-sample diagnostic, not evidence against the candidate")


def note_line(note: Note, labels: TokenLabels | None = None) -> str:
    """One note in words, from its kind and values (``labels``: the case's token labels for an example token;
    default: by the vocabulary size the example records)."""
    v, kind = note.values, note.kind
    if kind is NoteKind.TEXT:
        return note.text
    if kind is NoteKind.TOP_K_ORACLE:
        return TOP_K_ORACLE_NOTE
    if kind is NoteKind.UNBOUNDED_SUPPORT:
        return UNBOUNDED_SUPPORT_NOTE
    if kind is NoteKind.BASELINE_OUTSIDE_MARGIN and note.example is not None:
        return baseline_outside_margin_note(int(v["count"]), note.example, labels)
    if kind is NoteKind.BASELINE_ZERO_PROBABILITY and note.example is not None:
        return baseline_zero_probability_note(int(v["count"]), note.example, labels)
    if kind is NoteKind.NUMERICS_BOUNDARY:
        margin = "any finite" if v["margin_nats"] == float("inf") else f"{v['margin_nats']:g} nats of"
        declared = (f"{_numerics(v.get('baseline_dtype'), v.get('baseline_device'), 'baseline')}, "
                    f"{_numerics(v.get('candidate_dtype'), v.get('candidate_device'), 'candidate')}")
        return (f"numerics boundary: {v['candidate_rows']} of {v['candidate_total']} candidate rows and "
                f"{v['baseline_rows']} of {v['baseline_total']} baseline rows hold a token of oracle probability 0 "
                f"that a law within {margin} logit error admits (the engines declare different numerics: "
                f"{declared}); read as numerics at a processing cut, not as a hard failure, and scored 0 in the "
                f"row-score comparisons")
    if kind is NoteKind.OFFSET_READING:
        return _offset_line(v)
    if kind is NoteKind.PIT_LAW_BOUND:
        return (f"PIT-law bound {v['bound']:.3f} (worst at position {v['position']}: {v['n']} of {v['rows']} rows, "
                f"Kolmogorov {v['statistic']:.3f}); simultaneous over {v['positions']} positions at "
                f"alpha={v['alpha']:g}")
    if kind is NoteKind.SAMPLING_TIME:
        return (f"at this run's sampling speed ({v['baseline_tokens_per_s']:.0f} and {v['candidate_tokens_per_s']:.0f} "
                f"tokens/s), {v['required_n']} samples per engine need about {_duration(float(v['seconds']))} more "
                f"sampling (the oracle's scoring not included)")
    if kind is NoteKind.FIXED_SIZE_VERDICT:
        bound = "no TV bound" if v.get("tv_upper_bound") is None else f"TV upper bound {v['tv_upper_bound']:.4f}"
        return (f"the fixed-size analysis of the same rows would say {v['verdict']} ({bound}); it is shown for "
                "comparison only, since it is not valid after looking at the data along the way")
    if kind is NoteKind.INDEPENDENCE_UNTESTED:
        return _independence_untested_line(v)
    if kind is NoteKind.NUMERICS_DIFFER:
        return numerics_differ_hint(str(v["baseline"]), str(v["candidate"]), sequential=bool(v.get("sequential")))
    if kind is NoteKind.AGAINST_CONTROL:
        return CONTROL_NOTE
    if kind is NoteKind.NUMERICS_DRIFT:
        cases = tuple(c for c in str(v.get("cases") or "").split(",") if c)
        return drift_words(bool(v["drift_found"]), cases, str(v["baseline"]), str(v["candidate"]))
    if kind is NoteKind.SEQUENTIAL_MODE:
        k = v["tests"]
        return (f"sequential mode: {k} e-processes at level alpha/{k} each (e-value Bonferroni, valid at every look); "
                "TV bounds time-uniform over the look grid")
    return f"{kind.value}: {dict(v)}"  # a kind whose record lacks its example: its values as they are


def _independence_untested_line(v: Mapping[str, Any]) -> str:
    """An ``independence untested`` note in words: the test's limit when the rows are one call (a single forward
    batch of it has nothing independent to compare its rows with), else the pairs it lacked."""
    who = "the candidate's and the baseline's" if v["role"] == BOTH_ROLES else f"the {v['role']}'s"
    head = f"{who} row independence: not tested"
    calls, batch = v.get("sample_calls"), v.get("batch_size")
    if calls == 1 and batch is not None:
        rows, batch = int(v["rows"]), max(int(batch), 1)
        if rows <= batch:
            where = f"come from a single forward batch (batch_size {batch}) of a single sample() call"
        else:
            where = (f"come from one sample() call, {math.ceil(rows / batch)} forward batches of {batch} row(s), too "
                     "few in a batch to set a pair of one batch against a pair of two")
        each = " of each" if v["role"] == BOTH_ROLES else ""
        return (f"{head}: all {rows} rows{each} {where}, so there is nothing independent to compare them with; randomness "
                "they share cannot be seen, and every token-law test's p-value assumes they share none (rows from "
                "two or more calls, or more rows than batch_size, make it testable)")
    return (f"{head} ({v['rows']} rows in {v['calls']} call(s): no pair of rows of one call to set against a pair "
            "of rows of two calls)")


def note_lines(notes: Sequence[Note], labels: TokenLabels | None = None) -> tuple[str, ...]:
    """Every note in words, one line each (:func:`note_line`)."""
    return tuple(note_line(n, labels) for n in notes)


def settings_rerun_command(settings: Mapping[str, Any], samples: int, case: Any) -> str:
    """The ``speceq run`` command that reruns with ``samples`` per engine, from the run's settings.

    Stored samples are reused (same ``--out``), so only the missing ones are drawn. A case
    with its own ``samples`` in a cases file needs that entry raised instead; the command
    then says so. ``case``: anything with the case's ``case_id`` and ``samples`` (a :class:`speceq.inputs.cases.Case`).
    """
    args = ["speceq", "run"]
    if settings.get("cases_file"):
        args += ["--cases", str(settings["cases_file"])]
    for role in ("baseline", "candidate"):
        if role in settings:
            args += [f"--{role}", str(settings[role])]
        for k, v in dict(settings.get(f"{role}_options") or {}).items():
            args += [f"--{role}-option", f"{k}={v}"]
    if settings.get("oracle") is False:
        args.append("--no-oracle")
    else:
        if settings.get("oracle_model"):
            args += ["--oracle-model", str(settings["oracle_model"])]
        draft = settings.get("oracle_draft", "auto")
        if draft != "auto":
            args += ["--oracle-draft", "none" if draft is None else str(draft)]
        if not settings.get("oracle_share_prefix", True):
            args.append("--no-oracle-share-prefix")
        if settings.get("oracle_server"):
            args += ["--oracle-server", str(settings["oracle_server"])]
            top = settings.get("oracle_top_logprobs")
            args += ["--oracle-top-logprobs", "all" if top is None else str(top)]
        if settings.get("oracle_dtype", "float32") != "float32":
            args += ["--oracle-dtype", str(settings["oracle_dtype"])]
        if settings.get("certificate", "tv") != "tv":
            args += ["--certificate", str(settings["certificate"])]
    control = settings.get("numerics_control")
    if control:
        args += ["--numerics-control"] + ([] if control == "auto" else [str(control)])
        for k, v in dict(settings.get("control_options") or {}).items():
            args += ["--control-option", f"{k}={v}"]
        ratio = settings.get("control_ratio")
        if ratio is not None and ratio != CONTROL_RATIO:
            args += ["--control-ratio", f"{ratio:g}"]
    args += ["--samples", str(samples)]
    for key, flag in (("chunk_size", "--chunk-size"), ("seed", "--seed"), ("alpha", "--alpha"),
                      ("tolerance", "--tolerance"), ("numerics_tolerance", "--numerics-tolerance"),
                      ("near_tie_nats", "--near-tie-nats"), ("out_dir", "--out")):
        if settings.get(key) is not None:
            args += [flag, f"{settings[key]:g}" if isinstance(settings[key], float) else str(settings[key])]
    command = shlex.join(args)
    if case.samples:
        command += f"  # and set samples = {samples} for case {case.case_id!r} in the cases file"
    return command


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
