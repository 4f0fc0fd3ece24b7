"""``speceq run --numerics-control``: the control's drift lines and the verdict against it; without it, the note
before sampling and the flag named in the shifted reason. Toy engines (numpy) that declare numerics, seconds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speceq.faces.cli import main
from speceq.reports.render import write_report

ENGINES = '''
import numpy as np

from speceq.engines.function import FunctionEngine

VOCAB, EOS = 6, 5


def _law(shift):
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0]) + np.array([-1, 1, 0, 0, 0, 0]) * shift  # never EOS
    return p / p.sum()


def _sampler(shift):
    def sample(prompt_ids, n, params, seed):
        rng = np.random.default_rng(seed)
        return [list(rng.choice(VOCAB, size=params.max_new_tokens, p=_law(shift))) for _ in range(n)]
    return sample


class Declared(FunctionEngine):
    def __init__(self, shift, dtype):
        super().__init__(_sampler(shift), vocab_size=VOCAB, eos_token_id=EOS, name=f"toy-{dtype}")
        self.dtype = dtype

    def describe(self):
        return {**super().describe(), "model": {"dtype": self.dtype, "device": "cpu"}}


def plain(dtype="float32"):  # the "numerics": bfloat16 moves 0.06 of the mass
    return Declared(0.06 if dtype == "bfloat16" else 0.0, dtype)


def buggy(dtype="float32"):  # a bug on top of the numerics
    return Declared(0.2, dtype)
'''


@pytest.fixture
def engines_file(tmp_path: Path) -> Path:
    path = tmp_path / "declared.py"
    path.write_text(ENGINES)
    (tmp_path / "cases.json").write_text(json.dumps({"cases": [{"id": "toy", "prompt_ids": [1, 2],
                                                                 "max_new_tokens": 2}]}))
    return path


def speceq_run(engines_file: Path, out: Path, candidate: str, *extra: str) -> list[str]:
    return ["run", "--cases", str(engines_file.with_name("cases.json")), "--baseline", f"{engines_file}:plain", "--candidate", f"{engines_file}:{candidate}",
            "--candidate-option", "dtype=bfloat16", "--no-oracle", "--samples", "3000", "--workers", "1",
            "--no-progress", "--out", str(out), *extra]


def test_without_the_control_the_run_notes_the_numerics_and_names_the_flag(engines_file, tmp_path, capsys) -> None:
    code = main(speceq_run(engines_file, tmp_path / "out", "plain", "--json"))
    captured = capsys.readouterr()
    assert code == 1  # the numerics alone shift the run
    assert "speceq: note: the engines declare different numerics (baseline float32 on cpu, candidate bfloat16" \
        in captured.err
    reason = json.loads(captured.out)["cases"][0]["reason"]
    assert "--numerics-control" in reason and "candidate bfloat16 on cpu" in reason


def test_with_the_control_the_drift_is_printed_and_the_verdict_is_not_shifted(engines_file, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    code = main(speceq_run(engines_file, out, "plain", "--numerics-control", "--report", str(tmp_path / "r.html")))
    printed = capsys.readouterr().out
    assert code != 1, printed
    assert "numerics control: " in printed and "numerics drift: the control differs from the baseline" in printed
    assert "candidate against the numerics control" in printed
    html = (tmp_path / "r.html").read_text()
    assert "Numerics drift" in html
    assert len(list((out / "chunks" / "control").rglob("*.npz"))) == 12  # 2 x 3000 samples (the default ratio), 500 each


def test_a_bug_against_the_control_exits_1_and_says_against_what(engines_file, tmp_path, capsys) -> None:
    code = main(speceq_run(engines_file, tmp_path / "out", "buggy", "--numerics-control", "--json"))
    result = json.loads(capsys.readouterr().out)
    assert code == 1
    assert result["cases"][0]["reason"].startswith("speculation shift against the numerics control")
    assert result["numerics_control"]["drift"][0]["verdict"] == "shifted"


def test_control_options_need_the_flag(engines_file, tmp_path, capsys) -> None:
    code = main(speceq_run(engines_file, tmp_path / "out", "plain", "--control-option", "dtype=bfloat16"))
    assert code == 2 and "control_options" in capsys.readouterr().err


def test_the_control_ratio_needs_the_flag_and_sets_the_controls_rows(engines_file, tmp_path, capsys) -> None:
    code = main(speceq_run(engines_file, tmp_path / "none", "plain", "--control-ratio", "3"))
    assert code == 2 and "--control-ratio: --control-ratio 3 sets the numerics control's samples, but the run has no " \
        "control: add --numerics-control" in capsys.readouterr().err
    assert not (tmp_path / "none").exists()
    code = main(speceq_run(engines_file, tmp_path / "out", "plain", "--numerics-control", "--control-ratio", "1.5",
                           "--json"))
    result = json.loads(capsys.readouterr().out)
    assert result["numerics_control"]["drift"][0]["n_control"] == 4500 and result["cases"][0]["n_baseline"] == 4500
    assert result["numerics_control"]["control_ratio"] == 1.5
    assert len(list((tmp_path / "out" / "chunks" / "control").rglob("*.npz"))) == 9
    code = main(speceq_run(engines_file, tmp_path / "bad", "plain", "--numerics-control", "--control-ratio", "0.5"))
    assert code == 2 and "run.control_ratio" in capsys.readouterr().err


def test_a_saved_controlled_result_renders(engines_file, tmp_path, capsys) -> None:
    from speceq.faces.cli import load_result

    out = tmp_path / "out"
    main(speceq_run(engines_file, out, "plain", "--numerics-control"))
    result = load_result(out / "result.json")
    assert result.numerics_control is not None and result.numerics_control.drift[0].verdict == "shifted"
    write_report(result, str(tmp_path / "again.html"))
