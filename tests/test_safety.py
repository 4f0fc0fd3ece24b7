"""Safety properties of the code base itself (issue: reliability and safety).

- nothing the project stores or loads goes through pickle (numpy with allow_pickle=False,
  JSON, safetensors);
- model weights load through safetensors only;
- the bundled model folders hold no pickle-format weights.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "harness").rglob("*.py"), *(ROOT / "reports").rglob("*.py")])

FORBIDDEN = {
    r"\bimport pickle\b|\bfrom pickle\b|\bcPickle\b|\bdill\b|\bjoblib\b": "pickle-based serialisation",
    r"allow_pickle\s*=\s*True": "numpy loading with pickle enabled",
    r"\btorch\.load\(": "torch.load (pickle) instead of safetensors",
    r"\bpd\.read_pickle\b|\.to_pickle\(": "pandas pickle I/O",
    r"(?<![\w.])eval\(|(?<![\w.])exec\(": "eval/exec of data",
}


#: Files allowed to import pickle, and why: in-memory only (what every process pool does), never a file.
IN_MEMORY_PICKLE = {
    "harness/pipeline/collect/sampling.py": "engine objects sent to worker processes as bytes "
                                            "(multiprocessing's own pickler sends tensors as handles workers cannot open)",
}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_pickle_or_eval_in_the_package(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    rel = str(path.relative_to(ROOT))
    for pattern, what in FORBIDDEN.items():
        if what == "pickle-based serialisation" and rel in IN_MEMORY_PICKLE:
            # bytes in memory only: no pickle.dump/load on a file object, nothing else of pickle's
            assert not re.search(r"\bpickle\.(dump|load|Pickler|Unpickler)\b", text), rel
            assert not re.search(r"\bdill\b|\bjoblib\b|\bcPickle\b", text), rel
            continue
        m = re.search(pattern, text)
        assert m is None, f"{rel}: {what} ({m.group(0)!r})"


def test_every_numpy_load_disables_pickle() -> None:
    for path in SOURCES:
        for line in path.read_text(encoding="utf-8").splitlines():
            if re.search(r"\bnp\.load\(", line) and "``" not in line:  # code, not prose
                assert "allow_pickle=False" in line, f"{path.relative_to(ROOT)}: {line.strip()}"


MODELS = ROOT / "harness" / "models"
#: File endings of pickle-based weight formats (torch.save, pickle, joblib, TF checkpoints).
PICKLE_ENDINGS = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")


def weight_problems(models: Path) -> list[str]:
    """What breaks "bundled weights are safetensors only" under ``models``, one line each.

    Every file anywhere below it with a pickle-format ending; every model folder (a folder
    holding ``config.json``) without ``model.safetensors``; every ``*.safetensors`` that is
    not one (a safetensors file opens with an 8-byte little-endian header length, then ``{``).
    """
    problems = [f"{p.relative_to(models)}: pickle-format weights" for p in sorted(models.rglob("*"))
                if p.is_file() and p.name.endswith(PICKLE_ENDINGS)]
    for config in sorted(models.rglob("config.json")):
        if not (config.parent / "model.safetensors").is_file():
            problems.append(f"{config.parent.relative_to(models)}: no model.safetensors")
    for weights in sorted(models.rglob("*.safetensors")):
        with weights.open("rb") as f:
            head = f.read(9)
        if len(head) < 9 or head[8:9] != b"{":
            problems.append(f"{weights.relative_to(models)}: not in safetensors format")
    return problems


def test_model_weights_are_safetensors_only() -> None:
    """Every bundled model folder, found by its config.json (the five known ones at least)."""
    folders = {c.parent.name for c in MODELS.rglob("config.json")}
    assert {"target", "draft", "draft-hd32", "bpe-target", "bpe-draft"} <= folders, folders
    assert weight_problems(MODELS) == []
    loader = (MODELS / "__init__.py").read_text(encoding="utf-8")
    assert "use_safetensors=True" in loader


def test_the_weights_check_sees_every_folder_and_fake_safetensors(tmp_path: Path) -> None:
    """Planted: a new model folder with torch.save weights, and a pickle renamed to .safetensors."""
    import shutil

    shutil.copytree(MODELS / "draft-hd32", tmp_path / "draft-hd32")
    new = tmp_path / "new-model"
    new.mkdir()
    (new / "config.json").write_text("{}", encoding="utf-8")
    (new / "pytorch_model.bin").write_bytes(b"\x80\x04\x95")  # pickle protocol 4 header
    (tmp_path / "draft-hd32" / "model.safetensors").write_bytes(b"\x80\x04\x95" + bytes(64))
    assert weight_problems(tmp_path) == [
        "new-model/pytorch_model.bin: pickle-format weights",
        "new-model: no model.safetensors",
        "draft-hd32/model.safetensors: not in safetensors format",
    ]


def test_public_api_is_lazy_and_complete() -> None:
    """``import speceq`` imports no torch, and every name in ``__all__`` resolves."""
    import subprocess
    import sys

    code = ("import sys, speceq; assert 'torch' not in sys.modules, 'torch imported';"
            "missing = [n for n in speceq.__all__ if n != '__version__' and n not in speceq._PUBLIC];"
            "assert not missing, missing; [getattr(speceq, n) for n in speceq.__all__]; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
