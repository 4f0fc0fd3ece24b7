"""Training side of the BPE world: the corpus split, the tokenizer trainer and the model shapes.

The runtime half (constants, prompts, loading the bundled BPE models and tokenizer) is
:mod:`speceq.models.bpe`; this half only trains them (``python -m tools.training.train_bpe``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from speceq.errors import ConfigError
from speceq.models.bpe import (
    BPE_BOS_ID,
    BPE_EOS_ID,
    BPE_MAX_POSITIONS,
    BPE_PAD_ID,
    BPE_SPECIALS,
    BPE_VOCAB_SIZE,
)
from tools.training.data import HELDOUT_BYTES, stdlib_files

if TYPE_CHECKING:
    import tokenizers
    import torch
    import transformers


def split_files(root: str | Path | None = None, heldout_bytes: int = HELDOUT_BYTES) -> tuple[list[Path], list[Path]]:
    """(train files, held-out files): the held-out files are the last ones summing to >= ``heldout_bytes``."""
    files = stdlib_files(root)
    total = 0
    cut = len(files)
    while cut > 0 and total < heldout_bytes:
        cut -= 1
        total += files[cut].stat().st_size
    if cut < len(files) // 2:
        raise ConfigError(f"held-out size {heldout_bytes} bytes leaves too few training files", where=str(files[0].parent))
    return files[:cut], files[cut:]


def _texts(files: list[Path]) -> list[str]:
    return [f.read_bytes().decode("utf-8", errors="replace") for f in files]


def train_tokenizer(files: list[Path], vocab_size: int = BPE_VOCAB_SIZE) -> tokenizers.Tokenizer:
    """Train the byte-level BPE tokenizer on ``files``; specials take the last three ids.

    Deterministic for the same input (the trainer breaks ties by pair order); raises
    :class:`ConfigError` if the corpus cannot support ``vocab_size - 3`` merges + bytes.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(BPE_SPECIALS),
        min_frequency=1,  # pairs seen twice give ~25.8k tokens on 3.11's stdlib; the rest are rarer merges
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(_texts(files), trainer=trainer, length=len(files))
    if tok.get_vocab_size() != vocab_size - len(BPE_SPECIALS):
        raise ConfigError(f"the corpus gave {tok.get_vocab_size()} BPE tokens, expected {vocab_size - 3}")
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in BPE_SPECIALS])
    for offset, s in enumerate(BPE_SPECIALS):
        if tok.token_to_id(s) != vocab_size - 3 + offset:
            raise ConfigError(f"special token {s} got id {tok.token_to_id(s)}, expected {vocab_size - 3 + offset}")
    bos = BPE_SPECIALS[0]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A {bos} $B:1", special_tokens=[(bos, vocab_size - 3)]
    )
    return tok


def write_tokenizer_files(tok: tokenizers.Tokenizer, folder: str | Path) -> list[Path]:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``."""
    import json

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / "tokenizer.json", folder / "tokenizer_config.json", folder / "special_tokens_map.json"]
    tok.save(str(paths[0]))
    specials = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **specials,
        "unk_token": None,
        "model_max_length": BPE_MAX_POSITIONS,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
    }
    paths[1].write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    paths[2].write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")
    return paths


@dataclass(frozen=True, slots=True)
class BpeCorpus:
    """The BPE token streams of the training and held-out files, with provenance."""

    train: torch.Tensor  # [n_train] int64
    heldout: torch.Tensor  # [n_heldout] int64
    n_train_files: int
    n_heldout_files: int
    sha256: str  # of the concatenated stream
    root: str


def encode_corpus(tok: tokenizers.Tokenizer, root: str | Path | None = None) -> BpeCorpus:
    """Encode the split corpus: each file's tokens (no ``<bos>``) followed by ``<eos>``."""
    import torch

    train_files, heldout_files = split_files(root)

    def stream(files: list[Path]) -> torch.Tensor:
        ids: list[int] = []
        for enc in tok.encode_batch(_texts(files), add_special_tokens=False):
            ids.extend(enc.ids)
            ids.append(BPE_EOS_ID)
        return torch.tensor(ids, dtype=torch.int64)

    train, heldout = stream(train_files), stream(heldout_files)
    digest = hashlib.sha256(torch.cat([train, heldout]).numpy().tobytes()).hexdigest()
    return BpeCorpus(train, heldout, len(train_files), len(heldout_files), digest, str(train_files[0].parent))


def _config(*, hidden: int, intermediate: int, layers: int, heads: int) -> transformers.LlamaConfig:
    from tools.training.architecture import llama_config

    # with V = 32k the embedding is most of the weights: tie input and output embeddings
    return llama_config(hidden=hidden, intermediate=intermediate, layers=layers, heads=heads,
                        vocab_size=BPE_VOCAB_SIZE, max_positions=BPE_MAX_POSITIONS, tie_embeddings=True,
                        bos_id=BPE_BOS_ID, eos_id=BPE_EOS_ID, pad_id=BPE_PAD_ID)


def bpe_target_config() -> transformers.LlamaConfig:
    """The BPE target: 4 layers, hidden 128, MLP 512, 4 heads, tied embeddings (~5.2 M parameters)."""
    return _config(hidden=128, intermediate=512, layers=4, heads=4)


def bpe_draft_config() -> transformers.LlamaConfig:
    """The BPE draft: 1 layer, hidden 64, MLP 128, 2 heads of 32, tied embeddings (~2.1 M parameters)."""
    return _config(hidden=64, intermediate=128, layers=1, heads=2)
