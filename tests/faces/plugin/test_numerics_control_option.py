"""--speceq-numerics-control: every check samples the control and compares the candidate with it."""

from __future__ import annotations

import pytest
from plugin_support import TOY

#: toy engines that declare numerics, as factories taking ``dtype`` (the built-in engines' option)
DECLARED = '''
from speceq.engines.function import FunctionEngine
from toy_engines import EOS, VOCAB, correct, shifted


class Declared(FunctionEngine):
    def __init__(self, fn, dtype):
        super().__init__(fn, vocab_size=VOCAB, eos_token_id=EOS, name=f"toy-{dtype}")
        self.dtype = dtype

    def describe(self):
        return {**super().describe(), "model": {"dtype": self.dtype, "device": "cpu"}}


def plain(dtype="float32"):
    return Declared(correct, dtype)


def buggy(dtype="float32"):
    return Declared(shifted, dtype)
'''

TEST = """
def test_check(speceq):
    result = speceq.run(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3))
    print("VERDICT", result.verdict, ",".join(sorted(result.engines)), result.numerics_control.candidate)
    print("REASON", result.cases[0].reason)
"""


@pytest.mark.parametrize(("candidate", "verdict"), [("plain", "equivalent"), ("buggy", "shifted")])
def test_the_option_adds_the_control_to_every_check(project: pytest.Pytester, candidate: str, verdict: str) -> None:
    project.makepyfile(declared=DECLARED, test_ctrl=TEST)
    result = project.runpytest("--speceq-baseline=declared:plain", f"--speceq-candidate=declared:{candidate}",
                               "--speceq-candidate-option=dtype=bfloat16", "--speceq-numerics-control=auto",
                               TOY[2], "--speceq-samples=2000", "--speceq-tolerance=0.15", "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*numerics_control=auto*", f"*VERDICT {verdict} baseline,candidate,control bfloat16 on cpu"])
    if verdict == "shifted":
        result.stdout.fnmatch_lines(["REASON speculation shift against the numerics control*"])


def test_a_bad_value_names_the_option(project: pytest.Pytester) -> None:
    project.makepyfile(test_ctrl="def test_nothing():\n    pass\n")
    result = project.runpytest(*TOY, "--speceq-numerics-control=maybe")
    assert "expected off, auto or an http(s) URL" in result.stderr.str()


RATIO_TEST = """
def test_check(speceq):
    result = speceq.run(speceq.case(id="c", prompt_ids=[1, 2], max_new_tokens=3))
    print("RATIO", result.numerics_control.control_ratio, result.verdict)
"""


def test_the_control_ratio_option_reaches_every_check(project: pytest.Pytester) -> None:
    """--speceq-control-ratio=3: the control draws three rows per candidate row (as `speceq run --control-ratio`),
    stored as its own chunks in the check's store."""
    project.makepyfile(declared=DECLARED, test_ctrl=RATIO_TEST)
    store = project.path / "store"
    result = project.runpytest("--speceq-baseline=declared:plain", "--speceq-candidate=declared:plain",
                               "--speceq-candidate-option=dtype=bfloat16", "--speceq-numerics-control=auto",
                               "--speceq-control-ratio=3", TOY[2], "--speceq-samples=200", f"--speceq-store={store}",
                               "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*numerics_control=auto control_ratio=3*", "*RATIO 3.0 *"])
    from speceq.store import load_samples_frame

    (check,) = [p for p in store.rglob("check1-*") if p.is_dir()]
    counts = load_samples_frame(check)["engine"].value_counts().to_dict()
    assert counts == {"baseline": 200, "candidate": 200, "control": 600}


@pytest.mark.parametrize("value", ["0.5", "65", "many"])
def test_a_bad_control_ratio_names_the_option(project: pytest.Pytester, value: str) -> None:
    project.makepyfile(test_ctrl="def test_nothing():\n    pass\n")
    result = project.runpytest(*TOY, f"--speceq-control-ratio={value}")
    assert "--speceq-control-ratio" in result.stderr.str() and "expected a number from 1 to 64" in result.stderr.str()
