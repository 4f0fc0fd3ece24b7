"""The training corpus and its windows."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from speceq.errors import ConfigError
from speceq.models import BOS_ID, EOS_ID
from tools.training.data import HELDOUT_BYTES, fixed_windows, load_corpus, random_windows, stdlib_files


@pytest.fixture(scope="module")
def corpus():  # noqa: ANN201
    return load_corpus()


def test_corpus_is_the_sorted_top_level_stdlib(corpus) -> None:  # noqa: ANN001
    files = stdlib_files()
    assert files == sorted(files) and all(f.suffix == ".py" and f.parent == files[0].parent for f in files)
    assert corpus.n_files == len(files) > 100
    assert corpus.heldout.numel() == HELDOUT_BYTES
    total = sum(f.stat().st_size for f in files) + len(files)  # one <eos> per file
    assert corpus.train.numel() + corpus.heldout.numel() == total
    eos = int((corpus.train == EOS_ID).sum() + (corpus.heldout == EOS_ID).sum())
    assert eos == len(files)
    assert int(corpus.train.max()) <= EOS_ID and int(corpus.train.min()) >= 0
    assert not bool((corpus.train == BOS_ID).any())


def test_corpus_is_deterministic(corpus) -> None:  # noqa: ANN001
    again = load_corpus()
    assert again.sha256 == corpus.sha256
    assert torch.equal(again.heldout, corpus.heldout)


def test_tiny_corpus_from_a_folder(tmp_path: Path) -> None:
    (tmp_path / "b.py").write_bytes(b"y = 2\n")
    (tmp_path / "a.py").write_bytes(b"x = 1\n")
    (tmp_path / "notes.txt").write_bytes(b"ignored")
    c = load_corpus(tmp_path, heldout_bytes=3)
    stream = torch.cat([c.train, c.heldout]).tolist()
    assert stream == [*b"x = 1\n", EOS_ID, *b"y = 2\n", EOS_ID]
    assert c.heldout.numel() == 3


def test_bad_corpus_arguments(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no \\*.py files"):
        load_corpus(tmp_path)
    (tmp_path / "a.py").write_bytes(b"x = 1\n")
    with pytest.raises(ConfigError, match="held-out size"):
        load_corpus(tmp_path, heldout_bytes=5)


def test_random_windows_are_bos_prefixed_slices_and_seeded() -> None:
    stream = torch.arange(1000)
    w1 = random_windows(stream, 6, 32, torch.Generator().manual_seed(3))
    w2 = random_windows(stream, 6, 32, torch.Generator().manual_seed(3))
    w3 = random_windows(stream, 6, 32, torch.Generator().manual_seed(4))
    assert w1.shape == (6, 32) and torch.equal(w1, w2) and not torch.equal(w1, w3)
    assert (w1[:, 0] == BOS_ID).all()
    body = w1[:, 1:]
    assert (body.diff(dim=1) == 1).all(), "window bodies must be consecutive slices of the stream"
    assert int(body.max()) < 1000
    assert len(set(body[:, 0].tolist())) > 1, "offsets must vary"


def test_fixed_windows_are_evenly_spaced(corpus) -> None:  # noqa: ANN001
    w = fixed_windows(corpus.heldout, 5, 16)
    assert w.shape == (5, 16) and (w[:, 0] == BOS_ID).all()
    assert w[0, 1:].tolist() == corpus.heldout[:15].tolist()
    assert w[-1, 1:].tolist() == corpus.heldout[-16:-1].tolist()
    with pytest.raises(ConfigError, match="cannot cut"):
        fixed_windows(corpus.heldout[:10], 20, 16)
