"""Chat cases: ``messages`` rendered with the tokenizer's own chat template and generation prompt.

The tokenizer is the byte tokenizer's Hugging Face folder (``write_hf_tokenizer``: ids = bytes,
``<bos>`` = 256, ``<eos>`` = 257) with a small ChatML-like template added, so the expected ids
can be written down without transformers: special tokens by id, everything else byte by byte.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from speceq.errors import ConfigError
from speceq.inputs.cases import load_cases
from speceq.models.tokenizer import write_hf_tokenizer

BOS, EOS = 256, 257
TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] not in ['system', 'user', 'assistant'] %}{{ raise_exception('unknown role ' + m['role']) }}{% endif %}"
    "<bos>{{ m['role'] }}\n{{ m['content'] }}<eos>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<bos>assistant\n{% endif %}"
)


def _bytes(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def chat_ids(*turns: tuple[str, str]) -> tuple[int, ...]:
    """What TEMPLATE renders, as ids: <bos>role\\ncontent<eos>\\n per turn, then <bos>assistant\\n."""
    out: list[int] = []
    for role, content in turns:
        out += [BOS, *_bytes(f"{role}\n{content}"), EOS, *_bytes("\n")]
    return tuple(out + [BOS, *_bytes("assistant\n")])


@pytest.fixture()
def chat_tokenizer(tmp_path: Path) -> Path:
    folder = tmp_path / "chat-tok"
    write_hf_tokenizer(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = TEMPLATE
    config["split_special_tokens"] = False  # the bundled folder splits them; chat models' tokenizers do not
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def write(tmp_path: Path, doc) -> Path:
    p = tmp_path / "cases.json"
    p.write_text(json.dumps(doc), encoding="utf-8")
    return p


def test_messages_render_with_the_chat_template_and_generation_prompt(tmp_path: Path, chat_tokenizer: Path) -> None:
    doc = {
        "defaults": {"tokenizer": "chat-tok", "max_new_tokens": 4},
        "cases": [
            {"id": "one-turn", "messages": [{"role": "user", "content": "Hi!"}]},
            {"id": "system-and-user", "batch_size": 4,
             "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
             "companions": [[{"role": "user", "content": "Name a colour."}], "plain text", [1, 2, 3]]},
        ],
    }
    a, b = load_cases(write(tmp_path, doc))
    assert a.prompt_ids == chat_ids(("user", "Hi!"))
    assert a.text == "<bos>user\nHi!<eos>\n<bos>assistant\n"  # the rendered chat, for display
    assert b.prompt_ids == chat_ids(("system", "Be brief."), ("user", "2+2?"))
    assert b.companions[0] == chat_ids(("user", "Name a colour."))
    assert b.companions[1][-10:] == tuple(_bytes("plain text")) and b.companions[2] == (1, 2, 3)


CHAT_ERRORS = [
    ({"messages": "hi"}, "messages", r"expected a list of \{'role': \.\.\., 'content': \.\.\.\} objects, got a string"),
    ({"messages": []}, "messages", r"empty chat"),
    ({"messages": ["hi"]}, "messages[0]", r"expected an object with 'role' and 'content', got a string"),
    ({"messages": [{"rol": "user", "content": "x"}]}, "messages[0].rol", r"unknown field 'rol' \(did you mean 'role'\?\)"),
    ({"messages": [{"role": "user"}]}, "messages[0]", r"missing 'content'"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content", r"expected a string, got int 3"),
    ({"messages": [{"role": "", "content": "x"}]}, "messages[0].role", r"expected a non-empty string"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages",
     r"the chat template of .* refuses these messages: unknown role robot"),
    ({"messages": [{"role": "user", "content": "x"}], "prompt": "x"}, "prompt", r"exactly one of 'prompt'"),
    ({"messages": [{"role": "user", "content": "x"}], "tokenizer": "bytes"}, "messages",
     r"the 'bytes' tokenizer has no chat template"),
    ({"prompt": "x", "companions": [[{"role": "user"}]]}, "companions[0][0]", r"missing 'content'"),
]


@pytest.mark.parametrize("bad,field,message", CHAT_ERRORS, ids=[f"{i}-{e[1]}" for i, e in enumerate(CHAT_ERRORS)])
def test_chat_errors_name_file_case_and_field(tmp_path: Path, chat_tokenizer: Path, bad, field: str,
                                              message: str) -> None:
    p = write(tmp_path, {"defaults": {"tokenizer": "chat-tok"},
                         "cases": [{"id": "ok", "prompt": "fine"}, {"id": "c", **bad}]})
    with pytest.raises(ConfigError) as info:
        load_cases(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: case 1 (id 'c'), field '{field}': "), msg
    assert re.search(message, msg), msg


def test_a_tokenizer_without_a_chat_template_is_named(tmp_path: Path) -> None:
    write_hf_tokenizer(tmp_path / "plain-tok")
    p = write(tmp_path, {"cases": [{"id": "c", "tokenizer": "plain-tok",
                                    "messages": [{"role": "user", "content": "x"}]}]})
    with pytest.raises(ConfigError, match=r"case 0 \(id 'c'\), field 'messages': the tokenizer in .*plain-tok has no "
                                          r"chat template"):
        load_cases(p)
