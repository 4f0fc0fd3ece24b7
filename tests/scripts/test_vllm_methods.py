"""scripts/vllm/heads.py (tiny seeded heads for vLLM's eagle, eagle3, medusa, mtp) and the parts of
scripts/vllm/methods.py that need no vLLM: each method's served folder and config, vLLM's error line
out of a failed server's log, the joined matrix."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "vllm"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses resolve their module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def heads():
    return _load("heads")


@pytest.fixture(scope="module")
def methods(heads):
    return _load("methods")


def test_head_configs_match_the_bundled_target(heads) -> None:
    target = heads.target_config()
    for method in ("eagle", "eagle3", "medusa", "mtp"):
        cfg = heads.head_config(method)
        assert cfg["hidden_size"] == target["hidden_size"] == 128, method
        assert cfg["vocab_size"] == target["vocab_size"] == 259, method
    assert heads.head_config("eagle")["architectures"] == ["LlamaForCausalLM"]  # vLLM makes it EagleLlamaForCausalLM
    eagle3 = heads.head_config("eagle3")
    assert (eagle3["num_hidden_layers"], eagle3["draft_vocab_size"], eagle3["target_hidden_size"]) == (1, 259, 128)
    aux = eagle3["eagle_aux_hidden_state_layer_ids"]  # three distinct layers of the 4-layer target, as fc reads 3 x 128
    assert len(set(aux)) == 3 and all(0 < i < target["num_hidden_layers"] for i in aux)
    medusa = heads.head_config("medusa")
    assert (medusa["model_type"], medusa["architectures"], medusa["num_heads"]) == ("medusa", ["MedusaModel"], 3)
    mtp = heads.head_config("mtp")
    assert (mtp["architectures"], mtp["model_type"], mtp["num_nextn_predict_layers"]) == (["MiMoForCausalLM"], "qwen2", 1)
    assert mtp["num_hidden_layers"] == target["num_hidden_layers"]
    with pytest.raises(ValueError, match="no head for method 'ngram'"):
        heads.head_config("ngram")


def test_head_weights_have_the_shapes_vllm_loads_and_are_seeded(heads) -> None:
    eagle = heads.head_weights("eagle", heads.head_config("eagle"))
    assert tuple(eagle["fc.weight"].shape) == (128, 256)
    assert tuple(eagle["layers.0.self_attn.q_proj.weight"].shape) == (128, 128)
    assert not any(k.startswith(("embed_tokens", "lm_head")) for k in eagle)  # the target's are shared
    assert "layers.0.input_layernorm.weight" not in eagle  # vLLM refuses it: EAGLE-1's first layer has no input norm
    assert "layers.0.post_attention_layernorm.weight" in eagle
    eagle3 = heads.head_weights("eagle3", heads.head_config("eagle3"))
    assert tuple(eagle3["fc.weight"].shape) == (128, 384)  # three of the target's hidden states
    assert tuple(eagle3["midlayer.self_attn.q_proj.weight"].shape) == (128, 256)  # embedding + hidden state
    assert tuple(eagle3["lm_head.weight"].shape) == (259, 128)
    medusa = heads.head_weights("medusa", heads.head_config("medusa"))
    assert sorted(medusa) == sorted([f"blocks.{i}.layers.0.weight" for i in range(3)]
                                    + [f"lm_heads.{i}.weight" for i in range(3)])
    again = heads.head_weights("eagle", heads.head_config("eagle"))
    assert all((eagle[k] == again[k]).all() for k in eagle)
    other = heads.head_weights("eagle", heads.head_config("eagle"), seed=1)
    assert not (eagle["fc.weight"] == other["fc.weight"]).all()


def test_the_mtp_model_samples_the_bundled_targets_law(heads, tmp_path) -> None:
    """Its main model is the target (zero q/k/v biases turn Qwen2 into Llama): the plain target's server
    is the mtp row's baseline only because the logits agree."""
    import torch
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    folder = heads.head_folder("mtp", tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["MiMoForCausalLM"]
    from safetensors.torch import load_file

    names = load_file(str(folder / "model.safetensors"))
    assert "model.mtp_layers.0.input_proj.weight" in names and "model.mtp_layers.0.self_attn.q_proj.bias" in names
    target = LlamaForCausalLM.from_pretrained(str(heads.TARGET_DIR)).eval()
    copy = Qwen2ForCausalLM.from_pretrained(str(folder)).eval()
    ids = torch.tensor([[256, *b"def add(a, b):\n    return "]])
    with torch.no_grad():
        assert torch.equal(target(ids).logits, copy(ids).logits)
    assert (folder / "tokenizer.json").read_bytes() == (heads.TARGET_DIR / "tokenizer.json").read_bytes()


def test_each_method_is_served_with_its_own_config(methods, tmp_path) -> None:
    hs = {m: tmp_path / m for m in ("eagle", "eagle3", "medusa", "mtp")}
    for m in methods.METHODS:
        plan = methods.method_plan(m, hs)
        assert plan.config["method"] == m
        assert plan.model_dir == (hs["mtp"] if m == "mtp" else methods.TARGET_DIR)
    assert methods.method_plan("eagle3", hs).config["model"] == str(hs["eagle3"])
    assert methods.method_plan("draft_model", hs).config["model"] == str(methods.DRAFT_DIR)
    with pytest.raises(ValueError, match="unknown method 'lookahead'"):
        methods.method_plan("lookahead", hs)


ENGINE_CORE_LOG = """\
INFO 12-07 06:01:02 [api_server.py:100] vLLM API server version 0.32.0
(EngineCore_DP0 pid=4242) ERROR 12-07 06:01:09 [core.py:700] EngineCore failed to start.
(EngineCore_DP0 pid=4242) ERROR 12-07 06:01:09 [core.py:700] Traceback (most recent call last):
(EngineCore_DP0 pid=4242) ERROR 12-07 06:01:09 [core.py:700]   File "x.py", line 3, in f
(EngineCore_DP0 pid=4242) ERROR 12-07 06:01:09 [core.py:700] NotImplementedError: Medusa is not supported on CPU
Traceback (most recent call last):
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
"""

PYDANTIC_LOG = """\
Traceback (most recent call last):
  File "vllm/engine/arg_utils.py", line 1, in create_speculative_config
pydantic_core._pydantic_core.ValidationError: 1 validation error for SpeculativeConfig
  Value error, Unsupported speculative method: 'foo' [type=value_error, input_value=ArgsKwargs(()), input_type=ArgsKwargs]
    For further information visit https://errors.pydantic.dev/2.12/v/value_error
"""


def test_error_line_is_vllms_root_cause(methods) -> None:
    assert methods.error_line(ENGINE_CORE_LOG) == "NotImplementedError: Medusa is not supported on CPU"
    assert methods.error_line(PYDANTIC_LOG) == ("pydantic_core._pydantic_core.ValidationError: 1 validation error "
                                                "for SpeculativeConfig Value error, Unsupported speculative method: 'foo'")
    suffix = "ImportError: Arctic Inference is required for suffix decoding. Install via `pip install x`."
    assert methods.error_line(f"INFO starting\nTraceback (most recent call last):\n{suffix}\n") == suffix
    assert methods.error_line("INFO a\nKilled\n\n") == "Killed"
    assert methods.error_line("") == ""


def test_join_audits_keeps_every_cell_and_lists_refused_methods_with_vllms_error(methods) -> None:
    from speceq.pipeline.audit import NOT_RUN, RAN, AuditCell, AuditResult

    def part(method: str) -> AuditResult:
        cells = tuple(AuditCell(method=method, setting=s, shape="single", status=RAN, verdict="inconclusive",
                                tv_estimate=0.1, tv_upper_bound=0.3) for s in ("t1", "greedy"))
        return AuditResult(family="openai", world="byte", baseline="openai", methods=(method,),
                           settings=(("t1", "T = 1"), ("greedy", "greedy")), shapes=(("single", "one"),),
                           cells=cells, samples=200, seed=0, alpha=0.001, tolerance=0.15, wall_s=10.0)

    refused = methods.MethodOutcome("suffix", {"method": "suffix"}, "/m", "refused", "ImportError: no arctic")
    joined = methods.join_audits([part("eagle"), part("ngram")], [refused], ["ngram", "suffix", "eagle"])
    assert joined.methods == ("ngram", "suffix", "eagle")
    assert [(c.method, c.setting) for c in joined.cells] == [
        ("ngram", "t1"), ("ngram", "greedy"), ("suffix", "t1"), ("suffix", "greedy"), ("eagle", "t1"),
        ("eagle", "greedy")]
    sfx = joined.cell("suffix", "t1", "single")
    assert sfx.status == NOT_RUN and sfx.reason.endswith("ImportError: no arctic")
    assert joined.wall_s == 20.0
    assert AuditResult.from_json(joined.to_json()) == joined


def test_a_server_that_died_leaves_its_setting_not_run_with_vllms_error_and_the_rest_rerun(methods) -> None:
    from speceq.pipeline.audit import NOT_RUN, RAN, AuditCell, AuditResult

    settings = (("t1", "T = 1"), ("topk10", "top-k"), ("long64", "64 tokens"))
    shapes = (("single", "one"), ("ragged-b4", "four"))

    def cell(s: str, h: str, ran: bool) -> AuditCell:
        if ran:
            return AuditCell(method="ngram", setting=s, shape=h, status=RAN, verdict="inconclusive", tv_estimate=0.1,
                             tv_upper_bound=0.3)
        return AuditCell(method="ngram", setting=s, shape=h, status=NOT_RUN, reason="cannot reach the server")

    def audit(sets, ran) -> AuditResult:
        cells = tuple(cell(s, h, (s, h) in ran) for s, _ in sets for h, _ in shapes)
        return AuditResult(family="openai", world="byte", baseline="openai", methods=("ngram",), settings=sets,
                           shapes=shapes, cells=cells, samples=200, seed=0, alpha=0.001, tolerance=0.15, wall_s=5.0)

    first = audit(settings, {("t1", "single"), ("t1", "ragged-b4")})  # died in topk10 · single
    assert methods.killing_cell(first).setting == "topk10" and methods.killing_cell(first).shape == "single"
    second = audit((settings[2],), {("long64", "single"), ("long64", "ragged-b4")})
    assert methods.killing_cell(second) is None
    error = "RuntimeError: max(): Expected reduction dim to be specified for input.numel() == 0."
    combined = methods.combine_after_deaths([first, second], {"topk10": ("single", error)})
    assert combined.settings == settings and combined.wall_s == 10.0
    status = {(c.setting, c.shape): c.status for c in combined.cells}
    assert status == {(s, h): NOT_RUN if s == "topk10" else RAN for s, _ in settings for h, _ in shapes}
    killed = combined.cell("ngram", "topk10", "single")
    assert killed.reason == f"the vLLM server died during this cell: {error}"
    other = combined.cell("ngram", "topk10", "ragged-b4")
    assert other.reason.startswith("the vLLM server died during the topk10 · single cell (not retried)")
    assert AuditResult.from_json(combined.to_json()) == combined


def test_servers_file_names_the_plain_server_and_the_methods_that_started(methods) -> None:
    started = methods.MethodOutcome("eagle", {}, "/t", "started", port=18404)
    refused = methods.MethodOutcome("suffix", {}, "/t", "refused", "ImportError: x", port=18403)
    doc = methods.servers_document("http://127.0.0.1:18400", "/t", [started, refused])
    assert doc["servers"] == [{"name": "plain", "url": "http://127.0.0.1:18400", "model": "/t", "plain": True},
                              {"name": "eagle", "url": "http://127.0.0.1:18404", "model": "/t"}]


def test_a_later_run_replaces_its_rows_and_keeps_the_others_in_row_order(methods) -> None:
    def o(row: str, status: str) -> object:
        return methods.MethodOutcome(row, {}, "/t", status)

    earlier = [o("ngram", "started"), o("eagle", "refused"), o("suffix", "refused")]
    now = [o("eagle-patched", "started"), o("eagle", "started")]
    merged = methods.merge_outcomes(earlier, now)
    assert [(m.method, m.status) for m in merged] == [("ngram", "started"), ("suffix", "refused"),
                                                      ("eagle", "started"), ("eagle-patched", "started")]
    assert methods.build_parser().parse_args(["--patch-expand"]).patch_expand


def test_the_conformance_pages_commands_parse_and_name_known_methods_and_settings(methods) -> None:
    import shlex

    from speceq.pipeline.audit import FIELD_SETTINGS, SETTINGS, SHAPES

    page = (Path(__file__).resolve().parents[2] / "docs" / "measurements" / "conformance.md").read_text()
    commands = [shlex.split(line.split("python scripts/vllm/methods.py", 1)[1], comments=True)
                for line in page.replace("\\\n", " ").splitlines() if line.startswith("python scripts/vllm/methods.py")]
    assert len(commands) == 9  # t1 and greedy, patched; the other settings, long64 again, patched; the field settings;
    # the structured-output setting; suffix, and suffix patched
    for words in commands:
        args = methods.build_parser().parse_args(words)
        assert set(args.methods.split(",")) <= set(methods.METHODS)
        assert set(args.settings.split(",")) <= {s.name for s in (*SETTINGS, *FIELD_SETTINGS)}
        assert set(args.shapes.split(",")) <= {s.name for s in SHAPES}
