"""Runs a process (the real ``gpu-exporter``) on NVIDIA's real DCGM bindings over the stand-in libdcgm.

Put this folder and the repository root on ``PYTHONPATH`` (Python imports ``sitecustomize`` at start)
and set:

- ``DCGM_PYTHON_PATH``: one release's bindings folder (named after it: ``.../v4.4.2``);
- ``DCGM_STANDIN_SCENARIO``: a fake-NVML scenario file (src/gpu_exporter/simulate/SCENARIO.md), the engine's host:
  the file is read again whenever it changes, and ``gpuN.lost_after = S`` makes GPU N lost from S
  seconds after start (DCGM keeps listing it; the engine's status for it becomes Lost), and
  ``dcgm.gpuN.aged_after = S`` makes the engine stop updating GPU N's values from S seconds on;
- ``DCGM_STANDIN_RELEASE`` (optional): the release the stand-in library plays, when the folder name does not say;
- ``DCGM_STANDIN_TRACE`` (optional): a file each C call is appended to (``time function status``);
- ``DCGM_STANDIN_ENGINE_RELEASE`` (optional): the release of the host engine behind it (its field table,
  link id packing, loss), where a standalone engine older or newer than the library answers.

Nothing is done until the process imports ``dcgm_structs``; then the module's library loader is
replaced, so that ``dcgm_structs._dcgmInit()`` installs :mod:`tests.dcgmstandin_engine`'s stand-in
instead of loading ``libdcgm.so``.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Any


def _patch(structs: ModuleType) -> None:
    def load(lib_path: Any = None) -> None:
        if structs.dcgmLib is None:
            from tests.dcgmstandin_engine import install_from_environment

            install_from_environment(structs)

    structs._LoadDcgmLibrary = load


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``dcgm_structs`` as Python would, and patches it once it has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != "dcgm_structs":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        run = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _patch(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if os.environ.get("DCGM_STANDIN_SCENARIO") and not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, _Finder())
