"""The BPE world: a 32 000-token byte-level BPE vocabulary and a target + draft pair on it.

The byte models (259 tokens) cannot show what a real vocabulary does to the statistics, the
oracle and the store. This module holds the second bundled world: a byte-level BPE tokenizer
(GPT-2 style pre-tokenisation, trained with the ``tokenizers`` package) of exactly
:data:`BPE_VOCAB_SIZE` tokens on the same standard-library corpus as the byte models, with
the specials at the END of the vocabulary (``<bos>`` = 31997, ``<eos>`` = 31998,
``<pad>`` = 31999), as real models have them. Training: ``python -m speceq.models.train_bpe``.

The corpus is split by file: the last files of the sorted list (>= :data:`HELDOUT_BYTES`
bytes, ``wave.py`` .. ``zipimport.py`` on CPython 3.11) are held out, so neither the
tokenizer nor the models see them. Every file is followed by ``<eos>``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from speceq.errors import ConfigError
from speceq.models.data import HELDOUT_BYTES, stdlib_files

if TYPE_CHECKING:
    import tokenizers
    import torch
    import transformers

BPE_VOCAB_SIZE = 32_000
BPE_SPECIALS: tuple[str, str, str] = ("<bos>", "<eos>", "<pad>")
BPE_BOS_ID = BPE_VOCAB_SIZE - 3
BPE_EOS_ID = BPE_VOCAB_SIZE - 2
BPE_PAD_ID = BPE_VOCAB_SIZE - 1
BPE_MAX_POSITIONS = 512

MODELS_DIR = Path(__file__).resolve().parent
BPE_TARGET_DIR = MODELS_DIR / "bpe-target"
BPE_DRAFT_DIR = MODELS_DIR / "bpe-draft"
BPE_METRICS_PATH = MODELS_DIR / "bpe-metrics.json"

#: Prompts of the BPE world: Python snippets, some ending where a file often ends (EOS-prone).
BPE_PROMPTS: tuple[str, ...] = (
    "def ",
    "import os\nimport sys\nimport ",
    "    def __repr__(self):\n        return ",
    "        raise ValueError(\"",
    "class ",
    "for i in range(",
)
#: EOS-prone prompts: the last 16 lines of three HELD-OUT files (``zipapp.py``, ``zipimport.py``,
#: ``zipfile.py`` of CPython 3.11, never seen in training), where the corpus puts ``<eos>``. After
#: the ``<eos>`` refit (``speceq.models.train_bpe.refit_eos_row``) the target gives ``<eos>``
#: 0.75-0.78 as the next token here (``bpe-metrics.json``, ``eos_mass``; docs/BPE.md).
BPE_EOS_PROMPTS: tuple[str, ...] = (
    "        sys.exit(0)\n\n    if os.path.isfile(args.source):\n"
    "        if args.output is None or (os.path.exists(args.output) and\n"
    "                                   os.path.samefile(args.source, args.output)):\n"
    "            raise SystemExit(\"In-place editing of archives is not supported\")\n"
    "        if args.main:\n"
    "            raise SystemExit(\"Cannot change the main function when copying\")\n\n"
    "    create_archive(args.source, args.output,\n"
    "                   interpreter=args.python, main=args.main,\n"
    "                   compressed=args.compress)\n\n\n"
    "if __name__ == '__main__':\n    main()\n",
    "                except ImportError as exc:\n"
    "                    import_error = exc\n"
    "            else:\n"
    "                code = _compile_source(modpath, data)\n"
    "            if code is None:\n"
    "                # bad magic number or non-matching mtime\n"
    "                # in byte code, try next\n"
    "                continue\n"
    "            modpath = toc_entry[0]\n"
    "            return code, ispackage, modpath\n"
    "    else:\n"
    "        if import_error:\n"
    "            msg = f\"module load failed: {import_error}\"\n"
    "            raise ZipImportError(msg, name=fullname) from import_error\n"
    "        else:\n"
    "            raise ZipImportError(f\"can't find module {fullname!r}\", name=fullname)\n",
    "                    addToZip(zf,\n"
    "                             os.path.join(path, nm), os.path.join(zippath, nm))\n"
    "            # else: ignore\n\n"
    "        with ZipFile(zip_name, 'w') as zf:\n"
    "            for path in files:\n"
    "                zippath = os.path.basename(path)\n"
    "                if not zippath:\n"
    "                    zippath = os.path.basename(os.path.dirname(path))\n"
    "                if zippath in ('', os.curdir, os.pardir):\n"
    "                    zippath = ''\n"
    "                addToZip(zf, path, zippath)\n\n\n"
    "if __name__ == \"__main__\":\n    main()\n",
)


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


def load_bpe_tokenizer(folder: str | Path = BPE_TARGET_DIR) -> tokenizers.Tokenizer:
    """The BPE world's tokenizer (a ``tokenizers.Tokenizer``; ``encode`` prepends ``<bos>``)."""
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json" if Path(folder).is_dir() else Path(folder)
    if not path.is_file():
        raise ConfigError("no tokenizer.json (train with python -m speceq.models.train_bpe)", where=str(path))
    return Tokenizer.from_file(str(path))


def encode_prompts(prompts: tuple[str, ...] | list[str], folder: str | Path = BPE_TARGET_DIR) -> list[list[int]]:
    """Token ids of ``prompts`` with the BPE tokenizer, each starting with ``<bos>``."""
    tok = load_bpe_tokenizer(folder)
    return [tok.encode(p).ids for p in prompts]


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
    from speceq.models.architecture import llama_config

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


def load_bpe_target(*, dtype: Any = None, device: Any = "cpu") -> transformers.PreTrainedModel:
    """The bundled BPE target (fp16 on disk, float32 by default in memory)."""
    from speceq.models import load_model

    return load_model(BPE_TARGET_DIR, dtype=dtype, device=device)


def load_bpe_draft(*, dtype: Any = None, device: Any = "cpu") -> transformers.PreTrainedModel:
    """The bundled BPE draft, distilled from the BPE target."""
    from speceq.models import load_model

    return load_model(BPE_DRAFT_DIR, dtype=dtype, device=device)


def first_token_laws(
    prompts: list[str] | tuple[str, ...] | None = None,
    temperatures: tuple[float, ...] = (1.0, 0.7),
    *,
    top_k: int = 0,
    top_p: float = 1.0,
    model: Any = None,
) -> dict[tuple[str, float], Any]:
    """The BPE target's law of the first generated token per (prompt, temperature).

    Returns ``{(prompt, temperature): numpy float64 vector of length 32 000}`` summing to 1,
    after the harness's own logits processing (temperature, then top-k, then top-p), so a
    calibration study can sample from laws whose support is a real vocabulary's: a few
    tokens carry most mass, tens of thousands carry almost none. Default prompts: the
    world's prompts and end-of-module prompts. ``model``: the loaded BPE target (default: load it).
    """
    import torch

    from speceq.params import SamplingParams
    from speceq.processing import process_logits

    prompts = list(prompts) if prompts is not None else [*BPE_PROMPTS, *BPE_EOS_PROMPTS]
    model = load_bpe_target() if model is None else model
    laws: dict[tuple[str, float], Any] = {}
    with torch.no_grad():
        for prompt, ids in zip(prompts, encode_prompts(prompts)):
            logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            for t in temperatures:
                params = SamplingParams(temperature=t, top_k=top_k, top_p=top_p)
                probs = process_logits(logits[None], params, eos_token_id=BPE_EOS_ID)[0]
                laws[(prompt, t)] = probs.double().numpy() / float(probs.double().sum())
    return laws
