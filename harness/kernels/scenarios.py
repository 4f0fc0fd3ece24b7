"""Scenarios: batches of request templates whose exact output laws are known.

A :class:`Template` is one kind of request: its per-position target logits and parameters,
the processed target law at every position (draft positions then the bonus row), and the
draft law speceq draws the draft tokens from (handed to the kernel unless it declares the
one-hot path). A :class:`Scenario` is one vocabulary size and a set of templates mixed in every
kernel call (shuffled, so per-request parameters, draft counts and greedy rows sit next to
each other), each replicated ``replicates`` times over the calls. :func:`default_scenarios`
builds the default check for a :class:`~speceq.kernels.contract.KernelSpec`: it uses only what
the kernel takes (parameters, greedy rows, injected uniforms, -1 padding) and says in
``Scenario.skipped`` what it could not build.

Boundary templates (``boundary`` "u0": every injected uniform 0; "u1": every injected uniform
1 - 2^-53; "nan": the first target row is NaN, for kernels that promise valid output then) break
the laws on purpose; their requests are checked by the invariants only (ids < vocab, no token
of probability 0, -1 padding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from speceq.kernels.contract import KernelSpec
from speceq.kernels.families import as_float32_law, draft_law, target_logits
from speceq.kernels.target_processing import (
    RequestParams,
    cut_margins,
    min_p_midpoint,
    nucleus_midpoint,
    processed_law,
)

#: Smallest gap (nats) kept at a top-k cut or between the two largest logits of a greedy row.
MIN_CUT_GAP = 1e-3
#: Smallest distance of top_p from a cumulative mass (the cut is placed halfway between two).
MIN_TOP_P_MARGIN = 5e-4
#: Default replicates of each template in the small-vocabulary scenarios.
DEFAULT_REPLICATES = 2000
#: Most logits cells (rows x vocab) in one kernel call: bounds the memory of a call at large V.
MAX_CELLS_PER_CALL = 1 << 24
ONE_MINUS_ULP = float(np.nextafter(1.0, 0.0))
#: Most requests in one kernel call, whatever the vocabulary.
MAX_REQUESTS_PER_CALL = 4096


def requests_per_call(vocab: int, rows_per_request: int, templates: int) -> int:
    """Requests of each template in one call that mixes ``templates`` templates equally.

    rows_per_request: every row of ``vocab`` values one request sends (target rows, plus draft
    rows when the kernel is handed the draft law). A call of ``templates * result`` requests
    then holds at most :data:`MAX_CELLS_PER_CALL` such cells (64 MiB of float32) and at most
    :data:`MAX_REQUESTS_PER_CALL` requests, unless one request of every template is already
    more (each call holds every template at least once).
    """
    most = min(MAX_REQUESTS_PER_CALL, MAX_CELLS_PER_CALL // max(int(vocab) * int(rows_per_request), 1))
    return max(1, most // max(int(templates), 1))


@dataclass(frozen=True, eq=False)
class Template:
    """One kind of request; see the module docstring. Arrays are read-only.

    logits: float32 ``[n + 1, V]`` target logits (rows 0..n-1 at the draft positions, row n the
    bonus row); law: float64 ``[n + 1, V]`` the processed law a correct kernel samples from;
    draft32: float32 ``[n, V]`` the draft law as handed in; draft: float64 ``[n, V]`` the law the
    draft tokens are drawn from (``draft32`` renormalised). features: what the diagnosis groups
    by (law family, draft relation, parameters, draft count, ...).
    """

    name: str
    logits: np.ndarray
    params: RequestParams
    law: np.ndarray
    draft32: np.ndarray
    draft: np.ndarray
    features: Mapping[str, str]
    boundary: str = ""

    @property
    def n_draft(self) -> int:
        return int(self.draft.shape[0])

    @property
    def vocab_size(self) -> int:
        return int(self.logits.shape[1])

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    @property
    def statistical(self) -> bool:
        """Whether the template's outputs enter the statistical tests (not greedy, not boundary)."""
        return not self.greedy and not self.boundary


@dataclass(frozen=True)
class Scenario:
    """Templates sharing one vocabulary, mixed in every call; ``replicates`` draws of each."""

    name: str
    vocab_size: int
    templates: tuple[Template, ...]
    replicates: int
    boundary_replicates: int = 64
    skipped: tuple[str, ...] = ()

    def copies(self, template: Template) -> int:
        return self.boundary_replicates if template.boundary else self.replicates

    @property
    def rows_per_request(self) -> float:
        """Mean target rows (drafts + bonus) of one request over the templates."""
        return float(np.mean([t.n_draft + 1 for t in self.templates]))

    @property
    def draft_rows_per_request(self) -> float:
        """Mean draft rows of one request over the templates (what a kernel handed draft probs also gets)."""
        return float(np.mean([t.n_draft for t in self.templates]))

    def calls_batch(self, rows_per_request: float | None = None) -> int:
        """Requests per call: every template at least once, at most MAX_CELLS_PER_CALL logits cells.

        rows_per_request: the rows of V values a request sends (default :attr:`rows_per_request`, the
        mean template's target rows; the ragged layout adds :attr:`draft_rows_per_request` when the
        kernel takes draft probs, the padded layout passes its fixed k + 1 target and k draft rows).
        Every call holds the templates in equal numbers (fewer once some are done), so its cells
        are at most this many requests times the mean.
        """
        rows = self.rows_per_request if rows_per_request is None else float(rows_per_request)
        per_request = rows * self.vocab_size
        most = max(len(self.templates), int(MAX_CELLS_PER_CALL // max(per_request, 1.0)))
        return int(min(most, 4096))


@dataclass(frozen=True)
class TemplateSpec:
    """A recipe for one template (what :func:`build_template` makes)."""

    family: str
    relation: str
    n_draft: int
    params: RequestParams = field(default_factory=RequestParams)
    boundary: str = ""
    per_position: bool = True  # a fresh target row per position (else every row is the same law)


def build_template(spec: TemplateSpec, vocab: int, rng: np.random.Generator, *, name: str = "",
                   k_max: int | None = None, attempts: int = 50) -> Template:
    """A template from a recipe, redrawn until every cut is unambiguous (:data:`MIN_CUT_GAP`)."""
    for _ in range(attempts):
        rows = [target_logits(spec.family, vocab, rng) for _ in range(spec.n_draft + 1)]
        if not spec.per_position:
            rows = [rows[0]] * (spec.n_draft + 1)
        params = spec.params
        if params.min_p > 0.0 and not params.greedy:
            params = replace(params, min_p=min_p_midpoint(rows[0], params, params.min_p))
        if params.top_p < 1.0:
            params = replace(params, top_p=nucleus_midpoint(rows[0], params, params.top_p))
        if not all(_cuts_ok(r, params) for r in rows):
            continue
        logits = np.stack(rows).astype(np.float32)
        law = np.stack([processed_law(r, params) for r in rows])
        if params.greedy:
            base = np.stack([processed_law(r, RequestParams()) for r in rows[:-1]]) if spec.n_draft else law[:0]
        else:
            base = law[:-1]
        drafts = [draft_law(spec.relation, base[i], rng) for i in range(spec.n_draft)]
        if spec.boundary == "nan":  # the first target row is NaN (its law is undefined: NaN too)
            logits[0] = np.nan
            law[0] = np.nan
        pairs = [as_float32_law(q) for q in drafts]
        draft32 = np.stack([a for a, _ in pairs]) if pairs else np.zeros((0, vocab), np.float32)
        draft = np.stack([b for _, b in pairs]) if pairs else np.zeros((0, vocab))
        features = {
            "vocab": str(vocab),
            "law": spec.family,
            "draft": spec.relation,
            "drafts": str(spec.n_draft),
            "ragged": "yes" if k_max is not None and spec.n_draft < k_max else "no",
            "temperature": "greedy" if params.greedy else f"{params.temperature:g}",
            "top_k": str(params.top_k) if params.top_k else "off",
            "top_p": "on" if params.top_p < 1.0 else "off",
            "min_p": "on" if params.min_p > 0.0 else "off",
        }
        if spec.boundary:
            features["boundary"] = spec.boundary
        for arr in (logits, law, draft32, draft):
            arr.setflags(write=False)
        label = name or f"{spec.family}/{spec.relation}/k{spec.n_draft}/{params.label()}"
        return Template(name=label, logits=logits, params=params, law=law, draft32=draft32, draft=draft,
                        features=features, boundary=spec.boundary)
    raise ValueError(f"could not build an unambiguous template for {spec} at V = {vocab}")


def template_from_arrays(name: str, logits: np.ndarray, draft: np.ndarray, params: RequestParams | None = None,
                         features: Mapping[str, str] | None = None, boundary: str = "") -> Template:
    """A template from explicit target logits ``[n + 1, V]`` and draft laws ``[n, V]`` (rows renormalised)."""
    params = params or RequestParams()
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    law = np.stack([processed_law(r, params) for r in logits])
    pairs = [as_float32_law(np.asarray(q, dtype=np.float64) / np.sum(q)) for q in draft]
    vocab = logits.shape[1]
    draft32 = np.stack([a for a, _ in pairs]) if pairs else np.zeros((0, vocab), np.float32)
    q = np.stack([b for _, b in pairs]) if pairs else np.zeros((0, vocab))
    for arr in (logits, law, draft32, q):
        arr.setflags(write=False)
    feats = {"vocab": str(vocab), "drafts": str(len(pairs)), **(features or {})}
    return Template(name=name, logits=logits, params=params, law=law, draft32=draft32, draft=q, features=feats,
                    boundary=boundary)


def _cuts_ok(row: np.ndarray, params: RequestParams) -> bool:
    margins = cut_margins(row, params)
    return (margins.get("top_k", np.inf) >= MIN_CUT_GAP and margins.get("argmax", np.inf) >= MIN_CUT_GAP
            and margins.get("min_p", np.inf) >= MIN_CUT_GAP and margins.get("top_p", np.inf) >= MIN_TOP_P_MARGIN)


def scenario(name: str, vocab: int, specs: Sequence[TemplateSpec], rng: np.random.Generator, *,
             replicates: int, k_max: int, boundary_replicates: int = 64, skipped: Sequence[str] = ()) -> Scenario:
    templates = tuple(build_template(s, vocab, rng, k_max=k_max) for s in specs)
    names = [t.name for t in templates]
    if len(set(names)) != len(names):
        templates = tuple(Template(**{**t.__dict__, "name": f"{t.name}#{i}"}) for i, t in enumerate(templates))
    return Scenario(name=name, vocab_size=vocab, templates=templates, replicates=replicates,
                    boundary_replicates=boundary_replicates, skipped=tuple(skipped))


def _ks(spec: KernelSpec, wanted: Sequence[int]) -> list[int]:
    """Draft counts for a layout: padded kernels without padding need k everywhere; single needs k >= 1."""
    k = spec.max_draft
    out = []
    for n in wanted:
        n = min(n, k)
        if spec.layout == "padded" and not spec.padding:
            n = k
        if spec.layout == "single":
            n = max(n, 1)
        out.append(n)
    return out


def default_scenarios(spec: KernelSpec, *, scale: float = 1.0, seed: int = 0) -> list[Scenario]:
    """The default chain check for ``spec`` (see the module docstring); ``scale`` multiplies the replicates."""
    if spec.layout == "tree":
        raise ValueError("tree kernels use speceq.kernels.trees.default_tree_scenarios")
    rng = np.random.default_rng(seed)
    k = spec.max_draft
    reps = max(50, int(round(DEFAULT_REPLICATES * scale)))
    plain = RequestParams()
    out: list[Scenario] = []

    # 1. a small odd vocabulary with every law, draft relation and draft count mixed in each call
    recipes = [
        ("zipf", "overlap", k), ("peaked", "sharp", k - 1), ("flat", "flat", 1), ("sparse", "disjoint", k),
        ("sparse", "overlap", 0), ("near-tie", "equal", k), ("zipf", "one-hot", 2), ("floor", "overlap", k),
    ]
    counts = _ks(spec, [n for _, _, n in recipes])
    mixed = [TemplateSpec(f, r, n, plain) for (f, r, _), n in zip(recipes, counts)]
    skipped: list[str] = []
    if spec.params:
        with_params = [
            ("zipf", "overlap", k, RequestParams(0.7)), ("zipf", "overlap", 1, RequestParams(1.5)),
            ("zipf", "overlap", 2, RequestParams(1.0, top_k=5)), ("zipf", "sharp", k, RequestParams(1.0, top_p=0.8)),
            ("peaked", "overlap", 2, RequestParams(0.7, top_k=10, top_p=0.9)),
        ]
        mixed += [TemplateSpec(f, r, n, prm) for (f, r, n, prm) in with_params]
    else:
        skipped.append("per-request temperature / top-k / top-p (the kernel does not apply them)")
    if spec.min_p:
        with_min_p = [
            ("zipf", "overlap", k, RequestParams(0.7, min_p=0.1)), ("zipf", "sharp", 2, RequestParams(1.5, min_p=0.05)),
            ("peaked", "overlap", k, RequestParams(1.0, min_p=0.02)),
            ("zipf", "overlap", 1, RequestParams(0.8, top_k=20, top_p=0.9, min_p=0.05)),
        ]
        min_p_counts = _ks(spec, [n for _, _, n, _ in with_min_p])
        mixed += [TemplateSpec(f, r, n, prm) for (f, r, _, prm), n in zip(with_min_p, min_p_counts)]
    else:
        skipped.append("per-request min-p (the kernel does not declare min_p)")
    if spec.greedy:
        mixed += [TemplateSpec("zipf", "overlap", k, RequestParams(0.0)), TemplateSpec("peaked", "sharp", 1,
                                                                                        RequestParams(0.0))]
    else:
        skipped.append("greedy rows in a mixed batch (the kernel does not declare them)")
    out.append(scenario("mixed-v61", 61, mixed, rng, replicates=reps, k_max=k, skipped=skipped))

    # 2. two tokens
    two = [TemplateSpec("zipf", "flat", _ks(spec, [k])[0]), TemplateSpec("peaked", "flat", _ks(spec, [1])[0])]
    if spec.params:
        two.append(TemplateSpec("zipf", "flat", _ks(spec, [2])[0], RequestParams(0.7)))
    out.append(scenario("vocab-2", 2, two, rng, replicates=reps, k_max=k))

    # 3. a vocabulary that is not a multiple of 8192, with boundary uniforms where injectable
    k2 = min(k, 2)
    mid = [TemplateSpec("zipf", "overlap", _ks(spec, [k2])[0]), TemplateSpec("sparse", "disjoint", _ks(spec, [1])[0])]
    if spec.params:
        mid.append(TemplateSpec("peaked", "overlap", _ks(spec, [k2])[0], RequestParams(0.8, top_k=50)))
    mid_skipped: list[str] = []
    if spec.uniforms:
        mid += [TemplateSpec("sparse", "flat", _ks(spec, [k2])[0], boundary="u0"),
                TemplateSpec("sparse", "flat", _ks(spec, [k2])[0], boundary="u1"),
                TemplateSpec("flat", "overlap", _ks(spec, [1])[0], boundary="u1")]
    else:
        mid_skipped.append("boundary uniforms 0 and 1 - ulp (the kernel draws its own uniforms)")
    if spec.nan_rows:
        mid += [TemplateSpec("zipf", "overlap", _ks(spec, [k2])[0], boundary="nan"),
                TemplateSpec("sparse", "overlap", _ks(spec, [0])[0], boundary="nan")]
    else:
        mid_skipped.append("NaN target rows (the kernel does not promise how it handles them)")
    tile_v = min(40_000, spec.max_vocab)
    if tile_v > 64:
        out.append(scenario(f"tile-v{tile_v}", tile_v, mid, rng, replicates=max(50, reps // 8), k_max=k,
                            boundary_replicates=32, skipped=mid_skipped))

    # 4. the largest vocabulary, concentrated laws: mostly the invariants (ids, support) and gross shifts
    large_v = min(256_000, spec.max_vocab)
    if large_v > 40_000:
        large = [TemplateSpec("peaked", "overlap", _ks(spec, [k2])[0], per_position=False),
                 TemplateSpec("sparse", "overlap", _ks(spec, [1])[0], per_position=False)]
        if spec.params:
            large.append(TemplateSpec("peaked", "overlap", _ks(spec, [1])[0], RequestParams(0.7), per_position=False))
        out.append(scenario(f"large-v{large_v}", large_v, large, rng, replicates=max(30, reps // 20), k_max=k))
    return out
