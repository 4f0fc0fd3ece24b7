"""``speceq kernel MODULE:ATTR``: check a verification kernel against its exact laws (speceq.kernels).

MODULE:ATTR is ``package.module:attr`` or ``path/to/file.py:attr`` (a Kernel, a function
decorated with ``speceq.kernels.kernel``, or a zero-argument factory of one), or a built-in:
``reference[:LAYOUT[:METHOD]]``, ``mutant:NAME``, ``transformers``, ``model:NAME`` (model-layout
kernels: ``chain``, ``residual-from-target``, ``block-resampling[-truncated|-capped]``). The spec options (layout,
method, ...) override the kernel's own spec. ``--drafter`` checks a drafter instead (does it
sample from the q it returns?): MODULE:ATTR is then a drafter function or ``drafter:NAME``. Exit codes as ``speceq run``: 0 equivalent, 1 shifted (or a
declared-lossy kernel, or a non-conforming drafter), 3 inconclusive, 2 usage or kernel error.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields, replace
from pathlib import Path

from speceq.core.defaults import DEFAULT_ALPHA

HELP = "check a speculative-decoding verification kernel against its exact output laws"

_SPEC_FLAGS = ("layout", "method", "lossy", "params", "min_p", "greedy", "uniforms", "padding", "nan_rows", "max_draft",
               "max_vocab")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("kernel", metavar="MODULE:ATTR", help="the kernel (see the command's description)")
    g = p.add_argument_group("what the kernel takes and claims (override its own spec)")
    g.add_argument("--layout", choices=("ragged", "padded", "single", "tree", "model"), default=None,
                   help="the request layout the kernel takes: ragged (vLLM), padded (FlashInfer), single "
                        "(transformers), tree (SGLang / EAGLE), model (the kernel calls exact models itself: "
                        "block resampling, HSD, re-drafting)")
    g.add_argument("--method", default=None, help="standard, one-hot, exact-match, block, lossless (token laws only, "
                   "no accepted-length law); trees: target-only, multi-draft; model layout: lossless; any name with "
                   "--lossy")
    g.add_argument("--lossy", action="store_true", default=None, help="the method is lossy by design: measure its TV")
    g.add_argument("--params", action="store_true", default=None, help="it applies per-request temperature/top-k/top-p")
    g.add_argument("--min-p", dest="min_p", action="store_true", default=None,
                   help="it also applies per-request min-p, after the temperature (with --params)")
    g.add_argument("--greedy", action="store_true", default=None, help="it handles temperature-0 rows (with --params)")
    g.add_argument("--uniforms", action="store_true", default=None, help="it uses the injected uniforms")
    g.add_argument("--padding", action="store_true", default=None, help="padded layout: -1 after shorter drafts")
    g.add_argument("--nan-rows", action="store_true", default=None,
                   help="it promises valid output on NaN target rows (then they are sent)")
    g.add_argument("--max-draft", type=int, default=None, metavar="K", help="most draft tokens per request")
    g.add_argument("--max-vocab", type=int, default=None, metavar="V", help="largest vocabulary to build")
    g = p.add_argument_group("check")
    g.add_argument("--scale", type=_positive, default=1.0, help="multiplies the default draws. Default: %(default)s")
    g.add_argument("--seed", type=int, default=0, help="seed of every draw and uniform speceq makes. Default: %(default)s")
    g.add_argument("--device", default="cpu", help="cpu or cuda[:N]. Default: %(default)s")
    g.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="family-wise false-alarm level (Holm). Default: %(default)s")
    g.add_argument("--tolerance", type=float, default=None,
                   help="TV every tested position must be certified below, else inconclusive. Default: none")
    g.add_argument("--no-solo", dest="solo", action="store_false",
                   help="do not rerun failing templates in batches of their own")
    g.add_argument("--drafter", action="store_true", help="MODULE:ATTR is a drafter: check its draft conformance")
    g.add_argument("--threads", type=int, default=None, help="torch threads. Default: $SPECEQ_TORCH_THREADS, else 1")
    g = p.add_argument_group("output")
    g.add_argument("--json", default=None, metavar="OUT.json", help="write the result as JSON")
    g.add_argument("--report", default=None, metavar="OUT.html", help="write the HTML kernel report")


#: Options of a kernel check that a drafter check has no use for: refused, never silently ignored.
_NOT_FOR_DRAFTERS = (*_SPEC_FLAGS, "tolerance", "report")


def _check_drafter(args: argparse.Namespace) -> int:
    """``--drafter``: the draft-conformance check; options it cannot honour are a usage error."""
    from speceq.errors import ConfigError
    from speceq.kernels.drafts import check_drafter
    from speceq.kernels.resolve import resolve_drafter

    given = [f"--{f.replace('_', '-')}" for f in _NOT_FOR_DRAFTERS if getattr(args, f) not in (None, False)]
    given += ["--scale"] if args.scale != 1.0 else []
    given += ["--no-solo"] if not args.solo else []
    if given:
        raise ConfigError(f"{', '.join(given)} {'does' if len(given) == 1 else 'do'} not apply to a drafter check "
                          "(it draws a fixed set of templates and has no kernel spec, tolerance or HTML report); "
                          "--seed, --device, --alpha, --threads and --json do", where="speceq kernel --drafter")
    if not 0 < args.alpha < 1:
        raise ConfigError(f"expected a level in (0, 1), got {args.alpha}", where="--alpha")
    fn = resolve_drafter(args.kernel)
    result = check_drafter(fn, seed=args.seed, device=args.device, alpha=args.alpha, name=args.kernel)
    print(result.summary())
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1, default=str) + "\n", encoding="utf-8")
    return result.exit_code


def handle(args: argparse.Namespace) -> int:
    from speceq.errors import ConfigError
    from speceq.models.torch_utils import configure_threads

    configure_threads(args.threads)
    if args.drafter:
        return _check_drafter(args)
    from speceq.kernels import check
    from speceq.kernels.contract import KernelSpec
    from speceq.kernels.resolve import resolve_kernel

    kern = resolve_kernel(args.kernel)
    overrides = {f: getattr(args, f) for f in _SPEC_FLAGS if getattr(args, f) is not None}
    if overrides:
        known = {f.name for f in fields(KernelSpec)}
        base = {f: getattr(kern.spec, f) for f in known}
        kern = replace(kern, spec=KernelSpec(**{**base, **overrides}))
    if not 0 < args.alpha < 1:
        raise ConfigError(f"expected a level in (0, 1), got {args.alpha}", where="--alpha")
    result = check(kern, scale=args.scale, seed=args.seed, device=args.device, alpha=args.alpha,
                   tolerance=args.tolerance, solo=args.solo)
    print(result.summary())
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_dict(), indent=1, default=str) + "\n", encoding="utf-8")
    if args.report:
        from speceq.reports.kernels import write_kernel_report

        path = write_kernel_report([result.to_dict()], args.report)
        print(f"report: {path}", file=sys.stderr)
    return result.exit_code
