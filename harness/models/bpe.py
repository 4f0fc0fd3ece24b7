"""The BPE world: a 32 000-token byte-level BPE vocabulary and a target + draft pair on it.

The byte models (259 tokens) cannot show what a real vocabulary does to the statistics, the
oracle and the store. This module holds the second bundled world: a byte-level BPE tokenizer
(GPT-2 style pre-tokenisation, trained with the ``tokenizers`` package) of exactly
:data:`BPE_VOCAB_SIZE` tokens on the same standard-library corpus as the byte models, with
the specials at the END of the vocabulary (``<bos>`` = 31997, ``<eos>`` = 31998,
``<pad>`` = 31999), as real models have them. Training: ``python -m tools.training.train_bpe``.

The corpus is split by file: the last files of the sorted list (>= :data:`HELDOUT_BYTES`
bytes, ``wave.py`` .. ``zipimport.py`` on CPython 3.11) are held out, so neither the
tokenizer nor the models see them. Every file is followed by ``<eos>``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from speceq.errors import ConfigError

if TYPE_CHECKING:
    import tokenizers
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
#: the ``<eos>`` refit (``tools.training.train_bpe.refit_eos_row``) the target gives ``<eos>``
#: 0.75-0.78 as the next token here (``bpe-metrics.json``, ``eos_mass``; docs/explanation/bpe-world.md).
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


def load_bpe_tokenizer(folder: str | Path = BPE_TARGET_DIR) -> tokenizers.Tokenizer:
    """The BPE world's tokenizer (a ``tokenizers.Tokenizer``; ``encode`` prepends ``<bos>``)."""
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json" if Path(folder).is_dir() else Path(folder)
    if not path.is_file():
        raise ConfigError("no tokenizer.json (train with python -m tools.training.train_bpe)", where=str(path))
    return Tokenizer.from_file(str(path))


def encode_prompts(prompts: tuple[str, ...] | list[str], folder: str | Path = BPE_TARGET_DIR) -> list[list[int]]:
    """Token ids of ``prompts`` with the BPE tokenizer, each starting with ``<bos>``."""
    tok = load_bpe_tokenizer(folder)
    return [tok.encode(p).ids for p in prompts]


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

    from speceq.core.params import SamplingParams
    from speceq.core.processing import process_logits

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
