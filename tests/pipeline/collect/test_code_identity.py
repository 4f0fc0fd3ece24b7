"""The engine's code in every chunk fingerprint: what is hashed, and what is said when nothing can be."""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util

from speceq.engines.function import FunctionEngine
from speceq.pipeline.collect import code_identity
from speceq.pipeline.collect.code_identity import code_summary, engine_code_identity


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_function_engine_is_identified_by_its_source_file(tmp_path):
    path = tmp_path / "user_engine.py"
    path.write_text("def sample(prompt_ids, n, params, seed):\n    return [[1]] * n\n")
    engine = FunctionEngine(_load(path, "user_engine_for_identity").sample)
    ident = engine_code_identity(engine)
    assert ident == {"hashable": True, "scope": "defining file", "file": "user_engine.py",
                     "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert code_summary(ident) == f"user_engine.py sha256:{ident['sha256'][:12]}"


def test_an_engine_class_of_an_installed_package_carries_its_version():
    from rich.console import Console

    ident = engine_code_identity(object.__new__(Console))
    assert ident["file"] == "console.py" and ident["package"] == {"name": "rich",
                                                                  "version": importlib.metadata.version("rich")}
    assert f"(rich {ident['package']['version']})" in code_summary(ident)


def test_speceq_engines_are_identified_by_their_sources_and_an_edit_changes_it(tmp_path, monkeypatch):
    from speceq.engines.openai import OpenAICompletionsEngine

    ident = engine_code_identity(object.__new__(OpenAICompletionsEngine))  # class only: nothing is started
    assert ident["scope"] == "speceq engine sources" and ident["package"]["name"] == "speceq"
    assert ident["sha256"] == code_identity._speceq_sources_sha256()
    # the hash covers every engine source file: edit one (in a copy) and it changes
    (tmp_path / "engines").mkdir()
    (tmp_path / "engines" / "x.py").write_text("A = 1\n")
    (tmp_path / "processing.py").write_text("B = 1\n")
    (tmp_path / "stats.py").write_text("not an engine source\n")
    monkeypatch.setattr(code_identity, "_speceq_root", lambda: tmp_path)
    first = code_identity._speceq_sources_sha256()
    (tmp_path / "stats.py").write_text("edited analysis code\n")
    assert code_identity._speceq_sources_sha256() == first  # analysis edits keep stored samples valid
    (tmp_path / "engines" / "x.py").write_text("A = 2\n")
    assert code_identity._speceq_sources_sha256() != first


def test_an_engine_without_a_source_file_is_reported_as_not_hashable():
    namespace: dict = {"__name__": "made_in_a_session"}
    exec("def sample(prompt_ids, n, params, seed):\n    return [[1]] * n\n", namespace)
    ident = engine_code_identity(FunctionEngine(namespace["sample"]))
    assert ident["hashable"] is False and "sample" in ident["reason"]
    assert code_summary(ident).startswith("code not hashed: ")
