"""The model-level kernel check: kernels that call the models themselves, checked as a block at any k.

A block-resampling or hierarchical kernel (HSD), or one that re-drafts a tree, queries the
models at prefixes off the draft path and is lossless only as a block: the first resampled
token alone is not target-distributed, so the chain contract cannot check it past k = 1. Here
speceq hands the kernel two exact models (:mod:`speceq.kernels.table_models`): the law at a prefix is
row ``row_of(prefix)`` of a small table built from the scenario's law families (target rows
from :data:`speceq.kernels.families.TARGET_FAMILIES`, each draft row derived from its target
row), so every prefix, on the path or off it, has a law speceq knows exactly.

The test. A kernel is lossless as a block when, for every position m and prefix s, given that
m is reached with prefix s, the token there follows p(. | s) (the stream law of iterated calls
forces P(prefix s at m, token x) = R_m(s) p(x | s); :mod:`speceq.kernels.laws`). The law depends
on s only through its row, so the family is the set of (template, position, row) *cells*: the
tokens emitted at position m after a prefix of row r follow target row r, a multinomial given
the cell's count, tested with the exact-valid chain goodness of fit
(:func:`speceq.kernels.gof.chain_gof`). Cells are planned before any kernel call: a cell is
tested when its expected count under the target's own stream, every position reached
(simulated from a fixed seed, :data:`PLAN_STREAMS` streams per template), is at least
:data:`~speceq.kernels.law_tests.MIN_PLANNED`; Holm runs over every planned cell. There is no
accepted-length law (method ``lossless``): how many tokens a call emits is the kernel's choice.

Drafts are drawn inside the kernel (with the request's generator, seeds or uniforms): the test
is on the law of what the kernel emits. That is also the recipe for a package whose step samples
its own drafts: hand it ``request.target`` and ``request.draft`` as its models.

Invariants (hard failures, per template): the call raised; the output's shape; an id outside
[0, V); a request that emitted nothing; a token after the first -1 or more than k + 1 tokens;
a token the target gives probability 0 at its prefix. Unreadable rows (shape, ids, padding,
no token, raised) are left out of the tests, and a test that lost rows is never a law finding
(:mod:`speceq.kernels.diagnosis`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from speceq.errors import EngineError
from speceq.kernels.check_layout import Layout
from speceq.kernels.check_result import ScenarioSummary
from speceq.kernels.contract import Kernel, KernelSpec, ModelRequest, Outcome
from speceq.kernels.diagnosis import Finding
from speceq.kernels.families import draft_law, target_logits
from speceq.kernels.gof import chain_gof
from speceq.kernels.kernel_calls import RowBuffers, scenario_loop, seeds62
from speceq.kernels.law_tests import MIN_PLANNED, KernelTest, tv_lower_bound_split
from speceq.kernels.outcomes import Violation, as_token_array, merge
from speceq.kernels.table_models import TableModel, extend_hash, hash_rows, prefix_hashes, sample_tokens
from speceq.kernels.target_processing import RequestParams, processed_law

#: Default requests per template, and the most requests in one kernel call.
DEFAULT_REPLICATES = 2000
MAX_BATCH = 512
#: Target streams simulated per template to plan the cells (before any kernel call).
PLAN_STREAMS = 20_000
#: The default rows: (target family, draft relation), one row each.
DEFAULT_ROWS = (("peaked", "flat"), ("zipf", "overlap"), ("flat", "sharp"), ("sparse", "disjoint"),
                ("near-tie", "one-hot"), ("floor", "overlap"))
DEFAULT_VOCAB = 8
PROMPT_LENGTH = 4


@dataclass(frozen=True)
class ModelTemplate:
    """One kind of request: a prompt (its row fixes the law of the first token)."""

    name: str
    prompt: tuple[int, ...]
    features: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ModelScenario:
    """Exact target and draft tables, templates, block size k, replicates.

    target32 / draft32: the float32 ``[R, V]`` rows the models hand out (draft row r derived from
    target row r); target_laws / draft_laws: their float64 laws (what a correct kernel samples
    from). row_features[r]: the family and draft relation of row r (what the diagnosis groups by).
    """

    name: str
    k: int
    target32: np.ndarray
    draft32: np.ndarray
    target_laws: np.ndarray
    draft_laws: np.ndarray
    row_features: tuple[Mapping[str, str], ...]
    templates: tuple[ModelTemplate, ...]
    replicates: int
    salt: int = 0

    @property
    def vocab_size(self) -> int:
        return int(self.target_laws.shape[1])

    @property
    def rows(self) -> int:
        return int(self.target_laws.shape[0])

    def models(self) -> tuple[TableModel, TableModel]:
        """A fresh (target, draft) pair (their call counts start at 0)."""
        return (TableModel(self.target32, salt=self.salt, name=f"{self.name}.target"),
                TableModel(self.draft32, salt=self.salt, name=f"{self.name}.draft"))


def model_scenario(name: str, vocab: int, k: int, rows: Sequence[tuple[str, str]], rng: np.random.Generator, *,
                   templates: int = 3, replicates: int = DEFAULT_REPLICATES,
                   prompt_length: int = PROMPT_LENGTH) -> ModelScenario:
    """A scenario whose row r has target family ``rows[r][0]`` and draft relation ``rows[r][1]``.

    Templates are prompts whose first-token rows differ (as far as there are rows).
    """
    target, draft, feats = [], [], []
    for family, relation in rows:
        p = processed_law(target_logits(family, vocab, rng), RequestParams())
        target.append(p)
        draft.append(draft_law(relation, p, rng))
        feats.append({"law": family, "draft": relation})
    salt = int(rng.integers(1, 1 << 30))
    chosen: list[ModelTemplate] = []
    seen: set[int] = set()
    for _ in range(1000):
        if len(chosen) == templates:
            break
        prompt = tuple(int(x) for x in rng.integers(0, vocab, prompt_length))
        row = int(hash_rows(prefix_hashes(np.array([prompt]), salt), len(rows))[0])
        if row in seen and len(seen) < min(templates, len(rows)):
            continue
        seen.add(row)
        chosen.append(ModelTemplate(f"prompt-{len(chosen)}", prompt, {"vocab": str(vocab), "k": str(k),
                                                                      "first row": str(row)}))
    tables = []
    for laws in (np.stack(target), np.stack(draft)):
        t32 = (laws / laws.sum(axis=1, keepdims=True)).astype(np.float32)
        t32.setflags(write=False)
        tables.append((t32, TableModel(t32, salt=salt).laws64))  # the laws of the rows the models hand out
    (t32, tl), (d32, dl) = tables
    return ModelScenario(name=name, k=k, target32=t32, draft32=d32, target_laws=tl, draft_laws=dl,
                         row_features=tuple(feats), templates=tuple(chosen), replicates=replicates, salt=salt)


def default_model_scenarios(k: int, *, scale: float = 1.0, seed: int = 0) -> list[ModelScenario]:
    """The default model-level check at block size k: V = 8, one row per (family, draft relation) pair."""
    rng = np.random.default_rng([seed, 48])
    reps = max(50, int(round(DEFAULT_REPLICATES * scale)))
    return [model_scenario(f"rows-v{DEFAULT_VOCAB}-k{k}", DEFAULT_VOCAB, k, DEFAULT_ROWS, rng, replicates=reps)]


@dataclass(frozen=True, slots=True)
class PlannedCell:
    """One planned test: tokens at ``position`` after a prefix of ``row`` follow target row ``row``."""

    template: ModelTemplate
    position: int
    row: int
    expected_n: float


def plan_cells(scn: ModelScenario, *, seed: int = 0) -> list[PlannedCell]:
    """The cells of a scenario, from its laws and replicates only (target streams simulated, fixed seed)."""
    out: list[PlannedCell] = []
    cdf = np.cumsum(scn.target_laws, axis=1)
    for ti, tpl in enumerate(scn.templates):
        rng = np.random.default_rng([seed, 4801, ti])
        h = prefix_hashes(np.array([tpl.prompt]), scn.salt).repeat(PLAN_STREAMS)
        reach = np.zeros((scn.k + 1, scn.rows))
        for m in range(scn.k + 1):
            rows = hash_rows(h, scn.rows)
            reach[m] = np.bincount(rows, minlength=scn.rows) / PLAN_STREAMS
            u = rng.random(PLAN_STREAMS) * cdf[rows, -1]
            tok = (cdf[rows] <= u[:, None]).sum(axis=1)
            h = extend_hash(h, np.minimum(tok, scn.vocab_size - 1))
        for m in range(scn.k + 1):
            for r in range(scn.rows):
                expected = scn.replicates * reach[m, r]
                if expected >= MIN_PLANNED:
                    out.append(PlannedCell(tpl, m, r, float(expected)))
    return out


@dataclass
class ModelRecord:
    """What a scenario's requests produced: per template, counts ``[k + 1, R, V]`` of tokens per cell."""

    scenario: ModelScenario
    counts: dict[str, np.ndarray]
    read: dict[str, int]
    violations: tuple[Violation, ...]
    calls: int
    requests: int
    kernel_seconds: float
    harness_seconds: float
    target_calls: int = 0
    target_prefixes: int = 0
    draft_calls: int = 0
    draft_prefixes: int = 0


def _read_block(tokens: np.ndarray, prompts: np.ndarray, scn: ModelScenario, part: np.ndarray,
                found: dict[tuple[str, str], list], counts: np.ndarray, read: np.ndarray) -> None:
    """Check a call's output rows and add the readable ones to their cells' counts.

    part: each row's template index; counts: ``[templates, k + 1, R, V]``; read: readable rows per template.
    """
    names = [scn.templates[int(t)].name for t in part]
    B, W = tokens.shape
    V, k = scn.vocab_size, scn.k
    width = min(W, k + 2)
    tok = np.full((B, k + 2), -1, dtype=np.int64)
    tok[:, :width] = tokens[:, :width]
    bad_id = ((tokens < -1) | (tokens >= V)).any(axis=1)
    pad = tokens < 0
    first_pad = np.where(pad.any(axis=1), pad.argmax(axis=1), W)
    after = np.zeros(B, dtype=bool)
    if W:
        cols = np.arange(W)[None, :]
        after = ((cols > first_pad[:, None]) & (tokens >= 0)).any(axis=1)
    too_long = first_pad > k + 1
    empty = first_pad == 0

    def flag(kind: str, mask: np.ndarray, text) -> None:  # noqa: ANN001 - a row -> str function
        for r in np.flatnonzero(mask):
            key = (kind, f"{scn.name}/{names[r]}")
            entry = found.setdefault(key, [0, text(r)])
            entry[0] += 1

    def row_text(r: int) -> str:
        return f"request {r} of a call, prompt {prompts[r].tolist()}: emitted {tokens[r, : min(W, k + 3)].tolist()}"

    flag("id-range", bad_id, row_text)
    flag("no-token", empty & ~bad_id, row_text)
    flag("padding", (after | too_long) & ~bad_id & ~empty, row_text)
    ok = ~(bad_id | empty | after | too_long)
    lengths = np.where(ok, np.minimum(first_pad, k + 1), -1)
    h = prefix_hashes(prompts, scn.salt)
    zero = np.zeros(B, dtype=bool)
    for m in range(k + 1):
        live = lengths > m
        if not live.any():
            break
        rows = hash_rows(h, scn.rows)
        x = np.where(live, tok[:, m], 0)
        zero |= live & (scn.target_laws[rows, x] == 0)
        np.add.at(counts, (part[live], m, rows[live], x[live]), 1)
        h = extend_hash(h, x)
    flag("zero-probability", zero, row_text)
    np.add.at(read, part[ok], 1)


def collect_models(kern: Kernel, scenarios: Sequence[ModelScenario], *, seed: int = 0,
                   device: str | torch.device = "cpu") -> list[ModelRecord]:
    """Call the kernel on every scenario's requests (templates shuffled together, :data:`MAX_BATCH` a call)."""
    dev = torch.device(device)

    def one(scn: ModelScenario, rng: np.random.Generator, _buffers: RowBuffers) -> ModelRecord:
        return _collect_model_scenario(kern, scn, rng, dev)

    return scenario_loop(scenarios, one, lambda si: np.random.default_rng([seed, 4802, si]))


def _collect_model_scenario(kern: Kernel, scn: ModelScenario, rng: np.random.Generator,
                            dev: torch.device) -> ModelRecord:
    """One scenario of :func:`collect_models` (the models hand out no reused buffers: no redo)."""
    target, draft = scn.models()
    slots = rng.permutation(np.repeat(np.arange(len(scn.templates)), scn.replicates))
    counts = np.zeros((len(scn.templates), scn.k + 1, scn.rows, scn.vocab_size), dtype=np.int64)
    read = np.zeros(len(scn.templates), dtype=np.int64)
    found: dict[tuple[str, str], list] = {}
    calls = 0
    raised = 0
    kernel_s = 0.0
    t_start = time.perf_counter()
    for begin in range(0, slots.size, MAX_BATCH):
        part = slots[begin: begin + MAX_BATCH]
        names = [scn.templates[int(t)].name for t in part]
        prompts = np.array([scn.templates[int(t)].prompt for t in part], dtype=np.int64)
        seeds = seeds62(rng, part.size)
        gen = torch.Generator(device=dev)
        gen.manual_seed(int(rng.integers(0, 2**62)))
        uniforms = None
        if kern.spec.uniforms:
            uniforms = torch.from_numpy(rng.random((part.size, 4 * (scn.k + 1)))).to(dev)
        request = ModelRequest(vocab_size=scn.vocab_size, k=scn.k, prompts=torch.from_numpy(prompts).to(dev),
                               target=target, draft=draft, seeds=torch.tensor(seeds, dtype=torch.int64, device=dev),
                               generator=gen, uniforms=uniforms)
        calls += 1
        t0 = time.perf_counter()
        try:
            with torch.inference_mode():
                outcome: Outcome = kern(request)
            tokens = as_token_array(outcome.tokens, part.size, f"{kern.name} on {scn.name}")
        except ValueError as exc:  # the output's shape or dtype
            kernel_s += time.perf_counter() - t0
            _flag_all(found, "shape", scn, names, f"{exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - a kernel may raise anything; every request of the call is lost
            kernel_s += time.perf_counter() - t0
            raised += 1
            _flag_all(found, "raised", scn, names, f"{type(exc).__name__}: {exc}")
            continue
        kernel_s += time.perf_counter() - t0
        _read_block(tokens, prompts, scn, part, found, counts, read)
    if raised == calls:
        example = next(iter(found.values()))[1]
        raise EngineError(f"the kernel raised on every call of {scn.name}: {example}", engine=kern.name)
    violations = merge([Violation(kind, tpl, n, ex) for (kind, tpl), (n, ex) in found.items()])
    total = time.perf_counter() - t_start
    return ModelRecord(scn, {t.name: counts[i] for i, t in enumerate(scn.templates)},
                       {t.name: int(read[i]) for i, t in enumerate(scn.templates)}, violations, calls,
                       int(slots.size), kernel_s, total - kernel_s, target.calls, target.prefixes, draft.calls,
                       draft.prefixes)


def _flag_all(found: dict[tuple[str, str], list], kind: str, scn: ModelScenario, names: list[str], text: str) -> None:
    for name in names:
        entry = found.setdefault((kind, f"{scn.name}/{name}"), [0, text])
        entry[0] += 1


def cell_tests(records: Sequence[ModelRecord], *, seed: int, tv_alpha: float, lossy: bool) -> list[KernelTest]:
    """Every planned cell of every scenario, with raw p-values (Holm is applied by the verdict rule)."""
    out: list[KernelTest] = []
    for rec in records:
        scn = rec.scenario
        for cell in plan_cells(scn, seed=seed):
            tpl = cell.template
            c = rec.counts[tpl.name][cell.position, cell.row]
            law = scn.target_laws[cell.row]
            features = {**tpl.features, **scn.row_features[cell.row], "position": str(cell.position),
                        "row": str(cell.row)}
            common = dict(scenario=scn.name, template=tpl.name, component="cell", position=cell.position,
                          expected_n=cell.expected_n, features=features, requests=scn.replicates,
                          unread=scn.replicates - rec.read[tpl.name])
            n = int(c.sum())
            if n == 0:
                out.append(KernelTest(n=0, pvalue=1.0, statistic=0.0, tv=0.0, tv_upper=1.0,
                                      tv_lower=0.0 if lossy else None, support_violations=0, **common))
                continue
            res = chain_gof(c, law, tv_alpha=tv_alpha)
            lower = tv_lower_bound_split(np.repeat(np.arange(law.size), c), law, tv_alpha) if lossy else None
            out.append(KernelTest(n=res.n, pvalue=res.pvalue, statistic=res.statistic, tv=res.tv,
                                  tv_upper=res.tv_upper_bound, tv_lower=lower, support_violations=res.support_violations,
                                  support=int(np.count_nonzero(law)), **common))
    return out


def planned_model_tests(scenarios: Sequence[ModelScenario], *, seed: int = 0) -> int:
    """How many cells the check tests (known before any kernel call)."""
    return sum(len(plan_cells(s, seed=seed)) for s in scenarios)


class ModelLayout(Layout):
    """The model layout's part of the check skeleton (:class:`~speceq.kernels.check_layout.Layout`): cell tests."""

    scenario_type = ModelScenario

    def default_scenarios(self, spec: KernelSpec, *, scale: float, seed: int) -> list[ModelScenario]:
        return default_model_scenarios(spec.max_draft, scale=scale, seed=seed)  # k is the spec's max_draft

    def planned(self, scenarios: Sequence[ModelScenario], spec: KernelSpec, *, seed: int) -> int:
        return planned_model_tests(scenarios, seed=seed)

    def collect(self, kern: Kernel, scenarios: Sequence[ModelScenario], *, seed: int,
                device: str | torch.device) -> list[ModelRecord]:
        return collect_models(kern, scenarios, seed=seed, device=device)

    def tests(self, records: Sequence[ModelRecord], spec: KernelSpec, *, seed: int,
              tv_alpha: float) -> list[KernelTest]:
        return cell_tests(records, seed=seed, tv_alpha=tv_alpha, lossy=spec.lossy)

    def violations(self, records: Sequence[ModelRecord]) -> tuple[Violation, ...]:
        return merge([v for r in records for v in r.violations])

    def summaries(self, records: Sequence[ModelRecord]) -> list[ScenarioSummary]:
        return [ScenarioSummary(r.scenario.name, r.scenario.vocab_size, len(r.scenario.templates), r.requests,
                                r.calls, r.kernel_seconds, r.harness_seconds, ()) for r in records]

    def notes(self, records: Sequence[ModelRecord]) -> list[Finding]:
        return _model_calls(records)


def _model_calls(records: Sequence[ModelRecord]) -> list[Finding]:
    """A note per scenario: how often the kernel called each model, at how many prefixes (not a failure)."""
    out = []
    for r in records:
        text = (f"{r.scenario.name}: the kernel called the target {r.target_calls} times at {r.target_prefixes} "
                f"prefixes and the draft {r.draft_calls} times at {r.draft_prefixes} prefixes over {r.requests} "
                f"requests ({r.target_prefixes / max(r.requests, 1):.1f} target prefixes per request)")
        out.append(Finding(component="model-calls", text=text, failed=0, tested=r.requests, tv=None, tv_upper=None,
                           predicates=(), where=(r.scenario.name,)))
    return out


#: The model layout's strategy (stateless; one instance serves every check).
MODEL = ModelLayout()


# --- kernels written against the models: speceq's reference and a mutant ---------------------------------

def chain_step(request: ModelRequest, *, residual: bool = True) -> torch.Tensor:
    """Standard speculative sampling against the models: k drafts, one target block call, the residual.

    residual=False draws the token after a rejection from the target row instead of (p - q)+
    (the ``residual-from-target`` mutant: shifted). Returns ``[batch, k + 1]``, -1 padded.
    """
    g = request.generator
    prompts = request.prompts
    B, k = request.batch_size, request.k
    drafts = torch.empty(B, k, dtype=torch.int64, device=prompts.device)
    q_rows = []
    prefix = prompts
    for j in range(k):
        q = request.draft(prefix)
        q_rows.append(q)
        drafts[:, j] = sample_tokens(q, g)
        prefix = torch.cat([prefix, drafts[:, j: j + 1]], dim=1)
    p = request.target.block(prompts, drafts).to(torch.float64)  # [B, k + 1, V]
    q = torch.stack(q_rows, dim=1).to(torch.float64) if k else p[:, :0]
    pd = p[:, :k].gather(2, drafts[..., None]).squeeze(-1)
    qd = q.gather(2, drafts[..., None]).squeeze(-1)
    u = torch.rand(B, k, generator=g, dtype=torch.float64, device=prompts.device)
    accept = u * qd < pd  # u < p/q
    L = torch.where(accept.all(dim=1), k, (~accept).to(torch.int64).argmax(dim=1))
    rows = torch.arange(B, device=prompts.device)
    p_at = p[rows, L]
    if residual:
        q_at = torch.cat([q, torch.zeros_like(p[:, :1])], dim=1)[rows, L]
        law = torch.where((L < k)[:, None], (p_at - q_at).clamp_min(0.0), p_at)
    else:
        law = p_at
    last = sample_tokens(law, g)
    out = torch.full((B, k + 1), -1, dtype=torch.int64, device=prompts.device)
    keep = torch.arange(k + 1, device=prompts.device)[None, :] < L[:, None]
    out[:, :k][keep[:, :k]] = drafts[keep[:, :k]]
    out[rows, L] = last
    return out


def reference_model_kernel() -> Kernel:
    """Speceq's chain kernel written against the models (:func:`chain_step`): lossless, ``equivalent``."""
    return Kernel(lambda r: Outcome(tokens=chain_step(r)), KernelSpec(layout="model", method="lossless",
                                                                      name="reference:model"))


def residual_from_target_kernel() -> Kernel:
    """The chain kernel drawing the token after a rejection from p instead of (p - q)+: ``shifted``."""
    return Kernel(lambda r: Outcome(tokens=chain_step(r, residual=False)),
                  KernelSpec(layout="model", method="lossless", name="model:residual-from-target"))
