"""Kernel names: module:attr, file.py:attr, factories, built-ins, helpful errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from speceq.errors import ConfigError, EngineNotFound
from speceq.kernels import KernelSpec
from speceq.kernels.resolve import resolve_drafter, resolve_kernel

REPO = Path(__file__).resolve().parents[2]


def test_builtins() -> None:
    assert resolve_kernel("reference").spec.layout == "ragged"
    assert resolve_kernel("reference:padded:block").spec.method == "block"
    assert resolve_kernel("reference:tree:multi-draft").spec.method == "multi-draft"
    assert resolve_kernel("mutant:bonus-from-draft").name == "bonus-from-draft"
    assert resolve_kernel("transformers").spec.layout == "single"
    override = resolve_kernel("reference:padded", KernelSpec(layout="padded", max_draft=2))
    assert override.spec.max_draft == 2


def test_files_modules_and_factories(tmp_path: Path) -> None:
    k = resolve_kernel(f"{REPO / 'examples/kernels/my_kernel.py'}:my_kernel")
    assert k.spec.layout == "padded" and k.name == "my_kernel"
    f = tmp_path / "factory.py"
    f.write_text("from speceq.kernels.reference_kernels import reference_kernel\n"
                 "def make():\n    return reference_kernel('single')\n"
                 "def plain(req):\n    return req\n")
    assert resolve_kernel(f"{f}:make").spec.layout == "single"
    plain = resolve_kernel(f"{f}:plain", KernelSpec(layout="padded"))
    assert plain.spec.layout == "padded"
    assert resolve_kernel("speceq.kernels.hf_adapter:transformers_speculative_sampling").spec.layout == "single"


@pytest.mark.parametrize(("name", "error"), [("nosuch", EngineNotFound), ("mutant:bonus-from-drafts", EngineNotFound),
                                             ("no.such.module:x", EngineNotFound), ("speceq.kernels:nosuch", EngineNotFound),
                                             ("", ConfigError), ("/no/file.py:x", EngineNotFound)])
def test_errors(name: str, error: type) -> None:
    with pytest.raises(error):
        resolve_kernel(name)


def test_close_names_are_suggested() -> None:
    with pytest.raises(EngineNotFound, match="bonus-from-draft"):
        resolve_kernel("mutant:bonus-from-drafts")


def test_drafters() -> None:
    assert callable(resolve_drafter("drafter:conforming"))
    with pytest.raises(EngineNotFound):
        resolve_drafter("drafter:nosuch")
