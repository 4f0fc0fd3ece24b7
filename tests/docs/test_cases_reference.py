"""The examples of docs/reference/cases.md that name a tokenizer parse as the page says (#47 item 10).

``"tokenizer": "smollm2"`` resolves, at load time, to the folder ``speceq smollm2 prepare`` made on
this machine. The tests stand a small chat tokenizer in for the prepared SmolLM2 target: the byte
tokenizer's Hugging Face folder with a ChatML-like template, installed under ``$SPECEQ_CACHE`` at
the hashed key ``prepare`` uses, with its manifest, so the expected ids can be written down
without the 538 MB model.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from speceq.errors import ConfigError
from speceq.inputs.cases import parse_cases_text
from speceq.models.tokenizer import write_hf_tokenizer

REPO = Path(__file__).resolve().parents[2]
CASES_PAGE = REPO / "docs" / "reference" / "cases.md"
BOS, EOS = 256, 257
TEMPLATE = ("{% for m in messages %}<bos>{{ m['role'] }}\n{{ m['content'] }}<eos>\n{% endfor %}"
            "{% if add_generation_prompt %}<bos>assistant\n{% endif %}")


def chat_ids(*turns: tuple[str, str]) -> tuple[int, ...]:
    """What TEMPLATE renders, as ids: <bos>role\\ncontent<eos>\\n per turn, then <bos>assistant\\n."""
    out: list[int] = []
    for role, content in turns:
        out += [BOS, *f"{role}\n{content}".encode(), EOS, *b"\n"]
    return tuple(out + [BOS, *b"assistant\n"])


def json_examples(must_hold: str) -> list[str]:
    blocks = re.findall(r"```json\n(.*?)```", CASES_PAGE.read_text(encoding="utf-8"), re.S)
    found = [b for b in blocks if must_hold in b]
    assert found, f"no JSON example of {CASES_PAGE.name} holds {must_hold!r}"
    return found


@pytest.fixture()
def prepared_smollm2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in SmolLM2 target, where ``speceq smollm2 prepare`` puts the real one."""
    from speceq.models.model_cache import CACHE_ENV, cached_folder
    from speceq.models.smollm2 import target_key

    source = tmp_path / "chat-tok"
    write_hf_tokenizer(source)
    config = json.loads((source / "tokenizer_config.json").read_text())
    config.update(chat_template=TEMPLATE, split_special_tokens=False)
    (source / "tokenizer_config.json").write_text(json.dumps(config))
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))

    def build(folder: Path) -> dict:
        for f in source.iterdir():
            shutil.copy(f, folder / f.name)
        return {"source": "test stand-in"}

    return cached_folder(target_key(), build).path


def test_the_named_tokenizer_example_parses_with_the_prepared_smollm2(prepared_smollm2: Path, tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    (body,) = json_examples('"id": "plain-text"')
    elsewhere = tmp_path / "repo"  # the cases file's own folder holds no tokenizer: the name is resolved
    elsewhere.mkdir()
    capital, plain = parse_cases_text(body, fmt="json", source="smollm2-chat.json", base_dir=elsewhere)
    assert capital.prompt_ids == chat_ids(("system", "Answer with one word."), ("user", "Capital of France?"))
    expected = Tokenizer.from_file(str(prepared_smollm2 / "tokenizer.json")).encode("The capital of France is").ids
    assert plain.prompt_ids == tuple(expected) and plain.params.temperature == 0.7


def test_the_chat_example_parses_with_the_prepared_smollm2(prepared_smollm2: Path, tmp_path: Path) -> None:
    (body,) = json_examples('"id": "brief"')
    assert '"tokenizer": "smollm2"' in body
    capital, brief = parse_cases_text(body, fmt="json", base_dir=tmp_path)
    assert capital.prompt_ids == chat_ids(("user", "What is the capital of France?"))
    assert brief.prompt_ids == chat_ids(("system", "Answer in one word."), ("user", "Name a colour."))
    assert brief.companions[0] == chat_ids(("user", "Say hi."))


def test_smollm2_before_prepare_names_the_field_and_says_how(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from speceq.models.model_cache import CACHE_ENV

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "empty-cache"))
    (body,) = json_examples('"id": "plain-text"')
    with pytest.raises(ConfigError, match=r"smollm2-chat.json: defaults, field 'tokenizer': tokenizer 'smollm2': the "
                                          r"SmolLM2 model is not prepared on this machine .*run speceq smollm2 prepare"):
        parse_cases_text(body, fmt="json", source="smollm2-chat.json", base_dir=tmp_path)


def test_bpe_names_the_bundled_bpe_tokenizer_and_a_dot_path_is_still_a_path(tmp_path: Path) -> None:
    from speceq.models.bpe import load_bpe_tokenizer

    (case,) = parse_cases_text('{"cases": [{"id": "b", "prompt": "def f(x):", "tokenizer": "bpe"}]}', fmt="json",
                               base_dir=tmp_path)
    assert case.prompt_ids == tuple(load_bpe_tokenizer().encode("def f(x):").ids)
    with pytest.raises(ConfigError, match=r"tokenizer './bpe' is neither a name \(bytes, bpe, smollm2\) nor an "
                                          r"existing tokenizer.json"):
        parse_cases_text('{"cases": [{"id": "b", "prompt": "x", "tokenizer": "./bpe"}]}', fmt="json",
                         base_dir=tmp_path)
