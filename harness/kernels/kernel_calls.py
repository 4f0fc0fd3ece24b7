"""Running a chain kernel over a scenario: build each call's request, call, read the output.

speceq owns the randomness: draft tokens are drawn from the template's draft law with
speceq's numpy generator (inverse CDF), every injected uniform comes from it, and the kernel's
own generator and per-request seeds are seeded from it, so a check is reproducible from its
seed. Each call holds every template of the scenario (shuffled), as many copies as fit in
:data:`~speceq.kernels.scenarios.MAX_CELLS_PER_CALL` logits cells (ragged: the target rows;
padded: every target and draft row it sends); calls repeat until every template has its
replicates. The time spent inside the kernel and around it is recorded separately, as wall
time and as the process's CPU time (the speed benchmark compares them; on a shared machine the
CPU time is the steadier of the two).

The large per-call inputs (target logits or probabilities, draft probabilities) are gathered
into buffers that are reused from call to call and from scenario to scenario of a check (a
fresh allocation of the same size costs ~5-20x the copy, in page faults): a request's tensors
are valid during its call only; a kernel may modify them in place, and must not keep them for
later calls. The padded layout keeps one call layout per composition, so its calls repeat the
same rows, which are copied once and compared with the tables once (:class:`RowBuffers`); a
kernel that writes into them makes the check copy every call's inputs (see
:func:`run_scenario`).
"""

from __future__ import annotations

import ctypes
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np
import torch

from speceq.errors import ConfigError, EngineError
from speceq.kernels.contract import Kernel, Outcome, PaddedRequest, RaggedRequest, SingleRequest
from speceq.kernels.outcomes import Violation, as_token_array, merge, parse_call
from speceq.kernels.scenarios import ONE_MINUS_ULP, Scenario, Template

#: A scenario's record or summary: anything with the four time fields and ``inputs_written``.
_Timed = TypeVar("_Timed")


@dataclass
class TemplateRecord:
    """Everything a template's requests produced: drafts, emitted tokens (-1 padded), lengths L (-1: unusable)."""

    template: Template
    drafts: list[np.ndarray] = field(default_factory=list)
    tokens: list[np.ndarray] = field(default_factory=list)
    lengths: list[np.ndarray] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n = self.template.n_draft
        d = np.concatenate(self.drafts) if self.drafts else np.zeros((0, n), np.int64)
        t = np.concatenate(self.tokens) if self.tokens else np.zeros((0, n + 1), np.int64)
        L = np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)
        return d, t, L


@dataclass
class ScenarioRecord:
    scenario: Scenario
    records: list[TemplateRecord]
    violations: tuple[Violation, ...]
    calls: int
    requests: int
    kernel_seconds: float
    harness_seconds: float
    kernel_cpu_seconds: float = 0.0
    harness_cpu_seconds: float = 0.0
    #: The kernel wrote into its reused inputs: the first collection was discarded, this one copied every call's
    #: inputs (the times include the discarded collection's).
    inputs_written: bool = False


class _Tables:
    """The scenario's rows as device tensors, and the draft CDFs for drawing."""

    def __init__(self, scenario: Scenario, device: torch.device, buffers: RowBuffers | None = None, *,
                 reuse: bool = False) -> None:
        tpls = scenario.templates
        self.row_base = np.cumsum([0] + [t.n_draft + 1 for t in tpls])[:-1]
        self.draft_base = np.cumsum([0] + [t.n_draft for t in tpls])[:-1]
        self.logits = torch.from_numpy(np.concatenate([t.logits for t in tpls])).to(device)
        self.probs = torch.from_numpy(np.concatenate([t.law for t in tpls]).astype(np.float32)).to(device)
        q32 = [t.draft32 for t in tpls] + [np.zeros((1, scenario.vocab_size), np.float32)]
        self.draft32 = torch.from_numpy(np.concatenate(q32)).to(device)  # the last row is all zeros (padding)
        self.zero_row = int(self.draft32.shape[0] - 1)
        self.cdf = []
        for t in tpls:
            c = np.cumsum(t.draft, axis=1)
            self.cdf.append(c / np.where(c[:, -1:] > 0, c[:, -1:], 1.0))
        self.n = np.array([t.n_draft for t in tpls], dtype=np.int64)
        self.temperature = np.array([t.params.temperature for t in tpls], dtype=np.float32)
        self.top_k = np.array([t.params.top_k for t in tpls], dtype=np.int64)
        self.top_p = np.array([t.params.top_p for t in tpls], dtype=np.float32)
        self.min_p = np.array([t.params.min_p for t in tpls], dtype=np.float32)
        self.buffers = buffers if buffers is not None else RowBuffers()
        self.reuse = reuse  # hand out the rows of a repeated call without copying them again (RowBuffers)
        # per template, its target rows [n + 1, V] and draft rows [n, V] as views (the single layout clones them)
        self.target_rows = [self.probs[b:b + k + 1] for b, k in zip(self.row_base.tolist(), self.n.tolist())]
        self.draft_rows = [self.draft32[b:b + k] for b, k in zip(self.draft_base.tolist(), self.n.tolist())]


class RowBuffers:
    """Reused gather targets: ``gather(name, table, rows)`` = ``table[rows]``, in memory kept between calls.

    One flat buffer per name (and dtype, device) serves every call of a check, whatever the
    vocabulary: it grows to the largest call's cells and later calls use a prefix of it, viewed
    as ``[rows, V]``. So a check touches fresh memory for its inputs once, at the largest call,
    instead of once per scenario (first-touch page faults cost ~5-20x the copy itself on the
    2-core CPU machine: 0.1-0.6 GB/s against 3-15 GB/s).

    ``gather(..., reuse=True)`` (the padded and tree layouts, whose calls keep one layout while
    their composition does not change) skips the copy when the buffer already holds
    ``table[rows]`` from the previous gather of that name: same table object, same rows. A
    kernel may have written into the buffer during its calls, through torch or a raw pointer
    (which no version counter sees), so every buffer handed out again without a copy is
    compared with ``table[rows]`` bit for bit before it is overwritten with other rows and at
    :meth:`verify` (the end of each scenario): one read per composition, not per call. A
    difference sets :attr:`written`; the caller then discards what it collected with those
    inputs and sets :attr:`copy_every_call`, after which every gather copies.
    """

    #: Cells compared at a time by :meth:`verify` (a scratch buffer of this size, reused).
    COMPARE_CELLS = 1 << 20

    def __init__(self) -> None:
        self._store: dict[tuple[str, torch.dtype, torch.device], torch.Tensor] = {}
        self._held: dict[tuple[str, torch.dtype, torch.device], _Held] = {}
        self._scratch: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}
        self.copy_every_call = False
        self.written = False
        self.copies = 0  # gathers that copied (index_select into the buffer)
        self.reuses = 0  # gathers that handed the held rows out again
        self.compares = 0  # comparisons of a reused buffer with its table rows

    def gather(self, name: str, table: torch.Tensor, rows: np.ndarray, *, reuse: bool = False) -> torch.Tensor:
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        count = int(rows.size)
        row_shape = tuple(table.shape[1:])
        cells = count * math.prod(row_shape)
        key = (name, table.dtype, table.device)
        held = self._held.pop(key, None)
        if held is not None and reuse and not self.copy_every_call and held.table is table \
                and np.array_equal(held.rows, rows):
            held.reused += 1
            self._held[key] = held
            self.reuses += 1
            return self._store[key][:cells].view(count, *row_shape)
        if held is not None:
            self._check(key, held)
        flat = self._store.get(key)
        if flat is None or flat.numel() < cells:
            self._store.pop(key, None)  # release the smaller buffer before allocating: one per name at a time
            flat = torch.empty(cells, dtype=table.dtype, device=table.device)
            self._store[key] = flat
        out = flat[:cells].view(count, *row_shape)
        index = torch.from_numpy(rows).to(table.device)
        torch.index_select(table, 0, index, out=out)
        self.copies += 1
        if reuse and not self.copy_every_call:
            self._held[key] = _Held(table, rows.copy(), index)
        return out

    def verify(self) -> bool:
        """Compare every buffer handed out again since its copy with its table rows; forget them. False: written."""
        for key in list(self._held):
            self._check(key, self._held.pop(key))
        return not self.written

    def _check(self, key: tuple[str, torch.dtype, torch.device], held: _Held) -> None:
        """Set :attr:`written` when a buffer that was handed out again differs from ``table[rows]`` in any bit."""
        if held.reused == 0 or self.written:
            return  # handed out once, right after its copy: no call saw stale data
        self.compares += 1
        with torch.inference_mode():  # the buffers may be inference tensors (built for calls in inference mode)
            self.written = not self._equal(key, held)

    def _equal(self, key: tuple[str, torch.dtype, torch.device], held: _Held) -> bool:
        table = held.table
        width = int(np.prod(table.shape[1:], dtype=np.int64))
        count = int(held.index.numel())
        buffer = self._store[key][:count * width].view(count, width)
        direct = rows_equal_in_place(buffer, table, held.rows, width)
        if direct is not None:
            return direct
        step = max(1, self.COMPARE_CELLS // max(width, 1))
        skey = (table.dtype, table.device)
        scratch = self._scratch.get(skey)
        need = min(step, count) * width
        if scratch is None or scratch.numel() < need:
            scratch = torch.empty(need, dtype=table.dtype, device=table.device)
            self._scratch[skey] = scratch
        flat_table = table.reshape(table.shape[0], width)
        for start in range(0, count, step):
            idx = held.index[start:start + step]
            part = scratch[:idx.numel() * width].view(idx.numel(), width)
            torch.index_select(flat_table, 0, idx, out=part)
            if not same_bits(buffer[start:start + idx.numel()], part):
                return False
        return True


#: Smallest average run of consecutive table rows, in bytes, that :func:`rows_equal_in_place` compares in place.
DIRECT_RUN_BYTES = 1 << 16


def rows_equal_in_place(buffer: torch.Tensor, table: torch.Tensor, rows: np.ndarray, width: int) -> bool | None:
    """``buffer == table[rows]`` bit for bit, one memcmp per run of consecutive rows, or None where not applicable.

    Reads both in place (no gathered copy of the table rows to compare with: half the memory
    traffic of the scratch path). Applies to contiguous CPU tensors whose runs of consecutive
    table rows (the tree layout sends each request's N node rows in a run) average at least
    DIRECT_RUN_BYTES, so the per-call cost of memcmp through ctypes (~1 us) stays negligible.
    """
    fn = _memcmp()
    if fn is None or buffer.device.type != "cpu" or table.device.type != "cpu" \
            or not (buffer.is_contiguous() and table.is_contiguous()) or rows.size == 0:
        return None
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate([[0], breaks])
    lengths = np.diff(np.concatenate([starts, [rows.size]]))
    row_bytes = width * table.element_size()
    if rows.size * row_bytes < DIRECT_RUN_BYTES * starts.size:
        return None
    b0, t0 = buffer.data_ptr(), table.data_ptr()
    for at, length in zip(starts.tolist(), lengths.tolist()):
        if fn(b0 + at * row_bytes, t0 + int(rows[at]) * row_bytes, length * row_bytes) != 0:
            return False
    return True


#: An integer dtype of each element size, to compare floats bit for bit.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MEMCMP: list = []


def _memcmp():  # noqa: ANN202 - libc's memcmp through ctypes, or None where it cannot be loaded
    if not _MEMCMP:
        try:
            fn = ctypes.CDLL(None).memcmp
            fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
        except (OSError, AttributeError, TypeError):  # no libc to load (e.g. CDLL(None) off POSIX)
            fn = None
        _MEMCMP.append(fn)
    return _MEMCMP[0]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors of one dtype and shape hold the same bits (NaN and -0.0 compare as what they are).

    Contiguous CPU tensors are compared with libc's memcmp (3-4x faster than ``torch.equal`` on the
    2-core CPU machine: 1.7 ms against 5-6 ms for 26 MB); others as integer views with ``torch.equal``.
    """
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fn = _memcmp()
    if fn is not None and a.device.type == b.device.type == "cpu" and a.is_contiguous() and b.is_contiguous():
        return fn(a.data_ptr(), b.data_ptr(), a.numel() * a.element_size()) == 0
    bits = _BITS[a.element_size()]
    return bool(torch.equal(a.contiguous().view(bits), b.contiguous().view(bits)))


@dataclass
class _Held:
    """What a reusable buffer holds: ``table[rows]`` (copied once, then handed out ``1 + reused`` times)."""

    table: torch.Tensor
    rows: np.ndarray
    index: torch.Tensor
    reused: int = 0


def fixed_layout_plan(want: np.ndarray, per_call: int) -> list[np.ndarray]:
    """Requests per template of each call, for calls that keep one layout: few distinct compositions.

    C = ceil(max(want) / per_call) calls of ``want // C`` each (one composition), then the
    remainders (each < C) in calls of at most ``per_call`` per template. Every call holds at most
    ``per_call`` requests of a template, as ``min(want - have, per_call)`` does, and the totals
    are exactly ``want``; the plan depends on the counts only, never on an outcome.
    """
    want = np.asarray(want, dtype=np.int64)
    if want.size == 0 or int(want.max()) <= 0:
        return []
    calls = -(-int(want.max()) // per_call)
    bulk = want // calls
    plan = [bulk.copy() for _ in range(calls)] if bulk.any() else []
    rest = want - bulk * calls
    while rest.any():
        take = np.minimum(rest, per_call)
        plan.append(take)
        rest = rest - take
    return plan


def _draw_drafts(tables: _Tables, slots: np.ndarray, k_max: int, rng: np.random.Generator) -> np.ndarray:
    """Draft tokens ``[B, k_max]`` (-1 after each request's own), drawn from the templates' draft laws."""
    drafts = np.full((slots.size, k_max), -1, dtype=np.int64)
    for t in np.unique(slots):
        rows = np.flatnonzero(slots == t)
        for i in range(int(tables.n[t])):
            cdf = tables.cdf[t][i]
            d = np.searchsorted(cdf, rng.random(rows.size), side="right")
            drafts[rows, i] = np.minimum(d, cdf.size - 1)
    return drafts


def _uniforms(templates: tuple[Template, ...], slots: np.ndarray, shape: tuple[int, ...],
              rng: np.random.Generator) -> np.ndarray:
    u = rng.random(shape)
    for t in np.unique(slots):
        kind = templates[t].boundary
        if kind in ("u0", "u1"):
            u[slots == t] = 0.0 if kind == "u0" else ONE_MINUS_ULP
    return u


def _boundary(u: np.ndarray, kind: str) -> np.ndarray:
    """``u`` with a boundary template's fixed value (0 or 1 - ulp) in place of every uniform."""
    if kind in ("u0", "u1"):
        u[:] = 0.0 if kind == "u0" else ONE_MINUS_ULP
    return u


def seeds62(rng: np.random.Generator, count: int) -> list[int]:
    """``count`` values of ``int(rng.integers(0, 2**62))``, drawn one after the other, at a third of the cost.

    For a power-of-two range numpy's bounded draw (Lemire's method) never rejects and returns
    the top 62 bits of the bit generator's next 64-bit output, so these are those bits: the same
    values and the same state afterwards (a test checks it), without ``integers``' ~3.5 us of
    overhead per call (the single-request layout draws two per request).
    """
    return [v >> 2 for v in rng.bit_generator.random_raw(count).tolist()]


def _generator(device: torch.device, seed: int) -> torch.Generator:
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def build_ragged(tables: _Tables, scenario: Scenario, slots: np.ndarray, drafts: np.ndarray, spec_takes_q: bool,
                 rng: np.random.Generator, device: torch.device) -> RaggedRequest:
    tpls = scenario.templates
    n = tables.n[slots]
    b = slots.size
    cu = np.cumsum(n)
    num_tokens = int(cu[-1]) if b else 0
    rows_per = n + 1
    starts = np.repeat(np.cumsum(rows_per) - rows_per, rows_per)
    within = np.arange(int(rows_per.sum())) - starts
    row_index = np.repeat(tables.row_base[slots], rows_per) + within
    is_bonus = within == np.repeat(n, rows_per)
    flat_rows = np.arange(row_index.size)
    tok_start = np.repeat(cu - n, n)
    tok_within = np.arange(num_tokens) - tok_start
    flat_drafts = drafts[np.repeat(np.arange(b), n), tok_within] if num_tokens else np.zeros(0, np.int64)
    draft_rows = np.repeat(tables.draft_base[slots], n) + tok_within
    dev = device
    u = _uniforms(tpls, np.repeat(slots, n), (num_tokens,), rng)
    su = _uniforms(tpls, slots, (b,), rng)
    return RaggedRequest(
        vocab_size=scenario.vocab_size,
        num_draft_tokens=tuple(n.tolist()),
        cu_num_draft_tokens=torch.from_numpy(cu.astype(np.int32)).to(dev),
        draft_token_ids=torch.from_numpy(flat_drafts).to(dev),
        draft_probs=tables.buffers.gather("draft", tables.draft32, draft_rows) if spec_takes_q else None,
        target_logits=tables.buffers.gather("target", tables.logits, row_index),
        target_logits_indices=torch.from_numpy(flat_rows[~is_bonus]).to(dev),
        bonus_logits_indices=torch.from_numpy(flat_rows[is_bonus]).to(dev),
        temperature=torch.from_numpy(tables.temperature[slots]).to(dev),
        top_k=torch.from_numpy(tables.top_k[slots]).to(dev),
        top_p=torch.from_numpy(tables.top_p[slots]).to(dev),
        min_p=torch.from_numpy(tables.min_p[slots]).to(dev),
        uniforms=torch.from_numpy(u).to(dev),
        sample_uniforms=torch.from_numpy(su).to(dev),
        seeds=torch.from_numpy(rng.integers(0, 2**62, size=b)).to(dev),
        generator=_generator(dev, int(rng.integers(0, 2**62))),
    )


def build_padded(tables: _Tables, scenario: Scenario, slots: np.ndarray, drafts: np.ndarray, k: int,
                 spec_takes_q: bool, rng: np.random.Generator, device: torch.device) -> PaddedRequest:
    tpls = scenario.templates
    n = tables.n[slots]
    b = slots.size
    j = np.arange(k + 1)[None, :]
    target_rows = tables.row_base[slots][:, None] + np.minimum(j, n[:, None])  # rows after the bonus repeat it
    dev = device
    target = tables.buffers.gather("target", tables.probs, target_rows.ravel(), reuse=tables.reuse).view(b, k + 1, -1)
    draft = None
    if spec_takes_q:
        jd = np.arange(k)[None, :]
        qrows = np.where(jd < n[:, None], tables.draft_base[slots][:, None] + jd, tables.zero_row)
        draft = tables.buffers.gather("draft", tables.draft32, qrows.ravel(), reuse=tables.reuse).view(b, k, -1)
    return PaddedRequest(
        vocab_size=scenario.vocab_size,
        num_draft_tokens=tuple(n.tolist()),
        draft_token_ids=torch.from_numpy(drafts[:, :k].copy()).to(dev),
        draft_probs=draft,
        target_probs=target,
        uniforms=torch.from_numpy(_uniforms(tpls, slots, (b, k), rng)).to(dev),
        sample_uniforms=torch.from_numpy(_uniforms(tpls, slots, (b,), rng)).to(dev),
        seeds=torch.from_numpy(rng.integers(0, 2**62, size=b)).to(dev),
        generator=_generator(dev, int(rng.integers(0, 2**62))),
    )


def build_single(tables: _Tables, scenario: Scenario, t: int, drafts: np.ndarray, spec_takes_q: bool,
                 rng: np.random.Generator, device: torch.device) -> SingleRequest:
    tpl = scenario.templates[t]
    n = tpl.n_draft
    # the n coins then the bonus uniform in one draw (the values of drawing them one after the other)
    draws = _boundary(rng.random(n + 1), tpl.boundary)
    seed, generator_seed = seeds62(rng, 2)
    return SingleRequest(
        vocab_size=scenario.vocab_size,
        draft_token_ids=torch.from_numpy(drafts[:n].copy()).to(device),
        draft_probs=tables.draft_rows[t].clone() if spec_takes_q else None,
        target_probs=tables.target_rows[t].clone(),
        uniforms=torch.from_numpy(draws[:n]).to(device),
        sample_uniform=float(draws[n]),
        seed=seed,
        generator=_generator(device, generator_seed),
    )


@dataclass
class _Called:
    drafts: np.ndarray
    tokens: np.ndarray
    counters: np.ndarray | None
    build_seconds: float
    kernel_seconds: float
    build_cpu_seconds: float = 0.0
    kernel_cpu_seconds: float = 0.0


def _counters(outcome: Outcome) -> np.ndarray | None:
    c = outcome.emitted_draft_counts
    if c is None:
        return None
    if hasattr(c, "detach"):
        c = c.detach().to("cpu").numpy()
    return np.asarray(c).reshape(-1)


def _call(kernel: Kernel, tables: _Tables, scenario: Scenario, slots: np.ndarray, k_max: int,
          rng: np.random.Generator, device: torch.device) -> _Called:
    """Build the requests of ``slots`` and call the kernel (once; a single-layout kernel once per slot)."""
    t0, c0 = time.perf_counter(), time.process_time()
    spec = kernel.spec
    drafts = _draw_drafts(tables, slots, k_max, rng)
    where = f"{kernel.name} on {scenario.name}"
    with torch.inference_mode():
        if spec.layout == "single":
            requests = [build_single(tables, scenario, int(t), drafts[i], spec.takes_draft_probs, rng, device)
                        for i, t in enumerate(slots)]
            t1, c1 = time.perf_counter(), time.process_time()
            outcomes = [kernel(r) for r in requests]
            t2, c2 = time.perf_counter(), time.process_time()
            rows = [as_token_array(o.tokens, 1, where)[0] for o in outcomes]
            width = max(k_max + 1, max(r.size for r in rows))
            tokens = np.full((slots.size, width), -1, dtype=np.int64)
            for i, r in enumerate(rows):
                tokens[i, : r.size] = r
            counts = [_counters(o) for o in outcomes]
            counters = None if any(c is None for c in counts) else np.concatenate(counts)  # type: ignore[arg-type]
            return _Called(drafts, tokens, counters, (t1 - t0) + (time.perf_counter() - t2), t2 - t1,
                           (c1 - c0) + (time.process_time() - c2), c2 - c1)
        if spec.layout == "ragged":
            request = build_ragged(tables, scenario, slots, drafts, spec.takes_draft_probs, rng, device)
        else:
            request = build_padded(tables, scenario, slots, drafts, k_max, spec.takes_draft_probs, rng, device)
        t1, c1 = time.perf_counter(), time.process_time()
        outcome = kernel(request)
        t2, c2 = time.perf_counter(), time.process_time()
    tokens = as_token_array(outcome.tokens, slots.size, where)
    return _Called(drafts, tokens, _counters(outcome), (t1 - t0) + (time.perf_counter() - t2), t2 - t1,
                   (c1 - c0) + (time.process_time() - c2), c2 - c1)


def run_scenario(kernel: Kernel, scenario: Scenario, rng: np.random.Generator, device: torch.device,
                 buffers: RowBuffers | None = None) -> ScenarioRecord:
    """Call ``kernel`` until every template of ``scenario`` has its replicates; read every output.

    A call that raises is retried one template at a time: templates that raise alone are
    recorded as ``raised`` violations and left out of the later calls; when every template
    raises alone the kernel (or its wrapper) cannot run at all and an EngineError is raised.

    Padded layout: the calls keep one layout (the order of the templates' requests in the call)
    while their composition (requests per template) is unchanged, a permutation drawn from
    ``rng`` once per composition, independently of every outcome; so each call needs the same
    table rows, which the buffers hand out without copying them again (:class:`RowBuffers`).
    The draft tokens, uniforms, seeds and generators are drawn for every call. When the
    buffers find that the kernel wrote into its inputs, everything collected for the scenario
    is discarded, the buffers copy every call's inputs from then on (for the rest of the check)
    and the scenario is collected again with the next draws of ``rng``; the record says so
    (``inputs_written``). That redo is valid: whether it happens depends on what the kernel
    does to its inputs, and where the first attempt stopped is a stopping time of the stream,
    so the draws after it are again independent uniforms; the kept records are a complete
    collection on unmodified inputs, as without the redo. The ragged layout draws a fresh
    permutation for every call and copies every call's inputs, as before.
    """
    fixed_layout = kernel.spec.layout == "padded"

    def one(scn: Scenario, gen: np.random.Generator, bufs: RowBuffers) -> ScenarioRecord:
        return _collect_scenario(kernel, scn, gen, device, bufs, fixed_layout)

    return scenario_loop([scenario], one, lambda _: rng, buffers=buffers)[0]


_Record = TypeVar("_Record")
_Scenario = TypeVar("_Scenario")


def scenario_loop(scenarios: Sequence[_Scenario],
                  collect_one: Callable[[_Scenario, np.random.Generator, RowBuffers], _Record],
                  rng_of: Callable[[int], np.random.Generator], *, buffers: RowBuffers | None = None,
                  redo: Callable[[_Record, _Record], _Record] | None = None) -> list[_Record]:
    """Collect every scenario of a check in order: the one collection loop of every layout (no statistics).

    ``collect_one(scenario, rng, buffers)`` collects one scenario (the layout's own calls);
    ``rng_of(i)`` is the generator of the i-th scenario (the chain and tree layouts hand out one
    generator for the whole check, the model layout one per scenario). One set of input buffers
    serves every scenario. When the buffers find that the kernel wrote into its reused inputs,
    the scenario's collection is discarded, every later call of the check copies its inputs
    (no second redo) and the scenario is collected again with the next draws; ``redo(again,
    first)`` marks the kept collection (default :func:`redone`). Why the redo is valid: see
    :func:`run_scenario`.
    """
    buffers = buffers if buffers is not None else RowBuffers()
    mark = redo if redo is not None else redone
    out: list[_Record] = []
    for i, scenario in enumerate(scenarios):
        rng = rng_of(i)
        first = collect_one(scenario, rng, buffers)
        if buffers.written:
            buffers.copy_every_call, buffers.written = True, False  # nothing is reused from here on: no second redo
            first = mark(collect_one(scenario, rng, buffers), first)
        out.append(first)
    return out


def redone(again: _Timed, first: _Timed) -> _Timed:
    """``again`` (a scenario's record or summary) marked ``inputs_written``, with ``first``'s discarded times added (s)."""
    return replace(again, inputs_written=True, kernel_seconds=again.kernel_seconds + first.kernel_seconds,
                   harness_seconds=again.harness_seconds + first.harness_seconds,
                   kernel_cpu_seconds=again.kernel_cpu_seconds + first.kernel_cpu_seconds,
                   harness_cpu_seconds=again.harness_cpu_seconds + first.harness_cpu_seconds)


def _collect_scenario(kernel: Kernel, scenario: Scenario, rng: np.random.Generator, device: torch.device,
                      buffers: RowBuffers, fixed_layout: bool) -> ScenarioRecord:
    """One collection of ``scenario`` (see :func:`run_scenario`); stops early when ``buffers.written`` is set."""
    spec = kernel.spec
    tpls = scenario.templates
    tables = _Tables(scenario, device, buffers, reuse=fixed_layout)
    k_max = int(tables.n.max()) if spec.layout != "padded" else spec.max_draft
    records = [TemplateRecord(t) for t in tpls]
    want = np.array([scenario.copies(t) for t in tpls])
    have = np.zeros(len(tpls), dtype=np.int64)
    if spec.layout == "single":
        batch = min(256, 8 * len(tpls))
    elif spec.layout == "padded":  # every request sends k + 1 target rows and k draft rows, whatever its draft count
        batch = scenario.calls_batch(spec.max_draft + 1 + (spec.max_draft if spec.takes_draft_probs else 0))
    else:  # ragged: the target rows (drafts + bonus), and the draft rows when the kernel is handed draft probs
        draft_rows = scenario.draft_rows_per_request if spec.takes_draft_probs else 0.0
        batch = scenario.calls_batch(scenario.rows_per_request + draft_rows)
    per_call = max(1, batch // len(tpls))
    violations: list[Violation] = []
    kernel_s = harness_s = kernel_cpu = harness_cpu = 0.0
    calls = requests = 0
    layout_take: np.ndarray | None = None
    slots = np.zeros(0, np.int64)
    plan = fixed_layout_plan(want, per_call) if fixed_layout else []
    while (have < want).any():
        take = np.minimum(want - have, plan.pop(0) if plan else per_call)
        if not fixed_layout or layout_take is None or not np.array_equal(take, layout_take):
            slots = rng.permutation(np.repeat(np.arange(len(tpls)), take))
            layout_take = take
        groups = [slots]
        try:
            results = [_call(kernel, tables, scenario, slots, k_max, rng, device)]
        except Exception as exc:  # noqa: BLE001 - a kernel may raise anything; find which requests make it
            results, groups = [], []
            raised: list[tuple[int, Exception]] = []
            for t in np.unique(slots):
                alone = slots[slots == t]
                try:
                    results.append(_call(kernel, tables, scenario, alone, k_max, rng, device))
                    groups.append(alone)
                except Exception as inner:  # noqa: BLE001
                    raised.append((int(t), inner))
            if len(raised) == len(np.unique(slots)) and len(raised) == len(tpls):
                raise EngineError(f"the kernel raised {type(exc).__name__}: {exc}", engine=kernel.name,
                                  case_id=scenario.name) from exc
            if not raised:  # every template runs alone: the mixture itself fails
                raised = [(int(t), exc) for t in np.unique(slots)]
                results, groups = [], []
            for t, err in raised:
                count = int((slots == t).sum())
                violations.append(Violation("raised", f"{scenario.name}/{tpls[t].name}", count,
                                            f"{type(err).__name__}: {str(err)[:200]}"))
                want[t] = have[t]  # leave it out of later calls
        for called, group in zip(results, groups):
            t2, c2 = time.perf_counter(), time.process_time()
            drafts, tokens, counters = called.drafts, called.tokens, called.counters
            parsed = parse_call(tokens, group, tpls, drafts, counters)
            violations.extend(Violation(v.kind, f"{scenario.name}/{v.template}", v.count, v.example)
                              for v in parsed.violations)
            for t in np.unique(group):
                rows = group == t
                n = tpls[t].n_draft
                rec = records[t]
                rec.drafts.append(drafts[rows, :n])
                rec.tokens.append(parsed.tokens[rows, : n + 1])
                rec.lengths.append(parsed.lengths[rows])
            have += np.bincount(group, minlength=len(tpls))
            calls += group.size if spec.layout == "single" else 1
            requests += group.size
            kernel_s += called.kernel_seconds
            harness_s += called.build_seconds + (time.perf_counter() - t2)
            kernel_cpu += called.kernel_cpu_seconds
            harness_cpu += called.build_cpu_seconds + (time.process_time() - c2)
        if buffers.written:
            break
    if fixed_layout:
        t3, c3 = time.perf_counter(), time.process_time()
        buffers.verify()  # the end of the scenario: the last composition's reused inputs, compared once
        harness_s += time.perf_counter() - t3
        harness_cpu += time.process_time() - c3
    return ScenarioRecord(scenario, records, merge(violations), calls, requests, kernel_s, harness_s, kernel_cpu,
                          harness_cpu)


def collect(kern: Kernel, scenarios: list[Scenario] | tuple[Scenario, ...], *, seed: int = 0,
            device: str | torch.device = "cpu") -> list[ScenarioRecord]:
    """Run the kernel over the scenarios with speceq's seeds (no statistics: torch and numpy only).

    A scenario with a min-p request for a ragged kernel that does not declare ``KernelSpec.min_p`` is
    refused (ConfigError naming the scenario and template) before any call: the kernel would
    ignore it and its correct output would read as shifted.
    """
    if kern.spec.layout == "ragged" and not kern.spec.min_p:
        for scn in scenarios:
            for t in scn.templates:
                if t.params.min_p > 0.0:
                    raise ConfigError(f"template {t.name!r} of scenario {scn.name!r} has min_p = {t.params.min_p:g}, "
                                      f"but the kernel does not declare min_p (KernelSpec(min_p=True))",
                                      where=f"kernel {kern.name}")
    dev = torch.device(device)
    rng = np.random.default_rng([seed, 1])
    fixed_layout = kern.spec.layout == "padded"

    def one(scn: Scenario, gen: np.random.Generator, bufs: RowBuffers) -> ScenarioRecord:
        return _collect_scenario(kern, scn, gen, dev, bufs, fixed_layout)

    return scenario_loop(scenarios, one, lambda _: rng)
