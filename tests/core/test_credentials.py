"""Credentials are masked in everything speceq writes or prints (#47): URLs, options, error lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speceq.core.credentials import MASK, redact, redact_text, redact_url
from speceq.core.provenance import collect_provenance
from speceq.store import write_json_atomic

SECRETS = ("s3cr3t-PW", "QUERYKEY123", "sk-live-OPTION", "HDRTOKEN")
URL = "http://alice:s3cr3t-PW@10.0.0.7:8000/v1?api_key=QUERYKEY123&model=m"


def assert_clean(text: str) -> None:
    leaked = [s for s in SECRETS if s in text]
    assert not leaked, f"{leaked} in {text!r}"


@pytest.mark.parametrize("url,expected", [
    (URL, f"http://{MASK}@10.0.0.7:8000/v1?api_key={MASK}&model=m"),
    ("https://tok@host/v1", f"https://{MASK}@host/v1"),
    ("http://host:8000/v1?token=QUERYKEY123", f"http://host:8000/v1?token={MASK}"),
    ("http://127.0.0.1:8301", "http://127.0.0.1:8301"),  # nothing to mask: unchanged
    ("mailto-like user@example.com text", "mailto-like user@example.com text"),  # not a URL's userinfo
])
def test_redact_url_masks_userinfo_and_secret_query_parameters(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_text_masks_assignments_and_bearer_tokens_but_not_option_names() -> None:
    text = (f"options {{'api_key': 'sk-live-OPTION', 'api_key_env': 'OPENAI_API_KEY', 'base_url': '{URL}'}}; "
            "password=s3cr3t-PW; Authorization: Bearer HDRTOKEN; api_key_set True; tokenizer=/m")
    out = redact_text(text)
    assert_clean(out)
    assert "'api_key_env': 'OPENAI_API_KEY'" in out and "api_key_set True" in out and "tokenizer=/m" in out
    assert f"'api_key': '{MASK}'" in out and f"Bearer {MASK}" in out


def test_redact_masks_secret_keys_and_urls_of_a_document_and_keeps_the_rest() -> None:
    doc = {"engines": {"candidate": {"options": {"base_url": URL, "api_key": "sk-live-OPTION", "n": 3,
                                                 "api_key_env": "KEY_VAR"},
                                     "config": {"api_root": URL, "tokens": [1, 2], "text": "a password: hi"}}}}
    out = redact(doc)
    assert_clean(json.dumps(out))
    opts = out["engines"]["candidate"]["options"]
    assert opts["api_key"] == MASK and opts["n"] == 3 and opts["api_key_env"] == "KEY_VAR"
    assert out["engines"]["candidate"]["config"]["text"] == "a password: hi"  # free text of a document is kept
    assert doc["engines"]["candidate"]["options"]["api_key"] == "sk-live-OPTION"  # a copy: the input is untouched
    assert redact({"a": (1, "x"), "b": None}) == {"a": (1, "x"), "b": None}


def test_provenance_and_every_json_written_are_masked(tmp_path: Path) -> None:
    prov = collect_provenance(seeds={"run_seed": 0}, settings={"oracle_server": URL},
                              engines={"candidate": {"options": {"base_url": URL, "api_key": "sk-live-OPTION"}}})
    assert_clean(json.dumps(prov))
    write_json_atomic(tmp_path / "x.json", {"base_url": URL, "password": "s3cr3t-PW"})
    assert_clean((tmp_path / "x.json").read_text())


def test_engine_identities_mask_credentials_so_chunks_and_results_never_hold_them(tmp_path: Path) -> None:
    from fake_engines import FakeEngine

    from speceq.pipeline.config import RunConfig
    from speceq.pipeline.plan import engine_identities

    config = RunConfig(oracle=False, out_dir=tmp_path, candidate_options={"api_key": "sk-live-OPTION", "url": URL})
    ident = engine_identities(config, {"baseline": FakeEngine(), "candidate": FakeEngine()})
    assert_clean(json.dumps(ident))
    assert ident["candidate"]["options"]["api_key"] == MASK


def test_the_openai_engine_masks_its_url_in_describe_and_errors() -> None:
    from speceq.engines.openai import OpenAICompletionsEngine
    from speceq.errors import ConfigError

    engine = OpenAICompletionsEngine(URL)
    assert_clean(json.dumps(engine.describe()))
    with pytest.raises(ConfigError) as e:
        OpenAICompletionsEngine("ftp://alice:s3cr3t-PW@host/")
    assert_clean(str(e.value))
