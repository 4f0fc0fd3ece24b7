"""How often the stop-at-block-end mutant's rows run on past a stop string, on its gallery case.

The mutant (``mutant:stop-at-block-end``) checks stop strings once per verified block, so a row
whose stop string completes inside an accepted block keeps the block's later tokens. One such row
is enough for the contract check (:func:`speceq.engines.base.validate_batch`) to stop a run; this
counts them: rows of the gallery case (bundled byte models, prompt ``def ``, the mutant's
``params`` and ``options``) whose first stop string completes before the row's end, per seed.

Usage: python benchmarks/bench_stop_overrun.py [--rows 256] [--tokens 6] [--seeds 1 2 3]
"""

from __future__ import annotations

import argparse

from speceq.core.params import SamplingParams
from speceq.core.stops import first_stop
from speceq.engines.base import SampleRequest
from speceq.engines.mutants import MUTANTS, make_mutant
from speceq.models import ByteTokenizer, load_draft, load_target
from speceq.models.prompts import DEFAULT_PROMPTS
from speceq.models.text_decoding import row_decoder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=6)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    args = ap.parse_args()
    spec = MUTANTS["stop-at-block-end"]
    params = SamplingParams(max_new_tokens=args.tokens, **spec.params)
    prompt = tuple(ByteTokenizer().encode(DEFAULT_PROMPTS[0]))
    engine = make_mutant(spec.name, target=load_target(), draft=load_draft(), **spec.options)
    decode = row_decoder(params.tokenizer or "bytes")
    for seed in args.seeds:
        batch = engine.sample(SampleRequest(prompts=(prompt,), params=params, n=args.rows, seed=seed, batch_size=64))
        over = [r for r in range(batch.rows)
                if (m := first_stop(batch.row_tokens(r), decode, params.stop)) and m.length < batch.lengths[r]]
        first = over[0] if over else None
        print(f"seed {seed}: {len(over)} of {batch.rows} rows overrun a stop string (first: row {first})")


if __name__ == "__main__":
    main()
