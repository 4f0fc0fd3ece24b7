"""speceq.core.user_code: the one loader of users' ``module:attr`` / ``file.py:attr`` (engines and kernels)."""

from __future__ import annotations

from pathlib import Path

import pytest

from speceq.core.user_code import is_file_target, load_attribute
from speceq.errors import EngineNotFound


def test_a_file_is_imported_once_and_its_dotted_attribute_returned(tmp_path: Path) -> None:
    f = tmp_path / "mine.py"
    f.write_text("class Box:\n    value = 7\nCALLS = []\nCALLS.append(1)\n")
    assert load_attribute(f"{f}:Box.value", kind="kernel", label="k") == 7
    assert load_attribute(f"{f}:CALLS", kind="kernel", label="k") == [1]  # not run twice


def test_errors_name_the_kind_the_label_and_a_close_name(tmp_path: Path) -> None:
    f = tmp_path / "mine.py"
    f.write_text("def sample():\n    pass\n")
    with pytest.raises(EngineNotFound, match=r"engine 'candidate': .* has no attribute 'sampel'.*Did you mean 'sample'"):
        load_attribute(f"{f}:sampel", kind="engine", label="candidate")
    with pytest.raises(EngineNotFound, match=r"kernel 'x': file .* does not exist"):
        load_attribute(f"{tmp_path / 'nope.py'}:f", kind="kernel", label="x")
    with pytest.raises(EngineNotFound, match=r"engine 'e': cannot import module 'no_such_module_xyz'"):
        load_attribute("no_such_module_xyz:f", kind="engine", label="e")
    with pytest.raises(EngineNotFound, match="expected 'module:attr'"):
        load_attribute("just_a_name", kind="engine", label="e")
    bad = tmp_path / "bad.py"
    bad.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(EngineNotFound, match="importing .* failed: RuntimeError: boom"):
        load_attribute(f"{bad}:f", kind="kernel", label="b")


def test_file_targets_are_told_from_modules() -> None:
    assert is_file_target("my_engine.py") and is_file_target("dir/mod") and not is_file_target("package.module")
