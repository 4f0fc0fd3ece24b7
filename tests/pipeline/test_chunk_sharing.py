"""pipeline/sharing.py: the links to shared chunk folders, one folder per chunk identity, one oracle per oracle."""

from __future__ import annotations

import dataclasses

import pytest
from fake_engines import FakeEngine

import speceq.oracles.build
from speceq.core.params import SamplingParams
from speceq.errors import ConfigError
from speceq.inputs.cases import Case
from speceq.pipeline.config import RunConfig
from speceq.pipeline.sharing import OracleShelf, link_folder, share_case_chunks, shared_case_folder
from speceq.store.chunks import CHUNKS_DIR, case_dir_name


def _case(temperature: float = 1.0) -> Case:
    return Case(case_id="c", prompt_ids=(1, 2), params=SamplingParams(temperature=temperature, max_new_tokens=3))


def test_link_folder_links_relatively_replaces_a_stray_link_and_refuses_a_real_folder(tmp_path):
    shared, other, link = tmp_path / "shared", tmp_path / "other", tmp_path / "run" / "chunks" / "baseline"
    link_folder(link, other, where="test")
    link_folder(link, shared, where="test")  # a link elsewhere is replaced
    assert link.is_symlink() and link.resolve() == shared.resolve() and not link.readlink().is_absolute()
    real = tmp_path / "run2" / "chunks" / "baseline"
    real.mkdir(parents=True)
    with pytest.raises(ConfigError, match="is a folder of its own, not the shared thing"):
        link_folder(real, shared, where="test", what="the shared thing")


def test_one_shared_folder_per_engine_case_and_seed(tmp_path):
    engines = {"baseline": FakeEngine(name="b"), "candidate": FakeEngine(name="c")}
    other = {"baseline": FakeEngine(name="b"), "candidate": FakeEngine(name="c", shift=0.3)}
    config = RunConfig(samples=10, out_dir=tmp_path / "run", oracle=False)
    folder = shared_case_folder(tmp_path, config, engines, _case(), "baseline")
    assert folder == shared_case_folder(tmp_path, config, other, _case(), "baseline")  # another candidate
    assert folder != shared_case_folder(tmp_path, config, engines, _case(0.5), "baseline")  # other parameters
    assert folder != shared_case_folder(tmp_path, dataclasses.replace(config, seed=1), engines, _case(), "baseline")
    assert folder != shared_case_folder(tmp_path, config, {**engines, "baseline": FakeEngine(name="b2")}, _case(),
                                        "baseline")
    candidate = shared_case_folder(tmp_path, config, engines, _case(), "candidate")
    assert candidate != shared_case_folder(tmp_path, config, other, _case(), "candidate")


def test_share_case_chunks_links_both_roles_keeps_real_folders_and_skips_sequential_runs(tmp_path):
    engines = {"baseline": FakeEngine(name="b"), "candidate": FakeEngine(name="c")}
    out = tmp_path / "run"
    kept = out / CHUNKS_DIR / "candidate" / case_dir_name("c")
    kept.mkdir(parents=True)
    share_case_chunks(tmp_path / "shared", RunConfig(samples=10, out_dir=out, oracle=False), engines, [_case()])
    assert (out / CHUNKS_DIR / "baseline" / case_dir_name("c")).is_symlink()
    assert kept.is_dir() and not kept.is_symlink()
    seq = tmp_path / "seq"
    share_case_chunks(tmp_path / "shared", RunConfig(samples=10, out_dir=seq, oracle=False, sequential=True), engines,
                      [_case()])
    assert not (seq / CHUNKS_DIR).exists()


def test_the_shelf_builds_each_oracle_once_and_remembers_its_rows(monkeypatch):
    built = []

    class _Oracle:
        vocab_size, eos_token_id, has_draft = 10, 9, False

        def describe(self) -> dict:
            return {"oracle": "fake"}

    def make(spec, engines):
        built.append(spec)
        return _Oracle()

    monkeypatch.setattr(speceq.oracles.build, "make_oracle", make)
    engines = {"baseline": FakeEngine(name="b"), "candidate": FakeEngine(name="c")}
    shelf = OracleShelf()
    config = RunConfig(samples=10)
    first = shelf.oracle_for(config, engines)
    assert shelf.oracle_for(config, engines) is first and len(built) == 1  # same engines: no second build
    other = {**engines, "candidate": FakeEngine(name="c2")}
    assert shelf.oracle_for(config, other) is first and len(built) == 2  # built, then the same oracle shared
    assert type(first).__name__ == "RememberingOracle"
    assert shelf.oracle_for(dataclasses.replace(config, oracle=False), engines) is None
