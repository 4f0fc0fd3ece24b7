"""resolve_engine: every plug-in form, the did-you-mean error, and option parsing."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from speceq.core.params import SamplingParams
from speceq.engines import registry
from speceq.engines.base import SampleRequest, validate_batch
from speceq.engines.baseline import BaselineEngine
from speceq.engines.function import FunctionEngine, prompt_seed
from speceq.engines.registry import list_engines, parse_engine_options, resolve_engine
from speceq.errors import ConfigError, EngineError, EngineNotFound

PLUGIN_SOURCE = textwrap.dedent(
    """
    import numpy as np
    from speceq.engines.base import batch_from_lists, SampleBatch

    def sample_fn(prompt_ids, n, params, seed):
        rng = np.random.default_rng(seed)
        return [[int(t) for t in rng.integers(0, 256, params.max_new_tokens)] for _ in range(n)]

    class ToyEngine:
        def __init__(self, token=65, name="toy"):
            self.token, self.name = token, name
            self.vocab_size, self.eos_token_id = 259, 257

        def describe(self):
            return {"engine": "toy", "token": self.token}

        def sample(self, request):
            rows = [[self.token] * request.params.max_new_tokens for _ in request.rows()]
            return batch_from_lists(rows, request.rows(), request.params.max_new_tokens)

    def make_toy(token=66):
        return ToyEngine(token=token, name="made")

    ENGINE = ToyEngine(token=67, name="instance")
    NOT_AN_ENGINE = 42
    """
)

REQUEST = SampleRequest(prompts=((1, 2), (3,)), params=SamplingParams(max_new_tokens=4), n=3, seed=9)


@pytest.fixture
def plugin_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"speceq_test_plugin_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def check(engine, name: str | None = None) -> None:
    batch = engine.sample(REQUEST)
    validate_batch(batch, REQUEST, engine)
    if name is not None:
        assert engine.name == name


def test_builtin_name_with_options(target) -> None:
    engine = resolve_engine("baseline", options={"target": target, "name": "base"})
    assert isinstance(engine, BaselineEngine)
    check(engine, "base")


def test_module_attr_class_factory_instance_and_function(plugin_module: str) -> None:
    check(resolve_engine(f"{plugin_module}:ToyEngine", options={"token": 70}), "toy")
    check(resolve_engine(f"{plugin_module}:make_toy"), "made")
    check(resolve_engine(f"{plugin_module}:ENGINE"), "instance")
    engine = resolve_engine(f"{plugin_module}:sample_fn", options={"name": "fn"})
    assert isinstance(engine, FunctionEngine)
    check(engine, "fn")


def test_file_path_attr(tmp_path: Path) -> None:
    path = tmp_path / "my_engine.py"
    path.write_text(PLUGIN_SOURCE)
    engine = resolve_engine(f"{path}:ToyEngine", options={"token": 71})
    check(engine, "toy")
    assert engine.token == 71


def test_entry_point(plugin_module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    ep = importlib.metadata.EntryPoint(name="toy-ep", value=f"{plugin_module}:ToyEngine", group="speceq.engines")

    def fake_entry_points(**kwargs):
        assert kwargs == {"group": "speceq.engines"}
        return [ep]

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    check(resolve_engine("toy-ep", options={"name": "from-ep"}), "from-ep")
    assert "toy-ep" in list_engines()


def test_broken_entry_point_names_its_target(monkeypatch: pytest.MonkeyPatch) -> None:
    ep = importlib.metadata.EntryPoint(name="broken", value="no_such_module_xyz:Engine", group="speceq.engines")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [ep])
    with pytest.raises(EngineNotFound, match="no_such_module_xyz"):
        resolve_engine("broken")


def test_instance_and_plain_function_objects() -> None:
    def sampler(prompt_ids, n, params, seed):
        return [[prompt_ids[-1]] * params.max_new_tokens for _ in range(n)]

    engine = resolve_engine(sampler, options={"vocab_size": 300, "eos_token_id": None})
    assert isinstance(engine, FunctionEngine) and engine.vocab_size == 300
    assert engine.name == "test_instance_and_plain_function_objects.<locals>.sampler"  # a function object: its qualname
    batch = engine.sample(REQUEST)
    validate_batch(batch, REQUEST, engine)
    np.testing.assert_array_equal(batch.tokens[:, 0], [2, 3, 2, 3, 2, 3])
    assert resolve_engine(engine) is engine


def test_mutant_prefix_calls_the_mutant_factory(plugin_module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_factory(name, **options):
        calls.append((name, options))
        return FunctionEngine(lambda p, n, params, seed: [[1]] * n, name=f"mutant-{name}")

    monkeypatch.setattr(registry, "_load_target", lambda target, label: fake_factory)
    engine = resolve_engine("mutant:bonus-from-draft", options={"k": 3})
    assert calls == [("bonus-from-draft", {"k": 3})] and engine.name == "mutant-bonus-from-draft"


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(EngineNotFound, match=r"Did you mean 'baseline'\?.*Known engines: baseline, reference"):
        resolve_engine("baselin")


def test_import_failures_name_what_failed(tmp_path: Path, plugin_module: str) -> None:
    with pytest.raises(EngineNotFound, match="cannot import module 'no_such_pkg_abc'"):
        resolve_engine("no_such_pkg_abc:Engine")
    with pytest.raises(EngineNotFound, match=r"has no attribute 'ToyEngin'\. Did you mean 'ToyEngine'"):
        resolve_engine(f"{plugin_module}:ToyEngin")
    with pytest.raises(EngineNotFound, match="does not exist"):
        resolve_engine(f"{tmp_path / 'missing.py'}:X")
    bad = tmp_path / "bad_engine.py"
    bad.write_text("raise RuntimeError('boom at import')\n")
    with pytest.raises(EngineNotFound, match="RuntimeError: boom at import"):
        resolve_engine(f"{bad}:X")


def test_options_that_do_not_fit_are_config_errors(plugin_module: str) -> None:
    with pytest.raises(ConfigError, match=r"unknown option\(s\) 'colour'\. Options it takes: token, name"):
        resolve_engine(f"{plugin_module}:ToyEngine", options={"colour": "red"})
    with pytest.raises(ConfigError, match="options .* do not fit"):  # a required parameter left out
        resolve_engine(lambda *, size: None, options={})
    with pytest.raises(ConfigError, match="engine instance already"):
        resolve_engine(f"{plugin_module}:ENGINE", options={"token": 1})
    with pytest.raises(ConfigError, match="unknown option"):
        resolve_engine(f"{plugin_module}:sample_fn", options={"k": 4})
    with pytest.raises(ConfigError, match="expected an Engine"):
        resolve_engine(f"{plugin_module}:NOT_AN_ENGINE")
    with pytest.raises(ConfigError, match="not an Engine"):
        resolve_engine(lambda: object())


def test_function_engine_checks_the_rows() -> None:
    short = FunctionEngine(lambda p, n, params, seed: [[1]] * (n - 1), name="short")
    with pytest.raises(EngineError, match="prompt 0: the function returned 2 rows, expected n=3"):
        short.sample(REQUEST)
    long = FunctionEngine(lambda p, n, params, seed: [[1] * 9] * n, name="long")
    with pytest.raises(EngineError, match="9 tokens, more than max_new_tokens=4"):
        long.sample(REQUEST)
    floats = FunctionEngine(lambda p, n, params, seed: [[1.5]] * n, name="floats")
    with pytest.raises(EngineError, match="not a list of integer token ids"):
        floats.sample(REQUEST)


def test_function_engine_seeds_are_per_prompt_and_reproducible() -> None:
    seen = []
    engine = FunctionEngine(lambda p, n, params, seed: seen.append(seed) or [[1]] * n)
    engine.sample(REQUEST)
    engine.sample(REQUEST)
    assert seen == [prompt_seed(9, 0), prompt_seed(9, 1)] * 2 and seen[0] != seen[1]


def test_parse_engine_options() -> None:
    parsed = parse_engine_options(["k=4", "temperature=0.5", "trace=true", "flag=True", "device=cpu", "dims=[1, 2]", "max-rows=8", "x=null"])
    assert parsed == {"k": 4, "temperature": 0.5, "trace": True, "flag": True, "device": "cpu", "dims": [1, 2], "max_rows": 8, "x": None}
    with pytest.raises(ConfigError, match="key=value"):
        parse_engine_options(["novalue"])
    with pytest.raises(ConfigError, match="given twice"):
        parse_engine_options(["k=1", "k=2"])


def test_importing_the_registry_imports_no_torch() -> None:
    code = "import sys, speceq.engines.registry, speceq.engines; print('torch' in sys.modules, 'transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    assert out.stdout.split() == ["False", "False"]


# ---- plugging a plain function in ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["list", "numpy rows", "numpy 2-D", "torch rows", "torch 2-D", "padded 2-D"])
def test_function_may_return_lists_arrays_or_tensors(kind: str) -> None:
    torch = pytest.importorskip("torch")

    def fn(prompt_ids, n, params, seed):
        rows = [[prompt_ids[-1], 5, 6, 7][: params.max_new_tokens] for _ in range(n)]
        if kind == "numpy rows":
            return [np.array(r, dtype=np.int32) for r in rows]
        if kind == "numpy 2-D":
            return np.array(rows, dtype=np.int64)
        if kind == "torch rows":
            return [torch.tensor(r) for r in rows]
        if kind == "torch 2-D":
            return torch.tensor(rows)
        if kind == "padded 2-D":  # rows padded with -1 after their end: cut there
            return np.array([[prompt_ids[-1], 257, -1, -1]] * n)
        return rows

    engine = resolve_engine(fn)
    batch = engine.sample(REQUEST)
    validate_batch(batch, REQUEST, engine)
    np.testing.assert_array_equal(batch.tokens[:, 0], [2, 3, 2, 3, 2, 3])
    assert (batch.lengths == (2 if kind == "padded 2-D" else 4)).all()


def test_function_returning_an_array_of_the_wrong_shape_says_so() -> None:
    engine = FunctionEngine(lambda p, n, params, seed: np.zeros((n, 2, 2), dtype=np.int64), name="cube")
    with pytest.raises(EngineError, match=r"returned ndarray of shape \(3, 2, 2\), expected 3 token lists"):
        engine.sample(REQUEST)


def test_params_read_as_attributes_and_as_a_mapping() -> None:
    seen = {}

    def fn(prompt_ids, n, params, seed):
        seen.update(attr=params.temperature, item=params["temperature"], as_dict=dict(params),
                    get=params.get("top_k"), is_params=isinstance(params, SamplingParams))
        return [[1] * params["max_new_tokens"]] * n

    resolve_engine(fn).sample(REQUEST)
    assert seen["attr"] == seen["item"] == 1.0 and seen["get"] == 0 and seen["is_params"]
    stored = SamplingParams(max_new_tokens=4).to_dict()  # the stored form omits the request fields left off
    assert {k: seen["as_dict"][k] for k in stored} == stored
    assert seen["as_dict"]["min_p"] == 0.0 and seen["as_dict"]["logit_bias"] == ()

    def bad_key(prompt_ids, n, params, seed):
        return params["temprature"]

    with pytest.raises(KeyError, match="'temprature' is not a sampling parameter; known: temperature"):
        resolve_engine(bad_key).sample(REQUEST)


@pytest.mark.parametrize("source, got", [
    ("def sample(prompt_ids, n, params):\n    return []\n", "3 required positional parameter(s) (prompt_ids, n, params)"),
    ("def sample(prompt_ids, n, params, seed, extra):\n    return []\n", "5 required positional parameter(s)"),
])
def test_wrong_signature_says_the_expected_one_and_what_it_got(tmp_path: Path, source: str, got: str) -> None:
    path = tmp_path / "my_engine.py"
    path.write_text(source)
    with pytest.raises(ConfigError) as info:
        resolve_engine(f"{path}:sample")
    message = str(info.value)
    assert "expected the signature fn(prompt_ids, n, params, seed)" in message and got in message
    assert "do not fit" not in message


def test_function_engine_is_named_by_the_spec_typed(tmp_path: Path) -> None:
    path = tmp_path / "my_engine.py"
    path.write_text("def _wrap(f):\n    def fn(prompt_ids, n, params, seed):\n        return f(n)\n    return fn\n"
                    "sample = _wrap(lambda n: [[1]] * n)\n")
    spec = f"{path}:sample"
    engine = resolve_engine(spec)
    assert engine.name == spec and "_wrap" not in engine.name
    assert resolve_engine(spec, options={"name": "mine"}).name == "mine"


def test_check_engine_spec_fails_fast_without_building(tmp_path: Path, plugin_module: str) -> None:
    built = []
    monkey = tmp_path / "counting.py"
    monkey.write_text("built = []\nclass E:\n    def __init__(self):\n        built.append(1)\n")
    registry.check_engine_spec(f"{monkey}:E")  # imports the file, does not call E
    assert built == []
    registry.check_engine_spec("baseline")
    registry.check_engine_spec(f"{plugin_module}:ToyEngine")
    with pytest.raises(EngineNotFound, match="has no attribute 'ToyEngin'"):
        registry.check_engine_spec(f"{plugin_module}:ToyEngin")
    with pytest.raises(EngineNotFound, match="Did you mean 'baseline'"):
        registry.check_engine_spec("baselin")
    with pytest.raises(EngineNotFound, match="does not exist"):
        registry.check_engine_spec(f"{tmp_path / 'nope.py'}:fn")


@pytest.mark.parametrize("spec", ["baseline", "reference", "hf-sample", "mutant:greedy-acceptance"])
def test_model_option_names_target_and_every_option(spec: str) -> None:
    """`--baseline-option model=DIR` used to fail with a bare signature dump: the error names
    the option that exists (target) and lists the engine's options. No model is loaded."""
    with pytest.raises(ConfigError) as info:
        resolve_engine(spec, options={"model": "some/folder"})
    message = str(info.value)
    assert "unknown option(s) 'model'" in message
    assert "given as target=..." in message
    assert "Options it takes:" in message and "target" in message.split("Options it takes:")[1]
    assert "device" in message.split("Options it takes:")[1]


def test_unknown_option_suggests_close_names() -> None:
    with pytest.raises(ConfigError, match=r"'dtyp': did you mean 'dtype'\?"):
        resolve_engine("baseline", options={"dtyp": "bfloat16"})
    with pytest.raises(ConfigError, match=r"the draft model is given as draft=\.\.\. \(not assistant_model"):
        resolve_engine("hf-assisted", options={"assistant_model": "x"})
