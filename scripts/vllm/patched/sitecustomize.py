"""Loaded by every Python process of a vLLM server started with ``SPECEQ_VLLM_PATCH_EXPAND=1``.

scripts/vllm/serve.sh puts this folder on PYTHONPATH, so the API server and its engine-core
process (a separate process) both run it at start-up. It installs an import hook that applies
:mod:`vllm_expand_fix` to vLLM's rejection sampler right after that module is first imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import vllm_expand_fix  # noqa: E402  (scripts/vllm, put on the path just above)


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):  # noqa: ANN001, ANN201
        if fullname != vllm_expand_fix.TARGET_MODULE:
            return None
        sys.meta_path.remove(self)  # find the real module with the other finders
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):  # noqa: ANN001, ANN202
            run(module)
            vllm_expand_fix.install(module)
            print(f"speceq: patched {fullname}.expand_batch_to_tokens (vllm#55005 workaround)", file=sys.stderr)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchAfterImport())
