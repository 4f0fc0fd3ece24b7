"""Constants shared by the plugin tests (imported by basename: tests/faces/plugin is on sys.path)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TOY_ENGINES = Path(__file__).with_name("toy_engines.py")
#: The inner projects' ini. unraisableexception/threadexception are off in them only: at
#: every config teardown they run gc.collect() several times, ~0.2 s each with torch loaded.
#: ``speceq_workers = 1``: checks sample in the pytest process, whatever the machine's load (the
#: default, auto, would start worker processes on an idle machine only); test_workers_option.py
#: tests the workers.
INI = """\
[pytest]
addopts = --strict-markers -p no:cacheprovider -p no:unraisableexception -p no:threadexception
speceq_workers = 1
filterwarnings =
    error
    ignore::DeprecationWarning:torch.*
    ignore::DeprecationWarning:transformers.*
    ignore::FutureWarning:transformers.*
    ignore::UserWarning:transformers.*
    ignore:Benchmarks are automatically disabled because xdist plugin is active
"""
#: Options of a fast toy run: toy engines (numpy, 6 tokens), no oracle.
TOY = ("--speceq-baseline=toy_engines:baseline_engine", "--speceq-candidate=toy_engines:correct_engine",
       "--speceq-oracle=off")
