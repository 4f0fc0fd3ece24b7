"""Run orchestration: planning, seeds, collection, resume after crashes, Ctrl-C, failures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent  # this folder: test_runner.py, for the crash script
TESTS = HERE.parent  # fake_engines.py (also on sys.path through tests/conftest.py)

from fake_engines import EOS, VOCAB, FakeEngine

from speceq.core.params import SamplingParams
from speceq.errors import ConfigError, EngineError, StoreError
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.fixed import collect
from speceq.pipeline.plan import chunk_seed, concat_batches, plan_chunks, slice_sizes
from speceq.pipeline.stopping import RunInterrupted
from speceq.store import SampleStore, load_samples_frame

REPO = TESTS.parent


def cases() -> list[Case]:
    return [
        Case(case_id="a", prompt_ids=(1, 2, 3), params=SamplingParams(max_new_tokens=5)),
        Case(case_id="b/odd id", prompt_ids=(4,), params=SamplingParams(temperature=0.7, max_new_tokens=4),
             batch_size=3, companions=((1, 1, 1, 1, 1), (2, 2))),
        Case(case_id="c", prompt_ids=(5, 6), params=SamplingParams(max_new_tokens=3, ignore_eos=True)),
    ]


def config(out: Path, **kw) -> RunConfig:
    return RunConfig(**{"baseline": "fake_engines:FakeEngine", "candidate": "fake_engines:FakeEngine",
                        "samples": 50, "chunk_size": 20, "seed": 7, "out_dir": out, "progress": False, **kw})


def engines(**candidate_options) -> dict[str, FakeEngine]:
    return {"baseline": FakeEngine(), "candidate": FakeEngine(**candidate_options)}


def frame(out: Path):
    return load_samples_frame(out).sort_values(["engine", "case", "slice", "row"]).reset_index(drop=True)


def test_chunk_seeds_are_deterministic_and_distinct():
    seeds = {chunk_seed(s, r, c, i) for s in (0, 1) for r in ("baseline", "candidate")
             for c in ("a", "b", "a ") for i in range(50)}
    assert len(seeds) == 2 * 2 * 3 * 50
    assert all(0 <= s < 2**63 for s in seeds)
    assert chunk_seed(3, "candidate", "x", 2) == chunk_seed(3, "candidate", "x", 2)


def test_slice_sizes():
    assert slice_sizes(50, 20) == [20, 20, 10]
    assert slice_sizes(40, 20) == [20, 20]
    assert slice_sizes(5, 20) == [5]


def test_plan_covers_every_case_role_and_slice(tmp_path):
    plan = plan_chunks(config(tmp_path), cases(), engines())
    assert len(plan) == 3 * 2 * 3
    assert [(c.role, c.case.case_id, c.slice_index, c.n) for c in plan[:6]] == [
        ("baseline", "a", 0, 20), ("baseline", "a", 1, 20), ("baseline", "a", 2, 10),
        ("candidate", "a", 0, 20), ("candidate", "a", 1, 20), ("candidate", "a", 2, 10)]
    assert len({c.seed for c in plan}) == len(plan)
    req = plan[3].request()
    assert req.n == 20 and req.seed == plan[3].seed and req.prompts == ((1, 2, 3),)
    assert plan[7].request().batch_size == 3 and len(plan[7].request().prompts) == 3
    ident = plan[0].key.identity
    assert ident["engine"]["code"]["file"] == "fake_engines.py" and len(ident["engine"]["code"]["sha256"]) == 64
    assert plan[2].key.samples == 10 and plan[2].key.file_name == "slice-00002-n10.npz"
    assert ident["engine"]["config"] == {"engine": "fake", "shift": 0.0, "vocab": 8}
    assert ident["case"]["params"]["max_new_tokens"] == 5 and ident["n"] == 20 and ident["run_seed"] == 7


def test_collect_joins_every_case_in_slice_order(tmp_path):
    got = collect(config(tmp_path), cases(), engines())
    assert (got.chunks_total, got.chunks_reused, got.chunks_sampled) == (18, 0, 18)
    b = got.baseline["b/odd id"]
    assert b.rows == 50 * 3 and b.tokens.shape == (150, 4)
    np.testing.assert_array_equal(b.prompt_index, np.tile([0, 1, 2], 50))
    assert got.candidate["c"].lengths.tolist() == [3] * 50
    assert not (got.candidate["c"].tokens == EOS).any()
    assert got.baseline["a"].wall_time_s == pytest.approx(0.05)
    # baseline and candidate draw independent streams although the engines are identical
    assert not np.array_equal(got.baseline["a"].tokens, got.candidate["a"].tokens)


def test_identical_rerun_reproduces_identical_samples(tmp_path):
    collect(config(tmp_path / "one"), cases(), engines())
    collect(config(tmp_path / "two"), cases(), engines())
    f1, f2 = frame(tmp_path / "one"), frame(tmp_path / "two")
    assert len(f1) == 2 * (50 + 150 + 50)
    assert f1.equals(f2)
    f3 = frame(tmp_path / "one")
    collect(config(tmp_path / "three", seed=8), cases(), engines())
    assert not f3["tokens"].equals(frame(tmp_path / "three")["tokens"])


def test_resume_reuses_every_stored_chunk(tmp_path):
    collect(config(tmp_path), cases(), engines())
    again = engines()
    got = collect(config(tmp_path), cases(), again)
    assert (got.chunks_reused, got.chunks_sampled) == (18, 0)
    assert again["baseline"].calls == again["candidate"].calls == 0


def test_more_samples_add_slices_and_reuse_the_full_ones(tmp_path):
    collect(config(tmp_path, samples=40), cases(), engines())
    small = frame(tmp_path)
    got = collect(config(tmp_path, samples=80), cases(), engines())
    assert (got.chunks_reused, got.chunks_sampled) == (12, 12)
    big = frame(tmp_path)
    assert big[big["slice"] < 2].reset_index(drop=True).equals(small)


def assert_same_samples(a, b) -> None:
    """Two collections hold the same rows, case by case and engine by engine."""
    for role in ("baseline", "candidate"):
        left, right = getattr(a, role), getattr(b, role)
        assert left.keys() == right.keys()
        for cid in left:
            for name in ("tokens", "lengths", "prompt_index"):
                np.testing.assert_array_equal(getattr(left[cid], name), getattr(right[cid], name), err_msg=cid)


def test_growing_and_shrinking_the_budget_reuses_the_store_and_matches_a_fresh_run(tmp_path):
    out = tmp_path / "same-out"
    collect(config(out, samples=50), cases(), engines())  # slices of 20, 20, 10
    grown = collect(config(out, samples=70), cases(), engines())  # 20, 20, 20, 10
    assert (grown.chunks_total, grown.chunks_reused, grown.chunks_sampled) == (24, 12, 12)
    assert_same_samples(grown, collect(config(tmp_path / "fresh70", samples=70), cases(), engines()))
    back = collect(config(out, samples=50), cases(), engines())  # the 10-sample slice 2 is still stored
    assert (back.chunks_reused, back.chunks_sampled) == (18, 0)
    assert_same_samples(back, collect(config(tmp_path / "fresh50", samples=50), cases(), engines()))
    shrunk = collect(config(out, samples=30), cases(), engines())  # 20, 10: only slice 1 at 10 is new
    assert (shrunk.chunks_reused, shrunk.chunks_sampled) == (6, 6)
    assert_same_samples(shrunk, collect(config(tmp_path / "fresh30", samples=30), cases(), engines()))


def test_editing_a_file_engine_invalidates_its_stored_chunks(tmp_path):
    from speceq.engines.registry import resolve_engine

    path = tmp_path / "my_engine.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(TESTS)!r})\nfrom fake_engines import FakeEngine\n\n\n"
                    "class MyEngine(FakeEngine):\n    pass\n")
    spec = f"{path}:MyEngine"
    cfg = config(tmp_path / "out", baseline=spec, candidate=spec)
    mine = {"baseline": resolve_engine(spec), "candidate": resolve_engine(spec)}
    assert collect(cfg, cases(), mine).chunks_sampled == 18
    assert collect(cfg, cases(), mine).chunks_reused == 18
    path.write_text(path.read_text() + "    # edited: a new sampling rule\n")
    with pytest.raises(StoreError, match=r"engine\.code\.sha256: stored '[0-9a-f]{12}"):
        collect(cfg, cases(), mine)


def test_changed_config_on_resume_is_refused_naming_case_engine_and_field(tmp_path):
    collect(config(tmp_path), cases(), engines())
    with pytest.raises(StoreError, match=r"baseline samples of case 'a' \(slice 0\).*run_seed: stored 7, now 8"):
        collect(config(tmp_path, seed=8), cases(), engines())
    with pytest.raises(StoreError, match=r"candidate samples of case 'a'.*engine.config.shift: stored 0.0, now 0.1"):
        collect(config(tmp_path), cases(), engines(shift=0.1))
    changed = [Case(case_id="a", prompt_ids=(1, 2, 3), params=SamplingParams(max_new_tokens=5, top_k=3))]
    with pytest.raises(StoreError, match=r"case.params.top_k: stored 0, now 3"):
        collect(config(tmp_path), changed, engines())
    # --fresh discards the old samples instead
    got = collect(config(tmp_path, seed=8, resume=False), cases(), engines())
    assert got.chunks_sampled == 18


def test_engine_failure_names_case_and_engine_and_keeps_finished_chunks(tmp_path):
    with pytest.raises(EngineError, match=r"engine 'fake', case 'a': sample\(\) failed on slice 1: RuntimeError"):
        collect(config(tmp_path), cases(), {"baseline": FakeEngine(fail_on_call=2),
                                            "candidate": FakeEngine()})
    assert len(SampleStore(tmp_path).keys()) == 1
    resumed = collect(config(tmp_path), cases(), engines())
    assert (resumed.chunks_reused, resumed.chunks_sampled) == (1, 17)
    collect(config(tmp_path / "clean"), cases(), engines())
    assert frame(tmp_path).equals(frame(tmp_path / "clean"))


def test_invalid_engine_output_is_an_engine_error(tmp_path):
    with pytest.raises(EngineError, match=r"engine 'fake', case 'a': token 13 \(row 0, prompt index 0, position 0\) is outside"):
        collect(config(tmp_path), cases(), {"baseline": FakeEngine(bad_output_on_call=1), "candidate": FakeEngine()})
    assert SampleStore(tmp_path).keys() == []


def test_prompt_outside_engine_vocabulary_is_a_config_error_before_any_sample(tmp_path):
    from speceq.pipeline.runner import run

    bad = [Case(case_id="wide", prompt_ids=(1, 9))]
    eng = engines()
    with pytest.raises(ConfigError, match=r"case 'wide'.prompt: token 1 is 9, outside the vocabulary \[0, 8\).*baseline"):
        run(config(tmp_path, oracle=False), bad, engines=eng)
    assert eng["baseline"].calls == eng["candidate"].calls == 0


@pytest.fixture
def sigint_default():
    """Python's default SIGINT handler for the test, whatever the test run started with (``nohup``,
    a background job: SIGINT ignored); the handler in place before is put back afterwards."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_ctrl_c_stops_after_the_current_chunk_is_stored_and_resume_finishes(tmp_path, sigint_default):
    eng = {"baseline": FakeEngine(sigint_on_calls=(3,)), "candidate": FakeEngine()}
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(RunInterrupted) as e:
        collect(config(tmp_path), cases(), eng)
    assert "3 of 18 chunks are stored" in e.value.message and "resume" in e.value.message
    assert isinstance(e.value, KeyboardInterrupt)
    assert len(SampleStore(tmp_path).keys()) == 3  # the chunk being sampled was stored
    assert signal.getsignal(signal.SIGINT) is before
    got = collect(config(tmp_path), cases(), engines())
    assert (got.chunks_reused, got.chunks_sampled) == (3, 15)
    collect(config(tmp_path / "clean"), cases(), engines())
    assert frame(tmp_path).equals(frame(tmp_path / "clean"))


def test_ctrl_c_handling_puts_back_an_ignored_sigint(tmp_path):
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job of a shell script
    try:
        with pytest.raises(RunInterrupted, match="3 of 18 chunks are stored"):
            collect(config(tmp_path), cases(), {"baseline": FakeEngine(sigint_on_calls=(3,)),
                                                "candidate": FakeEngine()})
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_second_ctrl_c_stops_at_once_without_storing_the_chunk(tmp_path, sigint_default):
    eng = {"baseline": FakeEngine(sigint_on_calls=(2, 2)), "candidate": FakeEngine()}
    with pytest.raises(RunInterrupted, match="1 of 18 chunks are stored"):
        collect(config(tmp_path), cases(), eng)
    assert len(SampleStore(tmp_path).keys()) == 1


def test_run_config_validation_names_the_field(tmp_path):
    for kw, field in [({"samples": 0}, "samples"), ({"chunk_size": 1.5}, "chunk_size"), ({"seed": -1}, "seed"),
                      ({"alpha": 1.0}, "alpha"), ({"tolerance": 0}, "tolerance"), ({"threads": 0}, "threads"),
                      ({"baseline": ""}, "baseline"), ({"candidate_options": [1]}, "candidate_options")]:
        with pytest.raises(ConfigError, match=rf"^run\.{field}: expected"):
            config(tmp_path, **kw)


def test_concat_batches_sums_counts_only_when_every_chunk_has_them():
    from speceq.engines.base import batch_from_lists

    a = batch_from_lists([[1], [2, 3]], np.array([0, 0]), 2, drafted_tokens=4, accepted_tokens=2, wall_time_s=1.0)
    b = batch_from_lists([[4, 5]], np.array([0]), 2, drafted_tokens=6, accepted_tokens=3, wall_time_s=0.5)
    c = batch_from_lists([[6]], np.array([0]), 2)
    ab = concat_batches([a, b])
    assert ab.rows == 3 and (ab.drafted_tokens, ab.accepted_tokens, ab.wall_time_s) == (10, 5, 1.5)
    assert ab.row_tokens(2) == [4, 5]
    assert concat_batches([a, c]).drafted_tokens is None


# ----- crash safety: SIGKILL the collecting process at several points, then resume -----

CRASH_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    sys.path[:0] = [{here!r}, {tests!r}, {repo!r}]
    import numpy as np
    import test_runner
    from fake_engines import FakeEngine
    from speceq.pipeline.fixed import collect

    point, at = sys.argv[1], int(sys.argv[2])
    if point == "write":  # die with a chunk half-written into its temp file
        real_savez, calls = np.savez, [0]
        def dying_savez(f, **arrays):
            calls[0] += 1
            if calls[0] == at:
                f.write(b"PK\\x03\\x04 partial chunk")
                f.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            real_savez(f, **arrays)
        np.savez = dying_savez
    kill = at if point == "sample" else None
    engines = {{"baseline": FakeEngine(), "candidate": FakeEngine(kill_on_call=kill)}}
    collect(test_runner.config(__import__("pathlib").Path({out!r})), test_runner.cases(), engines)
    print("finished")
""")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    out = tmp_path_factory.mktemp("uninterrupted")
    collect(config(out), cases(), engines())
    return frame(out)


@pytest.mark.parametrize("point,at,stored", [("sample", 1, 3), ("sample", 5, 10), ("write", 1, 0), ("write", 10, 9)])
def test_sigkill_then_resume_gives_the_uninterrupted_samples(tmp_path, uninterrupted, point, at, stored):
    out = tmp_path / "out"
    script = CRASH_SCRIPT.format(here=str(HERE), tests=str(TESTS), repo=str(REPO), out=str(out))
    proc = subprocess.run([sys.executable, "-c", script, point, str(at)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "finished" not in proc.stdout
    temps = [p for p in out.rglob("*.tmp")]
    assert (len(temps) == 1) == (point == "write")
    assert len(SampleStore(out).keys()) == stored
    got = collect(config(out), cases(), engines())
    assert (got.chunks_reused, got.chunks_sampled) == (stored, 18 - stored)
    assert not list(out.rglob("*.tmp"))
    assert frame(out).equals(uninterrupted)


def test_store_files_are_plain_npz_and_json(tmp_path):
    collect(config(tmp_path), cases()[:1], engines())
    files = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert files[0] == ".lock" and all(f.endswith(".npz") for f in files[1:]) and len(files) == 7
    with np.load(tmp_path / files[1], allow_pickle=False) as z:
        meta = json.loads(str(z["meta"][()]))
    assert meta["role"] == "baseline" and meta["identity"]["slice"] == 0


def test_run_writes_result_and_provenance(tmp_path):
    from speceq.pipeline.runner import run
    from speceq.verdicts.result import RunResult

    result = run(config(tmp_path, oracle=False, samples=40), cases(), engines=engines())
    assert [c.case_id for c in result.cases] == ["a", "b/odd id", "c"]
    assert RunResult.from_json((tmp_path / "result.json").read_text()) == result
    prov = json.loads((tmp_path / "provenance.json").read_text())
    assert prov == result.provenance
    assert prov["status"] == "complete" and prov["chunks"] == {"total": 12, "reused": 0, "sampled": 12,
                                                               "discarded_unreadable": []}
    assert prov["executor"] == "serial, in this process"
    assert prov["engines"]["baseline"]["code"]["file"] == "fake_engines.py"
    assert set(prov["packages"]) == {"speceq", "torch", "transformers", "numpy", "scipy"}
    assert prov["packages"]["numpy"] == np.__version__
    assert {"python", "platform", "machine", "cpu_count"} <= set(prov["machine"])
    assert prov["seeds"]["run_seed"] == 7 and "chunk_seed" in prov["seeds"]["derivation"]
    assert prov["engines"]["candidate"]["config"] == FakeEngine().describe()
    assert prov["engines"]["baseline"]["spec"] == "fake_engines:FakeEngine"
    assert prov["settings"]["samples"] == 40 and prov["settings"]["alpha"] == 1e-3
    assert [c["id"] for c in prov["cases"]] == ["a", "b/odd id", "c"] and prov["created"].endswith("+00:00")
    git = prov["git"]
    assert git is None or (len(git["commit"]) == 40 and isinstance(git["dirty"], bool))


def test_run_rejects_empty_and_duplicate_cases(tmp_path):
    from speceq.pipeline.runner import run

    with pytest.raises(ConfigError, match="no cases"):
        run(config(tmp_path), [], engines=engines())
    with pytest.raises(ConfigError, match=r"duplicate case ids \['a'\]"):
        run(config(tmp_path), [cases()[0], cases()[0]], engines=engines())


class FakeLawOracle:
    """The exact law of ``FakeEngine`` (shift 0): token t's law depends on t and the previous token."""

    vocab_size = VOCAB
    eos_token_id = EOS
    has_draft = False

    def knows_full_law(self, params) -> bool:
        return True

    def describe(self) -> dict:
        return {"model": "the fake engines' law"}

    def score(self, prompts, batch, params):
        from fake_engines import step_probs

        from speceq.stats.scores import TokenScores
        from speceq.stats.synthetic import scores_from_probs

        laws, toks, rows, pos = [], [], [], []
        for r in range(batch.rows):
            prev = len(prompts[int(batch.prompt_index[r])]) % VOCAB
            for t in range(int(batch.lengths[r])):
                p = step_probs(t, prev, 0.0)
                if params.ignore_eos:
                    p[EOS] = 0.0
                    p = p / p.sum()
                laws.append(p)
                toks.append(int(batch.tokens[r, t]))
                rows.append(r)
                pos.append(t)
                prev = toks[-1]
        s = scores_from_probs(np.array(laws), np.array(toks, dtype=np.int64))
        return TokenScores(**{**{f: getattr(s, f) for f in s.__dataclass_fields__}, "row": np.array(rows),
                              "position": np.array(pos), "raw_top2_margin": np.full(len(toks), 5.0)})

    def next_token_probs(self, prefixes, params):  # asked for the prompts only (position 0)
        from fake_engines import step_probs

        laws = np.array([step_probs(0, len(p) % VOCAB, 0.0) for p in prefixes])
        if params.ignore_eos:
            laws[:, EOS] = 0.0
        return laws / laws.sum(axis=1, keepdims=True)

    def raw_top2_margin(self, prefixes):
        raise AssertionError("not used by sampling cases")


def test_run_uses_the_given_oracle(tmp_path):
    """run(oracle=...) scores with that oracle (a shared RememberingOracle scores a rerun's rows once)."""
    from speceq.oracles.memo import RememberingOracle
    from speceq.pipeline.runner import run

    memo = RememberingOracle(FakeLawOracle())
    sampling = [cases()[0], cases()[2]]  # temperature 1: the fake law
    first = run(config(tmp_path / "one", oracle=True, samples=200), sampling, engines=engines(), oracle=memo)
    scored = memo.scored_rows
    assert scored > 0 and [c.verdict for c in first.cases] != ["shifted"] * 2
    assert json.loads((tmp_path / "one" / "provenance.json").read_text())["oracle"]["remembers_scored_rows"]
    again = run(config(tmp_path / "two", oracle=True, samples=200), sampling, engines=engines(), oracle=memo)
    assert memo.scored_rows == scored  # the same seeds draw the same rows: every one answered from memory
    assert [c.reason for c in again.cases] == [c.reason for c in first.cases]
    planted = run(config(tmp_path / "three", oracle=True, samples=200), sampling, engines=engines(shift=0.3),
                  oracle=memo)
    assert [c.verdict for c in planted.cases] == ["shifted", "shifted"]
    with pytest.raises(ConfigError, match="oracle is off"):
        run(config(tmp_path / "four", oracle=False), sampling, engines=engines(), oracle=memo)
