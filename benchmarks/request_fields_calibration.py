"""Per-test sizes of the primary tests on the laws the request-field and grammar oracle paths produce (issue #45).

A run compares its primary tests with Holm at about alpha / m ... alpha (2e-5 to 1e-3 at the defaults),
so each test's size is measured at those levels, on the laws of the oracle paths of issue #45: laws
processed by :func:`speceq.core.processing.process_logits` from the raw laws of the bundled target's
Markov model (:func:`request_fields_aa.bundled_model`, EOS probability 0.1 per step), given each row's
own history, in the four field families of :func:`request_fields_aa.field_cases` (penalties in the vllm
order, min_p, logit_bias with a banned token, the hf order), and masked by the grammar state of the
regex case of ``benchmarks/grammar_aa.py`` (llguidance on the bundled byte tokenizer,
:class:`GrammarMarkov`).

Two parts:

1. **The chi-square tests** (``chi2 prompt 0 position 0``, ``chi2 joint first 2``, ``chi2 length``; the
   first-token goodness of fit, a diagnostic): :func:`field_laws` are the laws those tests see --
   each case's first-token law, its joint law of the first two tokens (the second token's law given
   the row's first one: penalties and grammar state move it), its length law, and for the grammar
   the law at several grammar states -- run through :func:`tail_calibration.calibration_table`
   (R null draws per (test, law), vectorised and checked against the library on the first draws).
2. **The oracle comparisons** (``argmax``, ``log-likelihood``, ``PIT`` comparison of each case, and
   the run-level pooled comparisons over the cases): each replicate draws both engines' rows token by
   token from the processed law given each row's own history, scores them with the exact processed
   oracle (:class:`request_fields_aa.ProcessedMarkovOracle`), and runs the real
   :func:`speceq.stats.compare_oracle_scores`; the size of the sign-flip test given the pair
   magnitudes is computed exactly (:func:`speceq.stats.comparison.conditional_size`) and averaged over
   replicates (Rao-Blackwellised, so 2e-5 is resolved without rare-event counts), with 3 standard
   errors. The support comparison's flagged rows are counted (under an exact oracle none is flagged,
   so its size is 0). The candidate's randomized PIT values over every replicate are pooled and
   tested for uniformity (Kolmogorov-Smirnov): they are U(0, 1) under H0 whatever the history, so the
   PIT Anderson-Darling row of ``tail_calibration.py`` applies to these paths.

Usage::

    python benchmarks/request_fields_calibration.py --reps 100000 --part counts        # part 1
    python benchmarks/request_fields_calibration.py --outer 100 --part comparisons     # part 2
    python benchmarks/request_fields_calibration.py --reps 20000 --only "min-p"        # one case's laws, quicker
    python benchmarks/request_fields_calibration.py --reps 20000 --kinds joint --tests homogeneity   # the pair laws
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parent))
import request_fields_aa as aa  # noqa: E402
import tail_calibration as tc  # noqa: E402

from speceq import stats  # noqa: E402
from speceq.core.params import SamplingParams  # noqa: E402
from speceq.core.processing import TokenHistory, process_logits  # noqa: E402
from speceq.inputs.cases import Case  # noqa: E402
from speceq.models.grammar import Grammar, RowGrammar  # noqa: E402
from speceq.stats.comparison import conditional_size  # noqa: E402

#: Levels of the comparisons (computed sizes resolve the Holm first step).
LEVELS = (1e-3, 1e-4, 2e-5)
#: The grammar case of benchmarks/grammar_aa.py (bundled byte tokenizer, 8 new tokens).
GRAMMAR = {"regex": "[a-z_]{1,6}\\((self)?\\):"}
GRAMMAR_TOKENS = 8
#: Byte prefixes (after the prompt "def ") whose grammar states' laws are calibrated: the start (any
#: identifier character), inside an identifier (a character or the parenthesis), after "(" ("s" or ")").
GRAMMAR_STATES = ("", "te", "run(")
#: Rows drawn to estimate a length law (the chi-square length test's law).
LENGTH_ROWS = 50_000
ROWS = 1000
PARTS = ("counts", "comparisons")


class GrammarMarkov(aa.ProcessedMarkov):
    """A :class:`request_fields_aa.ProcessedMarkov` whose laws are also masked by each row's grammar state.

    The mask before a token is llguidance's (:class:`speceq.models.grammar.Grammar`) after the row's
    own earlier tokens, computed once per distinct prefix (a prefix's mask is a function of the
    prefix); a prefix the grammar rejects masks nothing after the rejected token, as the oracle does.
    """

    def __init__(self, initial: np.ndarray, transition: np.ndarray, eos: int, params: SamplingParams) -> None:
        super().__init__(initial, transition, eos)
        self.grammar = Grammar(params, self.vocab_size, eos)
        self._start = self.grammar.row()  # its matcher is copied for every new prefix (a copy costs ~1 us, a new one ~1 ms)
        self._masks: dict[bytes, np.ndarray] = {}

    def mask(self, prefix: np.ndarray) -> np.ndarray:
        """The tokens the grammar allows after the generated ``prefix`` (int64 ids; bool ``[V]``)."""
        key = prefix.astype(np.int64).tobytes()
        out = self._masks.get(key)
        if out is None:
            state = RowGrammar(self._start.matcher.deep_copy(), self._start.vocab_size, self._start.tokenizer_vocab,
                               self._start.eos_token_id)
            ids = [int(x) for x in prefix]
            out = state.mask().numpy().copy() if state.advance(ids) == len(ids) else np.ones(self.vocab_size, bool)
            self._masks[key] = out
        return out

    def laws(self, prompt: Sequence[int], tokens: np.ndarray, positions: np.ndarray, rows: np.ndarray,
             params: SamplingParams, *, generated_history: bool = True) -> np.ndarray:
        V, n = self.vocab_size, rows.size
        prev = tokens[rows, np.maximum(positions - 1, 0)]
        logits = torch.where(torch.from_numpy(positions > 0)[:, None], self.trans_logits[torch.from_numpy(prev)],
                             self.init_logits[None, :])
        allowed = np.stack([self.mask(tokens[r, :t]) for r, t in zip(rows, positions)])
        mask = torch.zeros((n, V), dtype=torch.bool)
        mask[:, torch.as_tensor(list(prompt), dtype=torch.long)] = True
        history = TokenHistory(prompt_mask=mask, output_counts=torch.zeros((n, V)), allowed=torch.from_numpy(allowed))
        probs = process_logits(logits, params, history=history).double().numpy()
        return probs / probs.sum(axis=1, keepdims=True)


def grammar_case() -> Case:
    """The structured case (prompt "def ", the regex of benchmarks/grammar_aa.py, 8 new tokens)."""
    from speceq.models import ByteTokenizer
    from speceq.models.prompts import DEFAULT_PROMPTS

    prompt = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0]))
    return Case(case_id="grammar-regex", prompt_ids=prompt,
                params=SamplingParams(max_new_tokens=GRAMMAR_TOKENS, tokenizer="bytes", structured_outputs=GRAMMAR))


def grammar_model() -> GrammarMarkov:
    """The bundled target's Markov model after "def " (no EOS boost: the grammar decides where EOS may come)."""
    from speceq.models import EOS_ID

    init, trans = tc.markov_model(1.0, eos_boost=0.0)
    return GrammarMarkov(init, trans, EOS_ID, grammar_case().params)


def worlds() -> list[tuple[aa.ProcessedMarkov, Case]]:
    """(model, case) of every oracle path: the four field families and the grammar case."""
    model = aa.bundled_model()
    return [(model, c) for c in aa.field_cases(model.initial)] + [(grammar_model(), grammar_case())]


def _law_at(model: aa.ProcessedMarkov, case: Case, prefix: Sequence[int]) -> np.ndarray:
    tokens = np.array([list(prefix) or [0]], dtype=np.int64)
    return model.laws(case.prompt_ids, tokens, np.array([len(prefix)]), np.zeros(1, dtype=np.int64), case.params)[0]


def joint_first_two(model: aa.ProcessedMarkov, case: Case, first: np.ndarray) -> np.ndarray:
    """The law of the first two tokens (x1, x2), x2's law given the row's own x1; a row ending at x1 = EOS is one label.

    Labels: x1 * V + x2 for the pairs, and one last label for (EOS, END) (as ``chi2 joint first 2`` counts them).
    """
    V = model.vocab_size
    heads = np.flatnonzero((first > 0) & (np.arange(V) != model.eos))
    tokens = np.zeros((heads.size, 2), dtype=np.int64)
    tokens[:, 0] = heads
    second = model.laws(case.prompt_ids, tokens, np.ones(heads.size, dtype=np.int64), np.arange(heads.size), case.params)
    pair = np.zeros((V, V))
    pair[heads] = first[heads, None] * second
    probs = np.r_[pair.ravel(), first[model.eos]]
    return probs / probs.sum()


def length_law(model: aa.ProcessedMarkov, case: Case, rows: int = LENGTH_ROWS, seed: int = 0) -> np.ndarray:
    """The row-length law of the case, estimated from ``rows`` rows drawn exactly (lengths 1 .. max_new_tokens)."""
    batch = model.sample(case.prompt_ids, case.params, rows, np.random.default_rng(seed))
    counts = np.bincount(batch.lengths, minlength=case.params.max_new_tokens + 1)[1:].astype(np.float64)
    return counts / counts.sum()


#: The kinds of laws of part 1, in the order they run: the laws of one position (first token, grammar states), lengths,
#: the joint laws of the first two tokens (the costly draws: tens of thousands of labels).
LAW_KINDS = ("token", "length", "joint")


def field_laws(only: Sequence[str] = (), kinds: Sequence[str] = LAW_KINDS) -> list[tc.Law]:
    """The laws the primary chi-square tests see on every oracle path, kind by kind (:data:`LAW_KINDS`).

    ``only``: case-id substrings to keep.
    """
    from speceq.models import ByteTokenizer

    out: dict[str, list[tc.Law]] = {k: [] for k in LAW_KINDS}
    tok = ByteTokenizer()
    for model, case in worlds():
        name = case.case_id
        if only and not any(w in name for w in only):
            continue
        first = _law_at(model, case, ())
        out["token"].append(tc.Law(f"{name}: first token ({int((first > 0).sum())} tokens of p > 0)", first))
        if isinstance(model, GrammarMarkov):
            for text in GRAMMAR_STATES[1:]:
                law = _law_at(model, case, tok.encode(text, add_bos=False))
                out["token"].append(tc.Law(f"{name}: after {text!r} ({int((law > 0).sum())} tokens of p > 0)", law))
        if "joint" in kinds:
            out["joint"].append(tc.Law(f"{name}: joint first 2 (pairs)", joint_first_two(model, case, first)))
        if "length" in kinds:
            rows = LENGTH_ROWS // 10 if isinstance(model, GrammarMarkov) else LENGTH_ROWS  # the grammar's masks cost
            out["length"].append(tc.Law(f"{name}: lengths (estimated from {rows} rows)", length_law(model, case, rows),
                                        kind="length"))
    return [law for k in LAW_KINDS if k in kinds for law in out[k]]


# ------------------------------------------------------------------------------- comparisons
def comparison_sizes(pairs: Sequence[tuple[aa.ProcessedMarkov, Case]], outer: int, rng: np.random.Generator,
                     rows: int = ROWS, levels: Sequence[float] = LEVELS,
                     progress: Callable[[str], None] | None = None,
                     candidate_wrong: str | None = None) -> dict[str, object]:
    """Rao-Blackwellised sizes of every oracle comparison, each case and pooled over the cases, at ``levels``.

    Returns ``sizes`` (test -> ``[outer, len(levels)]`` exact conditional sizes), ``pvalues`` (test ->
    the real test's p-values, one per replicate), ``flagged`` (rows with a token of oracle probability
    0, both engines, all replicates), ``pit`` (the candidate's randomized PIT values, all replicates).
    ``candidate_wrong``: the control of :mod:`request_fields_aa` (``"history"`` or ``"bias"``): the
    candidate draws from that wrong law, so the real p-values must be small. (The conditional sizes
    stay at the level whatever the draws: they measure the test given the magnitudes, valid under H0.)
    """
    levels = tuple(levels)
    sizes: dict[str, list[np.ndarray]] = {}
    pvalues: dict[str, list[float]] = {}
    flagged, pits = 0, []
    oracles = {id(m): aa.ProcessedMarkovOracle(m) for m, _ in pairs}
    strata = np.zeros(rows, dtype=np.int64)
    for r in range(outer):
        pooled: dict[str, list[np.ndarray]] = {}
        for model, case in pairs:
            oracle = oracles[id(model)]
            base = model.sample(case.prompt_ids, case.params, rows, rng)
            cand = model.sample(case.prompt_ids, aa.wrong_params(case.params, candidate_wrong), rows, rng,
                                generated_history=candidate_wrong != "history")
            sb = oracle.score([case.prompt_ids], base, case.params)
            sc = oracle.score([case.prompt_ids], cand, case.params)
            found = stats.compare_oracle_scores(sb, strata, sc, strata, rng=rng, level=levels[-1])
            for test in found.tests:
                d = found.differences[test.name.removesuffix(" comparison")]
                sizes.setdefault(f"{case.case_id}: {test.name}", []).append(conditional_size(d, levels))
                pvalues.setdefault(f"{case.case_id}: {test.name}", []).append(test.pvalue)
                pooled.setdefault(test.name, []).append(d)
            flagged += found.support.baseline_flagged + found.support.candidate_flagged
            pits.append(stats.randomized_pit(sc, rng))
        if len(pairs) > 1:
            for name, parts in pooled.items():
                res = stats.pooled_comparison(parts, name=f"pooled {name}")
                sizes.setdefault(f"pooled over the cases: {res.name}", []).append(
                    conditional_size(np.concatenate(parts), levels))
                pvalues.setdefault(f"pooled over the cases: {res.name}", []).append(res.pvalue)
        if progress is not None and (r + 1) % max(1, outer // 10) == 0:
            progress(f"comparisons: {r + 1}/{outer} replicates")
    return {"sizes": {k: np.array(v) for k, v in sizes.items()}, "pvalues": {k: np.array(v) for k, v in pvalues.items()},
            "flagged": flagged, "pit": np.concatenate(pits) if pits else np.zeros(0), "levels": levels}


def format_comparisons(result: dict[str, object]) -> str:
    """Markdown: each comparison's size / level (mean ± 3 SE over replicates) at every level, and the real p-values' count."""
    levels = result["levels"]
    head = " | ".join(f"size / level at {a:g} (± 3 SE)" for a in levels)
    lines = [f"| comparison | replicates | {head} | real p <= {levels[0]:g} | ok |",
             "|---|---|" + "---|" * len(levels) + "---|---|"]
    for name, s in result["sizes"].items():
        mean, se = s.mean(axis=0), s.std(axis=0, ddof=1) / math.sqrt(s.shape[0]) if s.shape[0] > 1 else np.zeros(len(levels))
        cells = " | ".join(f"{m / a:.4f} ± {3 * e / a:.4f}" for m, e, a in zip(mean, se, levels))
        ok = all(m - 3 * e <= a for m, e, a in zip(mean, se, levels))
        real = int((result["pvalues"][name] <= levels[0]).sum())
        lines.append(f"| {name} | {s.shape[0]} | {cells} | {real} | {'yes' if ok else 'NO'} |")
    pit = result["pit"]
    ks = sps.kstest(pit, "uniform") if pit.size else None
    lines.append(f"\nrows with a token of oracle probability 0 (both engines, every replicate): {result['flagged']}")
    if ks is not None:
        lines.append(f"candidate's randomized PIT values, all replicates: {pit.size} values, "
                     f"Kolmogorov-Smirnov D = {ks.statistic:.2e}, p = {ks.pvalue:.3g}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=100_000, help="null draws per (test, law). Default: %(default)s")
    ap.add_argument("--outer", type=int, default=100, help="replicates of the comparisons. Default: %(default)s")
    ap.add_argument("--part", choices=PARTS, action="append", help="run only this part (repeatable)")
    ap.add_argument("--only", default="", help="keep only the cases whose id contains one of these comma-separated substrings")
    ap.add_argument("--kinds", default=",".join(LAW_KINDS), help="kinds of laws of part 1. Default: %(default)s")
    ap.add_argument("--tests", default="homogeneity,gof", help="test families of part 1. Default: %(default)s")
    ap.add_argument("--pairs", default="3000+3000,3000+600", help="two-sample group sizes. Default: %(default)s")
    ap.add_argument("--levels", default="1e-3,1e-4,2e-5", help="levels of part 1. Default: %(default)s")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    parts = args.part or list(PARTS)
    only = [w.strip() for w in args.only.split(",") if w.strip()]
    t0 = time.time()

    def say(msg: str) -> None:
        print(f"[{time.time() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    if "counts" in parts:
        pairs = tuple(tuple(int(x) for x in pr.split("+")) for pr in args.pairs.split(",") if pr.strip())
        levels = tuple(float(x) for x in args.levels.split(","))
        print(tc.HEADER, flush=True)
        kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
        rows = tc.calibration_table(lambda: field_laws(only, kinds), reps=args.reps, seed=args.seed, levels=levels,
                                    progress=say, pairs=pairs, tests=tuple(args.tests.split(",")),
                                    emit=lambda block: print(tc.format_table(block, header=False), flush=True))
        bad = [r for r in rows if not r.ok]
        print(f"\n{len(rows) - len(bad)} of {len(rows)} cells within the one-sided 3-sigma band\n", flush=True)
    if "comparisons" in parts:
        chosen = [(m, c) for m, c in worlds() if not only or any(w in c.case_id for w in only)]
        fields = [(m, c) for m, c in chosen if c.params.structured_outputs is None]
        grammar = [(m, c) for m, c in chosen if c.params.structured_outputs is not None]
        rng = np.random.default_rng(np.random.SeedSequence(args.seed).spawn(2)[1])
        for group in (fields, grammar):
            if group:
                print(format_comparisons(comparison_sizes(group, args.outer, rng, progress=say)), flush=True)
    say("done")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
