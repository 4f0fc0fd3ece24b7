"""The BPE world's training tool: the <eos> row refit."""

from __future__ import annotations

import torch


def test_refit_eos_row_learns_where_eos_follows_and_is_deterministic() -> None:
    """On a tiny random model and a stream where <eos> always follows token 7, the refit (the rest
    frozen) raises P(<eos>) after 7 far above its value elsewhere, picks a ridge by cross-validation
    and gives the same row twice; the tied input embedding changes with it."""
    from speceq.models.hf_utils import tiny_random_llama
    from tools.training.train_bpe import eos_fit_data, refit_eos_row

    torch.manual_seed(0)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    stream = torch.randint(0, 200, (6000,), generator=g)
    stream[stream == 7] = 8
    ends = torch.arange(40, 6000, 97)
    stream[ends - 1], stream[ends] = 7, 257  # 257: the tiny model's <eos>
    data = eos_fit_data(stream, seed=1, context=23, random_windows=40, bos_id=256, eos_id=257)
    assert data.file_ends == len(ends)
    rows = []
    for _ in range(2):
        model = tiny_random_llama(0)
        model.config.tie_word_embeddings = True
        model.tie_weights()
        record = refit_eos_row(model, data, eos_id=257, ridges=(1e-8, 1e-6, 1e-4), folds=3)
        rows.append(model.get_output_embeddings().weight[257].detach().clone())
        assert torch.equal(model.get_input_embeddings().weight[257], rows[-1])
    assert torch.equal(rows[0], rows[1])
    assert record["ridge"] in (1e-8, 1e-6, 1e-4), record["cv_nll_by_ridge"]
    after = record["p_eos_at_training_file_ends"]["after"]["median"]
    assert after > 0.5 > 20 * record["p_eos_elsewhere"]["after"]["mean"]
    assert record["nll"]["after"] < record["nll"]["before"]
