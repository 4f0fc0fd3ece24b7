"""Default run settings shared by the CLI, the Python API and the pytest plugin (no imports).

DEFAULT_SAMPLES: samples of each case's prompt per engine (companions get as many). The
    default run is sized to finish in a few minutes on 2 CPU cores.
DEFAULT_TOLERANCE: TV distance between the baseline's and the candidate's per-position token
    laws below which a case is ``equivalent`` (checked through an upper confidence bound). At
    3 000 samples per engine the bound of a correct engine on the default cases measured
    0.06-0.13 (the plug-in TV's upward bias is most of it), so 0.15 is what the default budget
    can certify; ~15 000 samples per engine certify 0.05.
ORACLE_DTYPES: precisions the transformers oracle may run in (``--oracle-dtype``; float32 default).
CERTIFICATES: what an ``equivalent`` verdict may certify (``--certificate``): ``tv``, the
    per-position TV bound (default), or ``pit-law``, the coarser bound on the oracle PIT's law per
    position (:mod:`speceq.stats.pit_law`), which a 49k-token vocabulary affords at ~650 samples.
DEFAULT_ALPHA: family-wise false-alarm level of a run (Holm over its primary tests); 1e-3
    keeps a CI job that runs many checks quiet.
NEAR_TIE_NATS: greedy cases' near-tie threshold, nats (target's top-1 minus top-2 log-probability),
    measured on float32 CPU: logits of the bundled models differ between batched and unbatched
    graphs by ~1e-5, so 1e-3 leaves two orders of magnitude of slack and is still far below any
    margin a real bug needs to flip an argmax on a trained model. bf16 kernels need ~1e-2.
SUPPORT_MARGIN_NATS: the numerics margin Delta of the support hard failure on the bundled byte
    models, nats of raw-logit error: a candidate token is a hard failure only when every law
    whose logits are within Delta of the oracle's (after a common shift;
    :mod:`speceq.stats.support_margin`) excludes it under the case's processing. 0 means an
    exact oracle (any token of oracle probability 0). Chosen from measured spreads of bf16 /
    fp16 logits against float32 (``benchmarks/logit_spread.py``, docs/measurements/numerics.md).
    When the engines declare different numerics (the target's dtype or device, e.g. a bf16
    candidate against a float32 baseline), the same margin also applies to the two-sample support
    comparison: a token of oracle probability 0 that a law within the margin admits (a top-p /
    top-k edge moved by the numerics) is boundary evidence, counted in a note, not a flagged row
    (:class:`speceq.pipeline.analysis.NumericsMargin`); with equal numerics the comparison keeps the
    exact rule.
DEFAULT_WORKERS: local worker processes that sample chunks and score them (``speceq run --workers``,
    ``--speceq-workers`` of the pytest plugin). None: auto, one per CPU that other processes leave at
    least a quarter idle right now, at most one per chunk to sample
    (:func:`speceq.pipeline.collect.auto_workers`); 1: everything in the calling process. The Python
    API's ``RunConfig.workers`` stays 1 (a library call starts no processes unless asked).
DEFAULT_CHUNK_TIMEOUT_S: seconds one chunk may take to sample before the run stops with an engine
    error naming the engine, case and slice (``--chunk-timeout``; serial and local worker-process
    collection). None: no limit, since a chunk's time depends on the engine and the chunk size.
STOP_GRACE_S: after the first Ctrl-C, seconds the run waits for the chunks being sampled to finish
    and be stored before it abandons them and stops (a hung engine then cannot hold the stop up).
NUMERICS_TOLERANCE: TV below which a detected difference is ``within-tolerance`` rather than
    ``shifted`` (``--numerics-tolerance``; 0 turns the outcome off): the case's certified upper bound
    on its largest per-position TV must be below it. Taken from the measured numerics floor
    (``benchmarks/numerics_floor.py --floor-models``, docs/measurements/numerics.md): about twice the
    largest mean per-position TV between a bf16 and the float32 model over the four sampling settings,
    rounded up: byte and BPE models 0.0040 and 0.0045 -> 0.01; SmolLM2-135M 0.026 -> 0.05
    (:data:`NUMERICS_TOLERANCE_BY_WORLD`; 0.01 outside the bundled worlds and in the Python API and
    the pytest plugin). The upper bound is distribution-free, so it falls below 0.01 only past about
    10^5-10^6 draws per engine: at the default budget a detected difference stays ``shifted``, with its size.
CONTROL_RATIO: rows of the numerics control per candidate row (``--control-ratio``): the control is
    plain sampling, cheaper than a speculative candidate, and the blocked comparison
    (``speceq.stats.blocked``) puts each candidate row against its share of the control's rows, so the
    comparison needs 2r / (r + 1) times fewer candidate rows (1.33 at 2) for the same shift;
    measured on ``biased-ratio`` in bf16 (docs/measurements/numerics.md).
SUPPORT_MARGIN_OFF: the default of the Python API and the pytest plugin, and of ``speceq run``
    when an engine or the oracle is not one of the bundled world's models: infinite, i.e. no
    support hard failure (the two-sample support comparison alone judges tokens outside the
    oracle's support), because a safe margin depends on the model's numerics (the bundled BPE
    model's bf16 logits spread 24x the byte models'); pass a measured one to gain the hard
    failure's power.
"""

DEFAULT_SAMPLES = 3000
DEFAULT_CHUNK_SIZE = 500
DEFAULT_TOLERANCE = 0.15
#: The pytest plugin's tolerance (``--speceq-tolerance``): the ready-made suites carry budgets of their
#: own, larger than a CLI run's, so a test may ask for a tighter certificate than ``speceq run``.
PYTEST_TOLERANCE = 0.05
DEFAULT_ALPHA = 1e-3
DEFAULT_CHUNK_TIMEOUT_S: float | None = None
DEFAULT_WORKERS: int | None = None
STOP_GRACE_S = 5.0
ORACLE_DTYPES = ("float32", "float64", "bfloat16", "float16")
CERTIFICATES = ("tv", "pit-law")
NEAR_TIE_NATS = 1e-3
SUPPORT_MARGIN_NATS = 0.5
#: ``speceq run --models`` world -> its default support margin: the bundled byte models' bf16 logits
#: spread up to 0.26 nats (0.5: 1.9x), the bundled BPE model's up to 6.2 (12: 1.9x), SmolLM2-135M's
#: up to 1.43 (3: 2.1x; ``benchmarks/logit_spread.py``, docs/measurements/numerics.md).
SUPPORT_MARGIN_NATS_BY_WORLD = {"byte": SUPPORT_MARGIN_NATS, "bpe": 12.0, "smollm2": 3.0}
SUPPORT_MARGIN_OFF = float("inf")
NUMERICS_TOLERANCE = 0.01
CONTROL_RATIO = 2.0
#: ``speceq run --models`` world -> its default numerics tolerance (twice the largest mean bf16 per-position
#: TV measured on its target, rounded up; docs/measurements/numerics.md).
NUMERICS_TOLERANCE_BY_WORLD = {"byte": NUMERICS_TOLERANCE, "bpe": NUMERICS_TOLERANCE, "smollm2": 0.05}
