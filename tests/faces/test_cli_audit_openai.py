"""speceq audit openai: named OpenAI-compatible endpoints, the plain one as baseline (fake servers on loopback)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engines"))
from fake_openai_server import FakeOpenAIServer  # noqa: E402

from speceq.errors import ConfigError  # noqa: E402
from speceq.faces.cli import main  # noqa: E402
from speceq.faces.cli_audit import load_servers  # noqa: E402
from speceq.pipeline.audit import AUDIT_JSON, NOT_RUN, RAN  # noqa: E402

OPTIONS = {"vocab_size": 7, "eos_token_id": 6, "timeout_s": 5, "max_retries": 1, "backoff_s": 0.01,
           "spec_metrics": False}
LAW = (0.4, 0.2, 0.15, 0.1, 0.08, 0.05, 0.02)
MOVED = (0.15, 0.2, 0.4, 0.1, 0.08, 0.05, 0.02)  # a candidate whose law moved: must come out shifted


def servers_file(tmp_path: Path, servers: list[dict]) -> Path:
    path = tmp_path / "servers.json"
    path.write_text(json.dumps({"options": OPTIONS, "servers": servers, "prompt_ids": [1, 2, 3],
                                "companion_ids": [4, 5, 1, 2]}))
    return path


def test_servers_audit_plain_baseline_shifted_and_dead_server(tmp_path, capsys):
    with FakeOpenAIServer(probs=LAW) as plain, FakeOpenAIServer(probs=LAW) as same, \
            FakeOpenAIServer(probs=MOVED) as moved, FakeOpenAIServer(fault="http_500", fault_count=None) as dead:
        path = servers_file(tmp_path, [
            {"name": "plain", "url": plain.base_url, "model": "fake-model", "plain": True},
            {"name": "same", "url": same.base_url, "model": "fake-model"},
            {"name": "moved", "url": moved.base_url, "model": "fake-model"},
            {"name": "dead", "url": dead.base_url, "model": "fake-model"},
        ])
        out = tmp_path / "audit"
        code = main(["audit", "openai", "--servers", str(path), "--settings", "t1", "--samples", "400",
                     "--chunk-size", "200", "--out", str(out)])
    capsys.readouterr()
    audit = json.loads((out / AUDIT_JSON).read_text())
    cells = {(c["method"], c["shape"]): c for c in audit["cells"]}
    assert audit["baseline"] == "openai" and audit["methods"] == ["same", "moved", "dead"]
    assert {cells[("moved", s)]["verdict"] for s in ("single", "ragged-b4")} == {"shifted"}
    assert {cells[("same", s)]["verdict"] for s in ("single", "ragged-b4")} <= {"equivalent", "inconclusive"}
    assert cells[("dead", "single")]["status"] == NOT_RUN and "500" in cells[("dead", "single")]["reason"]
    assert cells[("same", "single")]["status"] == RAN and cells[("moved", "single")]["baseline_chunks_sampled"] == 0
    assert code == 1  # the worst verdict: shifted
    cmd = cells[("moved", "single")]["command"]
    assert f"--baseline openai --candidate openai --baseline-option base_url={plain.base_url}" in cmd
    assert f"--candidate-option base_url={moved.base_url}" in cmd and "--no-oracle" in cmd


@pytest.mark.parametrize(("servers", "message"), [
    ([{"name": "a", "url": "http://x", "model": "m"}], "exactly one server with \"plain\": true"),
    ([{"name": "a", "url": "http://x", "model": "m", "plain": True}], "no server to audit besides the plain one"),
    ([{"name": "a", "url": "http://x", "model": "m", "plain": True}, {"name": "b"}],
     "servers[1] ('b'): expected a non-empty string 'url'"),
    ([{"name": "a", "url": "http://x", "model": "m", "plain": True}, {"name": "b", "url": "http://y"}],
     "servers[1] ('b'): expected a non-empty string 'model'"),
    ([{"name": "a", "url": "http://x", "model": "m", "plain": True, "port": 1}], "unknown key(s) ['port']"),
])
def test_bad_servers_files_name_the_server_and_field(tmp_path, servers, message):
    path = servers_file(tmp_path, servers)
    with pytest.raises(ConfigError) as info:
        load_servers(str(path), "byte")
    assert message in str(info.value)


def test_servers_is_required_and_names_are_checked(tmp_path, capsys):
    assert main(["audit", "openai", "--out", str(tmp_path / "o")]) == 2
    assert "speceq audit openai --servers FILE" in capsys.readouterr().err
    path = servers_file(tmp_path, [{"name": "p", "url": "http://x", "model": "m", "plain": True},
                                   {"name": "s", "url": "http://y", "model": "m"}])
    assert main(["audit", "openai", "--servers", str(path), "--methods", "t", "--out", str(tmp_path / "o")]) == 2
    assert "unknown server(s) 't'" in capsys.readouterr().err
