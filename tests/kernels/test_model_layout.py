"""The model-level layout: exact table models, the cell plan, the invariants and the verdicts of chain kernels."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from speceq.errors import ConfigError
from speceq.kernels import Kernel, KernelSpec, Outcome, check
from speceq.kernels.law_tests import plan
from speceq.kernels.model_layout import (
    default_model_scenarios,
    plan_cells,
    planned_model_tests,
    reference_model_kernel,
    residual_from_target_kernel,
)
from speceq.kernels.scenarios import default_scenarios
from speceq.kernels.table_models import TableModel, sample_tokens
from speceq.verdicts.verdict import Verdict

LAWS = np.array([[0.5, 0.5, 0.0], [0.1, 0.2, 0.7], [1.0, 0.0, 0.0]])


def test_a_table_model_gives_the_row_of_the_prefix_and_counts_its_calls() -> None:
    m = TableModel(LAWS, salt=7, name="t")
    prefixes = torch.tensor([[0, 1], [2, 2], [1, 0]])
    rows = m.row_of(prefixes)
    out = m(prefixes)
    assert out.dtype == torch.float32 and out.shape == (3, 3)
    np.testing.assert_allclose(out.numpy(), m.laws64[rows], atol=1e-7)
    assert (m.calls, m.prefixes) == (1, 3)
    # block(): the laws after each extension are the laws at the extended prefixes
    tokens = torch.tensor([[2, 0], [1, 1], [0, 2]])
    blk = m.block(prefixes, tokens)
    assert blk.shape == (3, 3, 3)
    for i in range(3):
        ext = torch.cat([prefixes, tokens[:, :i]], dim=1)
        np.testing.assert_array_equal(blk[:, i].numpy(), m(ext).numpy())
    # off-path prefixes have laws too, and a tied draft model uses the same rows
    d = TableModel(LAWS[::-1].copy(), salt=7)
    np.testing.assert_array_equal(d.row_of(prefixes), rows)


def test_rows_depend_on_the_whole_prefix() -> None:
    m = TableModel(np.eye(6) * 0.9 + 0.1 / 6, salt=3)
    many = np.array([[a, b, c] for a in range(6) for b in range(6) for c in range(6)])
    rows = m.row_of(many)
    assert set(rows.tolist()) == set(range(6))
    assert len({tuple(rows[i::36].tolist()) for i in range(36)}) > 1  # the first token changes rows too


def test_a_bad_prefix_names_its_row_and_column() -> None:
    m = TableModel(LAWS, salt=1, name="target")
    with pytest.raises(ConfigError, match=r"target: prefixes row 1 holds token 3 at column 0"):
        m(torch.tensor([[0, 1], [3, 0]]))
    with pytest.raises(ConfigError, match="one length"):
        m([[0], [1, 2]])


def test_sampled_tokens_follow_the_row_and_never_hit_a_zero() -> None:
    g = torch.Generator().manual_seed(0)
    probs = torch.tensor([[0.2, 0.0, 0.8]]).repeat(20_000, 1)
    x = sample_tokens(probs, g)
    assert not (x == 1).any()
    assert abs(float((x == 2).double().mean()) - 0.8) < 0.02


def test_the_cells_are_planned_from_the_laws_alone() -> None:
    scn = default_model_scenarios(3, scale=0.5)
    cells = plan_cells(scn[0])
    assert cells == plan_cells(scn[0]) and planned_model_tests(scn) == len(cells)
    # position 0 has one row per template (its prompt's), later positions spread over the rows
    for tpl in scn[0].templates:
        first = [c for c in cells if c.template is tpl and c.position == 0]
        assert len(first) == 1 and str(first[0].row) == tpl.features["first row"]
    assert len({c.row for c in cells if c.position == 3}) > 2


def test_the_reference_chain_kernel_against_the_models_is_equivalent() -> None:
    r = check(reference_model_kernel(), scale=0.5, seed=1)
    assert r.verdict == Verdict.EQUIVALENT, r.summary()
    assert all(t.component == "cell" for t in r.tests) and len(r.tests) > 30
    assert any("called the target" in f.text for f in r.findings)


def test_a_residual_drawn_from_the_target_is_shifted() -> None:
    r = check(residual_from_target_kernel(), scale=0.5, seed=1)
    assert r.verdict == Verdict.SHIFTED, r.summary()
    assert any(f.component == "cell" for f in r.findings)
    assert not r.violations


def _bad(emit: int | None = None, extra: bool = False) -> Kernel:
    ref = reference_model_kernel()

    def fn(req):  # noqa: ANN001, ANN202
        out = ref(req).tokens.clone()
        if emit is not None:
            out[::7, 0] = emit
        if extra:
            out = torch.cat([out, torch.zeros_like(out[:, :1])], dim=1)
            out[:, : req.k + 1] = torch.where(out[:, : req.k + 1] < 0, 0, out[:, : req.k + 1])
        return Outcome(tokens=out)

    return Kernel(fn, KernelSpec(layout="model", method="lossless", name="bad"))


@pytest.mark.parametrize(("kern", "kind"), [(_bad(emit=8), "id-range"), (_bad(extra=True), "padding")])
def test_broken_invariants_are_shifted_and_named(kern: Kernel, kind: str) -> None:
    r = check(kern, scale=0.1, seed=2)
    assert r.verdict == Verdict.SHIFTED
    assert kind in {v.kind for v in r.violations}, r.summary()


def test_a_model_layout_takes_the_lossless_method_only() -> None:
    with pytest.raises(ConfigError, match="model layout"):
        KernelSpec(layout="model", method="standard")
    assert KernelSpec(layout="model", method="lossless").layout == "model"


def test_the_lossless_chain_method_plans_no_length_law() -> None:
    spec = KernelSpec(layout="padded", method="lossless")
    tpl = default_scenarios(spec, scale=0.1)[0].templates[0]
    components = {p.component for p in plan(tpl, spec, 200)}
    assert components <= {"token", "bonus"} and "token" in components
    assert "length" in {p.component for p in plan(tpl, KernelSpec(layout="padded", method="standard"), 200)}


def test_the_builtin_model_kernels_resolve() -> None:
    from speceq.errors import EngineNotFound
    from speceq.kernels.resolve import resolve_kernel

    assert resolve_kernel("reference:model").spec.layout == "model"
    assert resolve_kernel("model:residual-from-target").name == "model:residual-from-target"
    with pytest.raises(EngineNotFound, match="known: chain"):
        resolve_kernel("model:nope")


def test_causal_logits_are_the_laws_after_every_prefix_of_the_input() -> None:
    m = TableModel(LAWS, salt=5)
    ids = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 1]])
    logits = m.causal_logits(ids)
    assert logits.shape == (2, 4, 3)
    for t in range(4):
        np.testing.assert_allclose(logits[:, t].exp().numpy(), m(ids[:, : t + 1]).numpy(), rtol=1e-6)
    assert torch.isneginf(logits).any()  # log 0 where a row has a zero


def test_uniforms_are_handed_in_when_declared_and_a_raising_kernel_is_named() -> None:
    from speceq.errors import EngineError

    ref = reference_model_kernel()
    seen = []

    def with_uniforms(req):  # noqa: ANN001, ANN202
        seen.append(req.uniforms)
        return ref(req)

    r = check(Kernel(with_uniforms, KernelSpec(layout="model", method="lossless", uniforms=True)), scale=0.05)
    u = seen[0]
    assert u is not None and u.dtype == torch.float64 and u.shape[1] == 4 * (3 + 1)
    assert 0.0 <= float(u.min()) and float(u.max()) < 1.0
    assert r.verdict == Verdict.EQUIVALENT
    calls = []

    def sometimes(req):  # noqa: ANN001, ANN202
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("boom")
        return ref(req)

    r = check(Kernel(sometimes, KernelSpec(layout="model", method="lossless")), scale=0.5)
    assert r.verdict == Verdict.SHIFTED and "raised" in {v.kind for v in r.violations}
    assert any("RuntimeError: boom" in v.example for v in r.violations)
    with pytest.raises(EngineError, match="raised on every call"):
        check(Kernel(lambda req: 1 / 0, KernelSpec(layout="model", method="lossless")), scale=0.05)


def test_the_lossless_chain_method_checks_the_token_laws_end_to_end() -> None:
    from speceq.kernels.kernel_mutants import make
    from speceq.kernels.reference_kernels import reference_kernel

    spec = KernelSpec(layout="padded", method="lossless", max_vocab=64)
    assert check(reference_kernel("padded", "standard"), spec, scale=0.2, solo=False).verdict == Verdict.EQUIVALENT
    bad = make("residual-from-target")
    r = check(bad, KernelSpec(layout=bad.spec.layout, method="lossless", max_vocab=64), scale=0.2, solo=False)
    assert r.verdict == Verdict.SHIFTED and "length" not in {t.component for t in r.tests}


def test_the_models_hand_out_exactly_the_rows_the_tests_use() -> None:
    scn = default_model_scenarios(3, scale=0.1)[0]
    target, draft = scn.models()
    np.testing.assert_array_equal(target.laws64, scn.target_laws)
    np.testing.assert_array_equal(draft.laws64, scn.draft_laws)
    prefixes = np.array([[a, b] for a in range(scn.vocab_size) for b in range(scn.vocab_size)])
    rows = target.row_of(prefixes)
    assert set(rows.tolist()) == set(range(scn.rows))
    np.testing.assert_array_equal(target(prefixes).numpy(), scn.target32[rows])
    np.testing.assert_array_equal(draft(prefixes).numpy(), scn.draft32[rows])
